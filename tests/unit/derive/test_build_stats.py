"""derive/ on a hand-built run: a RunRecord and HostSteps made here, with no Recorder and no
model, as checks are tested on hand-built stats. The numbers below follow from the values
given by hand, so each one pins a formula of derive/ (a geometric mean of gains over steps,
the zeroed share, where a cut is, an added statistic)."""
from __future__ import annotations

import numpy as np
import pytest

from leaky.config import AuditConfig
from leaky.derive import StatsBuilder, build_stats, fields
from leaky.record.forward import ForwardTaps
from leaky.record.origins import OriginRecords
from leaky.record.run_record import ModuleTable, ParamRecord, RunRecord
from leaky.record.sites import SiteTable, SourceLocator
from leaky.record.step_record import HostStep, NodeRecord
from leaky.stats import CutEvent

CONFIG = AuditConfig()


def _run(sites: SiteTable, **given) -> RunRecord:
    """A run of two backward calls with no optimizer, in no module, nothing recorded but what is `given`."""
    plain = dict(config=CONFIG, backward_calls=2, saw_optimizer=False, optimizer_exists=False, idle_at=None,
                 loss_scaler=lambda: None, compiled_module_keys=frozenset(), target_syncs=(), target_copied=False,
                 coupled_pairs=frozenset(), optimizers=(), units={}, cuts=(), init_sites={}, param_uses={},
                 batch_records=(), bypasses={}, function_checks={}, sites=tuple(sites.sites), modules=ModuleTable(),
                 params=ParamRecord(), origins=OriginRecords(SourceLocator(), lambda fn: fn),
                 taps=ForwardTaps(("hand-built", 0)))
    return RunRecord(**{**plain, **given})


def _relu_step(site: int, arriving: float, leaving: float, nonzero_in: float, nonzero_out: float) -> HostStep:
    """One backward call of a relu node: the norm arriving and leaving, the nonzero elements of each."""
    record = NodeRecord(site=site, seq=7, offset=0, n_in=1, n_act=1, n_param=0, counted=True, numel_in=100)
    return HostStep(np.array([arriving, leaving, nonzero_in, nonzero_out]), [record], [], np.zeros(0), [])


@pytest.fixture
def relu_run():
    sites = SiteTable()
    site = sites.intern("relu", "ReluBackward0", None, ("train.py", 12), seq=7)
    sums = StatsBuilder(CONFIG)
    for step, (into, out) in enumerate([(1.0, 0.5), (2.0, 0.5)]):   # gains 0.5 and 0.25
        sums.add_step(step, _relu_step(site, into, out, nonzero_in=100, nonzero_out=40))
    return sites, site, sums


def test_an_ops_gain_is_the_geometric_mean_over_steps_and_its_zeroed_share_the_counts(relu_run):
    sites, site, sums = relu_run
    stats = build_stats(_run(sites), sums)
    op = stats.op(site)
    assert stats.steps == 2 and op.steps == 2 and op.op == "relu" and op.module is None
    assert op.gain == pytest.approx((0.5 * 0.25) ** 0.5)
    assert op.zeroed_share == pytest.approx(0.6)          # 60 of 100 nonzero elements arriving sent on as 0
    assert (op.source.file, op.source.line) == ("train.py", 12)


def test_a_cut_is_told_where_it_happened(relu_run):
    sites, site, sums = relu_run
    cut = CutEvent("detach", (), None, ("train.py", 20), step=1)
    (told,) = build_stats(_run(sites, cuts=(cut,)), sums).cuts
    assert told.kind == "detach" and told.step == 1 and (told.source.file, told.source.line) == ("train.py", 20)


def test_an_added_statistic_reads_its_instruments_part(relu_run):
    sites, site, sums = relu_run
    with fields.restored():
        @fields.derived("hand_counts")
        def hand_counts(run, sums):
            return {"parts": dict(run.parts), "steps": sums.steps}

        stats = build_stats(_run(sites, parts={"hand_counts": 3}), sums)
    assert stats.derived["hand_counts"] == {"parts": {"hand_counts": 3}, "steps": 2}
    assert "hand_counts" not in build_stats(_run(sites), sums).derived
    assert stats.derived["mode_calls"] == ()   # a built-in field, on a run whose record has no part for it


def test_clean_steps_count_the_sampled_steps_before_the_first_nan():
    """A watch samples far-apart steps: the clean ones are counted, not read off a step index."""
    sites = SiteTable()
    site = sites.intern("relu", "ReluBackward0", None, ("train.py", 12), seq=7)
    sums = StatsBuilder(CONFIG)
    for step in (0, 250, 800, 1300):
        host = _relu_step(site, 1.0, 0.5, nonzero_in=100, nonzero_out=40)
        host.loss = float("nan") if step >= 800 else 1.0
        sums.add_step(step, host)
    stats = build_stats(_run(sites), sums)
    assert stats.steps == 4 and stats.clean_steps == 2
    assert stats.op(site).steps == 2   # the per-site sums stop at the first NaN too

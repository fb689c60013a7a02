"""LK202, LK204 and LK205 on hand-built stats: whose loss it is, what it is measured against,
and what the optimizer's update rule says; plus the loss each step records, on real runs."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import leaky
from leaky.checks import run_all
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity
from leaky.notes import run_notes
from leaky.stats import OptimizerStats, ParamStats, SeriesRow
from leaky.testing import optimizer as optimizer_stats
from leaky.testing import param, series, stats

CONFIG = AuditConfig()


def _optimizer(index: int, kind: str = "Adam", closure_calls: int = 0, lr: float = 1e-3) -> OptimizerStats:
    return optimizer_stats(index=index, kind=kind, closure_calls=closure_calls, lr=lr)


def _param(name: str = "fc.weight", optimizer: int = 0, ratio: float = 1e-3, bound: float | None = 1.0,
           steps: int = 20) -> ParamStats:
    return param(name=name, module_key=0, grad_steps=steps, update_ratios=tuple((s, ratio) for s in range(steps)),
                 optimizer=optimizer, loss_change_bound=bound)


def _rows(losses, optimizer: int | None = 0, start: int = 0, every: int = 1, lr: float = 1e-3):
    return series(losses=losses, optimizer=optimizer, start=start, every=every, lr=lr)


def _interleave(*series):
    rows = [row for rows in zip(*series) for row in rows]
    return tuple(SeriesRow(step, r.loss, r.grad_norm, r.lr, r.optimizer) for step, r in enumerate(rows))


def _codes(findings, severities=("warning", "error")) -> list[str]:
    return [f.code for f in findings if f.severity.value in severities]


def _find(findings, code) -> Finding:
    (finding,) = [f for f in findings if f.code == code]
    return finding


# -- whose loss ------------------------------------------------------------------------
FALLING = [1.0 - 0.02 * i for i in range(40)]
RISING = [0.5 + 0.03 * i for i in range(40)]


def test_two_optimizers_with_separate_models_are_judged_apart():
    series = _interleave(_rows(FALLING, 0), _rows(RISING, 1))
    found = run_all(stats(series=series, optimizers=(_optimizer(0), _optimizer(1))), CONFIG)
    assert _codes(found) == ["LK205"]
    assert "optimizer 1 (Adam" in _find(found, "LK205").message
    assert _find(found, "LK205").evidence["optimizer"] == 1


def test_interleaved_losses_are_not_one_curve():
    # one optimizer's loss steady at 0.6, the other's at 1.4: a single curve would zigzag
    series = _interleave(_rows([0.6] * 40, 0), _rows([1.4 - 0.01 * i for i in range(40)], 1))
    found = run_all(stats(series=series, optimizers=(_optimizer(0), _optimizer(1))), CONFIG)
    assert "LK205" not in _codes(found)


def test_competing_players_are_judged_only_for_overflow():
    series = _interleave(_rows(FALLING, 0), _rows(RISING, 1))
    game = stats(series=series, optimizers=(_optimizer(0), _optimizer(1)), coupled_optimizers=frozenset({(1, 0)}))
    assert _codes(run_all(game, CONFIG)) == []
    assert any("competing objectives" in note for note in run_notes(game))
    overflow = _interleave(_rows(FALLING, 0), _rows(RISING[:30] + [math.inf] * 10, 1))
    found = run_all(stats(series=overflow, optimizers=(_optimizer(0), _optimizer(1)),
                          coupled_optimizers=frozenset({(1, 0)})), CONFIG)
    assert _find(found, "LK205").severity is Severity.ERROR


def test_a_combined_loss_stepped_by_two_optimizers_is_one_objective():
    # one backward, two steps: the second optimizer's row has no loss of its own
    rows = []
    for i, loss in enumerate(RISING):
        rows += [SeriesRow(2 * i, loss, 1.0, 1e-3, 0), SeriesRow(2 * i + 1, None, 1.0, 1e-3, 1)]
    found = run_all(stats(series=tuple(rows), optimizers=(_optimizer(0), _optimizer(1)),
                          coupled_optimizers=frozenset({(0, 1)})), CONFIG)
    assert _codes(found) == ["LK205"]
    assert "of optimizer" not in _find(found, "LK205").message


# -- moving targets --------------------------------------------------------------------
def _sawtooth(periods: int, length: int, level_growth: float, within: float):
    """Each period starts at a level that grows and ends `within` times its start."""
    losses = []
    for p in range(periods):
        level = 1.0 * level_growth ** p
        losses += [level * (1 + (within - 1) * i / (length - 1)) for i in range(length)]
    syncs = tuple(p * length for p in range(1, periods))
    return losses, syncs


def test_a_sawtooth_against_a_synced_target_is_not_divergence():
    losses, syncs = _sawtooth(periods=12, length=20, level_growth=1.2, within=0.5)
    series = _rows(losses)
    assert "LK205" in _codes(run_all(stats(series=series, optimizers=(_optimizer(0),)), CONFIG))   # the old reading
    moving = stats(series=series, optimizers=(_optimizer(0),), target_syncs=syncs)
    assert _codes(run_all(moving, CONFIG)) == []
    assert any("moving target" in note and "every ~20 steps" in note for note in run_notes(moving))


def test_a_loss_rising_within_each_period_of_a_synced_target_diverges():
    losses, syncs = _sawtooth(periods=12, length=20, level_growth=1.0, within=3.0)
    found = run_all(stats(series=_rows(losses), optimizers=(_optimizer(0),), target_syncs=syncs), CONFIG)
    assert _codes(found) == ["LK205"]
    assert "within the periods" in _find(found, "LK205").message


@pytest.mark.parametrize("gaps, judged", [((2, 6, 9, 12), False), ((8, 9, 10, 12), True)])
def test_the_note_says_what_the_checks_decide_about_judging_within_periods(gaps, judged):
    """Sync gaps [2, 6, 9, 12]: the median 7.5 is under loss_min_period (8), where the upper
    median 9 is not. The loss triples within every period: LK205 reports it exactly when the
    periods are judged, and the run's note says the same."""
    syncs = tuple(20 + sum(gaps[:i]) for i in range(len(gaps) + 1))
    cuts = (0,) + syncs
    losses = [1.0 + 2.0 * (step - max(c for c in cuts if c <= step)) / 12 for step in range(syncs[-1] + 12)]
    moving = stats(series=_rows(losses), optimizers=(_optimizer(0),), target_syncs=syncs)
    assert ("LK205" in _codes(run_all(moving, CONFIG))) is judged
    note = next(note for note in run_notes(moving) if "moving target" in note)
    assert ("judged within the periods" in note) is judged
    assert ("no period between changes is long enough" in note) is not judged


def test_a_target_updated_every_step_leaves_only_overflow_to_judge():
    losses, _ = _sawtooth(periods=12, length=20, level_growth=1.0, within=3.0)
    everyday = tuple(range(1, len(losses)))
    assert _codes(run_all(stats(series=_rows(losses), optimizers=(_optimizer(0),), target_syncs=everyday),
                          CONFIG)) == []
    losses[-5:] = [math.nan] * 5
    found = run_all(stats(series=_rows(losses), optimizers=(_optimizer(0),), target_syncs=everyday), CONFIG)
    assert _find(found, "LK205").severity is Severity.ERROR


def test_swings_that_grow_with_the_loss_are_not_an_oscillation():
    # the loss grows 10x with ±5% noise that scales with it: relative swings stay the same
    losses = [(1 + 9 * i / 199) * (1.05 if i % 2 else 0.95) for i in range(200)]
    found = run_all(stats(series=_rows(losses), optimizers=(_optimizer(0),)), CONFIG)
    assert "oscillates" not in " ".join(f.message for f in found)
    growing = [1.0 * (1 + (0.01 + 0.5 * i / 199) * (1 if i % 2 else -1)) for i in range(200)]
    found = run_all(stats(series=_rows(growing), optimizers=(_optimizer(0),)), CONFIG)
    assert "oscillates" in _find(found, "LK205").message


# -- plateaus need evidence ------------------------------------------------------------
FLAT = [3.30 - 0.0004 * i for i in range(40)]


def test_a_slow_start_is_worth_knowing_not_a_warning():
    found = run_all(stats(series=_rows(FLAT), optimizers=(_optimizer(0),), params=(_param(bound=1e-2),)), CONFIG)
    finding = _find(found, "LK204")
    assert finding.severity is Severity.INFO
    assert "learning rate" not in finding.fix


def test_updates_too_small_to_move_the_loss_are_stuck():
    found = run_all(stats(series=_rows(FLAT), optimizers=(_optimizer(0, lr=1e-8),),
                          params=(_param(bound=2e-8),)), CONFIG)
    finding = _find(found, "LK204")
    assert finding.severity is Severity.WARNING
    assert "Raise the learning rate" in finding.fix
    assert "2.0e-08" in finding.message


def test_a_hovering_loss_with_a_too_high_rate_is_told_to_lower_it():
    # the loss hovers; the update ratio is far above the band: never "a larger learning rate"
    high = _param(ratio=2.0, bound=5.0)
    found = run_all(stats(series=_rows([2.0 + 0.01 * (-1) ** i for i in range(40)]),
                          optimizers=(_optimizer(0, kind="SGD", lr=3.0),), params=(high,)), CONFIG)
    finding = _find(found, "LK204")
    assert finding.severity.rank >= Severity.WARNING.rank
    assert "LK202" in finding.evidence["explained_by"]
    assert "Lower the learning rate" in finding.fix and "larger" not in finding.fix


def test_an_info_finding_explains_nothing():
    from leaky.checks.loss_not_decreasing import check

    dead = Finding("dead-units", "LK102", Severity.INFO, "33% silent", "", "fc", "relu", None, 1, {})
    (finding,) = check(stats(series=_rows(FLAT), optimizers=(_optimizer(0),), params=(_param(bound=1e-2),)),
                       CONFIG, [dead])
    assert finding.severity is Severity.INFO and finding.evidence["explained_by"] == []


# -- the optimizer's own mathematics -----------------------------------------------------
def test_the_update_ratio_band_is_not_applied_to_a_quasi_newton_step():
    big = _param(ratio=2.5, bound=1.0)
    for optimizer in (_optimizer(0, kind="LBFGS", lr=0.8), _optimizer(0, kind="SGD", closure_calls=7),
                      _optimizer(0, kind="Rprop")):
        judged = stats(series=_rows(FALLING), optimizers=(optimizer,), params=(big,))
        assert "LK202" not in _codes(run_all(judged, CONFIG)), optimizer.kind
        assert any("update-ratio band" in note for note in run_notes(judged))
    # NOTE: SGD's band is judged; a warning needs a loss that is not still falling (else it is info)
    sgd = stats(series=_rows(FLAT), optimizers=(_optimizer(0, kind="SGD"),), params=(big,))
    assert "LK202" in _codes(run_all(sgd, CONFIG))


# -- the loss each step records (real runs) ------------------------------------------------
def test_a_step_records_the_sum_of_the_losses_it_descends():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    plain = []
    with leaky.audit(steps=None) as audit:
        for _ in range(3):
            opt.zero_grad()
            first = model(torch.randn(8, 4)).pow(2).mean()
            first.backward()
            second = model(torch.randn(8, 4)).abs().mean()
            second.backward()
            opt.step()
            plain.append(first.item() + second.item())
    recorded = [row.loss for row in audit.stats.series]
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(recorded, plain))
    assert [row.optimizer for row in audit.stats.series] == [0, 0, 0]


def test_a_closure_that_zeroes_each_evaluation_records_the_last_one():
    torch.manual_seed(0)
    model = nn.Linear(4, 1).double()
    x, y = torch.randn(32, 4).double(), torch.randn(32, 1).double()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    last = []

    def closure():
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        last.append(loss.item())
        return loss

    with leaky.audit(steps=None) as audit:
        for _ in range(3):
            last.clear()
            opt.step(closure)
            assert len(last) > 1
            assert math.isclose(audit.recorder.monitor.pending[-1][1].item(), last[-1], rel_tol=1e-9) \
                if audit.recorder.monitor.pending else True
    assert audit.stats.optimizers[0].closure_calls >= 2
    assert "LBFGS" in " ".join(audit.report.run["notes"])


def test_a_gan_s_players_are_found_to_compete():
    torch.manual_seed(0)
    gen, disc = nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_d, opt_g = torch.optim.Adam(disc.parameters(), 1e-3), torch.optim.Adam(gen.parameters(), 1e-3)
    bce = nn.BCEWithLogitsLoss()
    with leaky.watch(every=10) as run:
        for _ in range(30):
            disc.zero_grad()
            fake = gen(torch.randn(16, 2))
            (bce(disc(torch.randn(16, 2) + 2), torch.ones(16, 1)) + bce(disc(fake.detach()), torch.zeros(16, 1))).backward()
            opt_d.step()
            gen.zero_grad()
            bce(disc(fake), torch.ones(16, 1)).backward()
            opt_g.step()
    assert run.stats.coupled_optimizers == frozenset({(1, 0)})
    # a watch samples a round of one step per optimizer: the generator's steps are observed too
    assert {s % 2 for s in run.stats.sample_steps} == {0, 1}


def test_a_synced_target_network_is_seen_on_every_step():
    torch.manual_seed(0)
    online, target = nn.Linear(4, 2), nn.Linear(4, 2)
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), 1e-2)
    with leaky.watch(every=50) as run:
        for step in range(60):
            with torch.no_grad():
                goal = target(torch.randn(8, 4)).max(dim=1).values
            loss = (online(torch.randn(8, 4)).max(dim=1).values - goal).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 20 == 19:
                for t, o in zip(target.parameters(), online.parameters()):
                    t.data.copy_(o.data)
    assert run.stats.target_syncs == (20, 40)


def test_small_steps_during_a_warmup_are_not_stuck():
    # nanoGPT's defaults: lr = 6e-4 * (it + 1) / 2001 over its first steps
    rows = tuple(SeriesRow(i, loss, 1.0, 6e-4 * (i + 1) / 2001, 0) for i, loss in enumerate(FLAT))
    found = run_all(stats(series=rows, optimizers=(_optimizer(0, lr=6e-4),), params=(_param(bound=2e-8),)), CONFIG)
    finding = _find(found, "LK204")
    assert finding.severity is Severity.INFO
    assert "warmup" in finding.message and "Raise" not in finding.fix

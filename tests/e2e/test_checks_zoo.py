"""Every check against the zoo: broken models trigger it at the right module and line,
healthy models (including the ones a naive tool would misread) stay quiet."""
from __future__ import annotations

import os

import pytest

import leaky
from leaky.demo import audit_example as _audit_example
from leaky.demo import serious, unmet
from leaky.finding import Severity
from leaky.zoo import EXAMPLES, marker_line

BROKEN = sorted(name for name, ex in EXAMPLES.items() if not ex.healthy)
HEALTHY = sorted(name for name, ex in EXAMPLES.items() if ex.healthy)


def audit_example(name: str, steps: int = 20, seed: int = 0):
    return _audit_example(EXAMPLES[name], steps, seed)


@pytest.mark.parametrize("name", BROKEN)
def test_broken_example_triggers_its_check_at_the_right_place(name):
    report = audit_example(name)
    missing = unmet(EXAMPLES[name], report.findings)
    assert not missing, (missing, [(f.code, f.module, f.source) for f in report.findings])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_example_has_no_warning_or_error(name, seed):
    report = audit_example(name, seed=seed)
    assert serious(report.findings) == [], [f.message for f in serious(report.findings)]


def test_every_check_has_a_broken_example():
    covered = {expect.code for name in BROKEN for expect in EXAMPLES[name].expect}
    # LK308 and LK309 are judged by `leaky probe` on its own runs: their examples are run
    # through it in tests/unit/probe/test_probe.py
    assert covered | set(SEVERAL_RANKS) == set(leaky.checks.CHECKS)


# The checks that need several processes: a zoo example runs in one. Their broken programs
# run under torchrun in these files instead.
SEVERAL_RANKS = {"LK401": "test_replicas.py", "LK402": "test_replicas.py", "LK403": "test_shards.py"}


def test_the_checks_of_several_ranks_have_broken_programs_under_torchrun():
    here = os.path.dirname(__file__)
    for code, name in SEVERAL_RANKS.items():
        with open(os.path.join(here, name), encoding="utf-8") as handle:
            assert code in handle.read(), (code, name)


def test_every_broken_expectation_names_a_real_line():
    for name in BROKEN:
        example = EXAMPLES[name]
        for expect in example.expect:
            if expect.marker:
                assert marker_line(example, expect.marker) > 0


def test_dqn_clamp_reports_the_share_and_suggests_huber():
    report = audit_example("dqn-clamped-td")
    (finding,) = report.by_code("LK106")
    assert finding.severity is Severity.ERROR
    assert finding.op == "clamp"
    assert finding.evidence["zeroed_share"] > 0.5
    assert f"{100 * finding.evidence['zeroed_share']:.0f}%" in finding.message
    assert "smooth_l1_loss" in finding.fix and "clip_grad_norm_" in finding.fix


def test_sigmoid_saturation_quotes_the_local_derivative():
    report = audit_example("sigmoid-big-init")
    finding = next(f for f in report.by_code("LK101") if f.module == "act1")
    assert "s(1−s) is at most 0.25" in finding.message
    assert finding.evidence["median_local_derivative"] < 1e-3
    assert finding.evidence["flat_share"] >= 0.9


def test_vanishing_names_the_ops_where_the_gain_is_lost():
    report = audit_example("sigmoid-big-init")
    (finding,) = report.by_code("LK103")
    lossy = finding.evidence["lossy_ops"]
    assert lossy and lossy[0]["module"] == "act1"
    assert finding.evidence["ratio"] < 1e-3


def test_dead_units_say_when_they_died():
    report = audit_example("relu-high-lr")
    finding = next(f for f in report.by_code("LK102") if f.module == "act1")
    assert finding.evidence["dead_share"] >= 0.5
    assert finding.step is not None and finding.step <= 5
    assert finding.evidence["died_during_observation"] > 0


def test_recurrent_instability_reports_radius_and_profile():
    report = audit_example("rnn-exploding")
    (finding,) = report.by_code("LK105")
    assert finding.evidence["spectral_radius"] > 1
    profile = finding.evidence["profile"]
    assert profile[0] > 100 * profile[-1]
    assert report.recurrences[0]["time_steps"] == 40


def test_non_finite_names_the_backward_trap():
    report = audit_example("nan-sqrt-zero")
    (finding,) = report.by_code("LK107")
    assert finding.op == "sqrt" and finding.evidence["phase"] == "backward"
    assert finding.step == 0
    assert "1/(2·sqrt(x))" in finding.message


def test_log_softmax_underflow_suggests_log_softmax():
    report = audit_example("log-softmax-underflow")
    (finding,) = report.by_code("LK107")
    assert "log_softmax" in finding.fix


def test_no_gradient_path_names_the_cut():
    for name, kind in (("detached-branch", "detach"), ("data-cut", "data"), ("no-grad-encoder", "no_grad"),
                       ("numpy-roundtrip", "detach"), ("unused-branch", None)):
        (finding,) = audit_example(name).by_code("LK108")
        assert finding.evidence["cut"] == kind, name


def test_frozen_backbone_and_target_network_are_not_cut_paths():
    for name in ("frozen-backbone", "dqn-huber"):
        assert audit_example(name).by_code("LK108") == []


def test_demo_finds_and_fixes_karpathys_four_and_a_recipe_check(capsys):
    from leaky.cli import main

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for name in ("sigmoid-big-init", "relu-high-lr", "rnn-exploding", "dqn-clamped-td", "gru-view-for-transpose"):
        assert name in out
    assert "5 of 5" in out

"""`leaky diff` on real runs: a healthy classifier (programs/classifier.py) against copies of
it with one change each. For every change the first parted site, walking from the loss, is
named and the line to look at is the changed line; for the controls (another seed, a pure
rename, a changed print) nothing parts beyond the noise.

A is audited once and run twice more with shifted seeds for the noise (module fixture);
each B is one audited run of 30 steps.
"""
from __future__ import annotations

import os

import pytest

from leaky.diff.session import diff, made_run, measure_noise
from leaky.script import script_program

BASE = os.path.join(os.path.dirname(__file__), "programs", "classifier.py")
STEPS = 30


def _line(text: str, marker: str) -> int:
    hits = [n for n, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def _replace(text: str, marker: str, new: str | None) -> str:
    out = []
    for line in text.splitlines():
        if line.rstrip().endswith(f"# {marker}"):
            if new is not None:
                out.append(line[:len(line) - len(line.lstrip())] + new)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _batch_schedule(text: str) -> str:
    """The schedule's step() moved from the epoch loop into the batch loop."""
    text = _replace(text, "schedule", None)
    return text.replace("        opt.step()\n", "        opt.step()\n        schedule.step()   # per-batch\n")


def _rename(text: str) -> str:
    for old, new in (("fc1", "encoder"), ("self.bn", "self.norm"), ("fc2", "hidden"), ("self.out", "self.head"),
                     ("Net", "Classifier"), ("model", "net")):
        text = text.replace(old, new)
    return text


# name -> (the changed copy, the marker of the line leaky must point at)
CHANGES = {
    "activation swapped for a clamp": (lambda t: _replace(t, "activation", "h = torch.clamp(self.fc2(h), 0, 1)"
                                                          "   # activation"), "activation"),
    "init lost its scaling": (lambda t: _replace(t, "init", "nn.init.normal_(m.weight, std=1.0)   # init"), "init"),
    "model.eval() left on": (lambda t: _replace(t, "mode", "model.eval()   # mode"), "mode"),
    # NOTE: B's last train/eval call, the evaluation's eval(), stays in force from the second epoch
    "model.train() after the evaluation dropped": (lambda t: _replace(t, "back to training", None), "evaluate"),
    "a .detach() added": (lambda t: _replace(t, "cut", "h = self.drop(h).detach()   # cut"), "cut"),
    "the schedule decays per batch": (_batch_schedule, "per-batch"),
    # NOTE: the normalising line is gone from B: the line to look at is the one that made B's
    # inputs, the raw readings (the input-scale difference names where the data was made)
    "data normalisation dropped": (lambda t: _replace(t, "normalise", None), "readings"),
}
CONTROLS = {
    "another seed": (lambda t: t, ["--seed", "7"]),
    "a pure rename": (_rename, []),
    "a different print": (lambda t: _replace(t, "log", 'print("epoch", epoch, "done")   # log'), []),
}


@pytest.fixture(scope="module")
def healthy():
    side = made_run("A", "run", script_program(BASE, []), STEPS)
    return side, measure_noise(side, 2, STEPS)


def _b(tmp_path, text: str, argv: list[str]) -> tuple[object, str]:
    path = tmp_path / "train.py"
    path.write_text(text)
    return made_run("B", "run", script_program(str(path), argv), STEPS), str(path)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_the_first_parted_site_points_at_the_changed_line(name, healthy, tmp_path):
    change, marker = CHANGES[name]
    with open(BASE, encoding="utf-8") as handle:
        text = change(handle.read())
    b, path = _b(tmp_path, text, [])
    a, noise = healthy
    result = diff(a, b, noise=noise)
    assert result["verdict"] == "parted"
    first = result["first_parted"]
    assert first is not None, [row["meaning"] for row in result["loss"]]
    assert first["change"] is not None, first["meaning"]
    assert (first["change"]["file"], first["change"]["line"]) == (path, _line(text, marker)), first["meaning"]
    assert first["differences"] and first["meaning"]


def test_each_change_names_its_own_statistic(healthy, tmp_path):
    """What parted is said in the statistic that carries the change: the clamp zeroes the
    gradient; the lost init scaling changes a gain; the per-batch decay the update ratio;
    the detach stops the backward."""
    a, noise = healthy
    with open(BASE, encoding="utf-8") as handle:
        text = handle.read()
    expected = {"activation swapped for a clamp": "zeroed_share", "init lost its scaling": "gain",
                "the schedule decays per batch": "update_ratio", "a .detach() added": "backward_steps"}
    for name, stat in expected.items():
        b, _ = _b(tmp_path, CHANGES[name][0](text), [])
        first = diff(a, b, noise=noise)["first_parted"]
        assert first["differences"][0]["stat"] == stat, (name, first["meaning"])


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_controls_report_no_difference(name, healthy, tmp_path):
    change, argv = CONTROLS[name]
    with open(BASE, encoding="utf-8") as handle:
        text = change(handle.read())
    b, _ = _b(tmp_path, text, argv)
    a, noise = healthy
    result = diff(a, b, noise=noise)
    parted = [entry["meaning"] for entry in result["sites"] if entry["parted"]]
    assert result["verdict"] == "same", (parted, [row["meaning"] for row in result["loss"]], result["config"])
    assert result["config"] == []

"""`cause`: the line a person has to change when it is not where the leak shows, one
training script per kind (the learning rate, a weight's initialisation, the inputs, a
cut path, dead units after a large update), in the JSON, the terminal, HTML, SARIF and the
run store; and the order of findings, root cause before symptom."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from leaky.checks import sort_findings
from leaky.cli import main
from leaky.store import Store
from leaky.finding import Finding, Severity
from leaky.report.format import short_path
from leaky.testing import activation, op, param, series, source, stats, weight
from leaky.testing import optimizer as optimizer_stats
from tests.check_cases import findings_of, fires


def _script(tmp_path: Path, name: str, body: str) -> tuple[Path, dict[str, int]]:
    """Write a script; return it and the line of each `# MARK: name` comment."""
    text = textwrap.dedent(body).lstrip("\n")
    path = tmp_path / name
    path.write_text(text)
    marks = {line.split("# MARK: ")[1].strip(): i for i, line in enumerate(text.splitlines(), 1) if "# MARK: " in line}
    return path, marks


def _audit(tmp_path: Path, script: Path, *extra: str) -> dict:
    out = tmp_path / "report.json"
    main(["audit", "--no-table", "--json", str(out), *extra, str(script)])
    return json.loads(out.read_text())


def _with(report: dict, code: str, severities=("warning", "error")) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code and f["severity"] in severities]


LOW_LR = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(512, 20); y = (x[:, 0] + x[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=LR)  # MARK: optimizer
for step in range(40):
    i = torch.randint(0, 512, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_learning_rate_far_too_small_names_its_line(tmp_path):
    script, marks = _script(tmp_path, "train.py", LOW_LR.replace("LR", "1e-7"))
    report = _audit(tmp_path, script)
    (finding,) = _with(report, "LK202")
    assert finding["evidence"]["direction"] == "low"
    assert finding["cause"] == {"file": str(script), "line": marks["optimizer"],
                                "what": "the learning rate 1.0e-07 of Adam set here"}
    # the steps it would need, in the run's numbers, from Adam's own update rule
    assert finding["evidence"]["steps_to_change"] > 1e4
    assert "lr / rms(w)" in finding["message"] and "steps to change by 10%" in finding["message"]


@pytest.mark.parametrize("lr", ["1e-3", "1e-4"])
def test_usual_adam_rates_are_not_too_small(tmp_path, lr):
    script, _ = _script(tmp_path, "train.py", LOW_LR.replace("LR", lr))
    assert _with(_audit(tmp_path, script), "LK202", ("info", "warning", "error")) == []


FINE_TUNE = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(2048, 32); y = (x[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 2))
pre = torch.optim.Adam(model.parameters(), lr=1e-3)
with torch.no_grad():
    pass
for step in range(300):                      # "pre-training", not observed: --steps counts from here
    i = torch.randint(0, 2048, (128,))
    loss = F.cross_entropy(model(x[i]), y[i])
    pre.zero_grad(); loss.backward(); pre.step()
y2 = (x[:, :5].sum(1) > 0).long()           # the fine-tuning task: close to the first
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for step in range(60):
    i = torch.randint(0, 2048, (128,))
    loss = F.cross_entropy(model(x[i]), y2[i])
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_fine_tuning_at_1e_5_is_quiet(tmp_path):
    script, _ = _script(tmp_path, "train.py", FINE_TUNE)
    report = _audit(tmp_path, script, "--steps", "all")
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == []
    assert _with(report, "LK202", ("info", "warning", "error")) == []


RAW_INPUTS = """
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F
rng = np.random.default_rng(0)
raw = rng.normal([1500.0, 3.0, 40.0], [300.0, 1.0, 12.0], size=(512, 3))
X = torch.tensor(raw, dtype=torch.float32)  # MARK: inputs
y = torch.tensor(raw[:, 0] / 1000 + raw[:, 2] / 40, dtype=torch.float32)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    for xb, yb in loader:
        loss = F.mse_loss(model(xb).squeeze(-1), yb)
        opt.zero_grad(); loss.backward(); opt.step()
"""


def test_unnormalised_inputs_name_the_line_that_built_them(tmp_path):
    script, marks = _script(tmp_path, "train.py", RAW_INPUTS)
    report = _audit(tmp_path, script)
    (finding,) = _with(report, "LK303")
    assert finding["cause"]["line"] == marks["inputs"]
    assert finding["cause"]["what"].startswith("the inputs built here")
    codes = [f["code"] for f in report["findings"]]
    assert codes.index("LK303") < codes.index("LK101")   # the root cause is read first


BAD_INIT = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(512, 64); y = torch.randint(0, 4, (512,))
layers = []
for _ in range(8):
    layers += [nn.Linear(64, 64), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(64, 4))
for m in model:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.5)  # MARK: init
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(20):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_bad_initialisation_names_the_init_call(tmp_path):
    script, marks = _script(tmp_path, "train.py", BAD_INIT)
    findings = _with(_audit(tmp_path, script), "LK302")
    assert findings
    assert all(f["cause"]["line"] == marks["init"] for f in findings)
    assert all("initialised here" in f["cause"]["what"] for f in findings)


def test_a_default_init_at_fault_names_the_layer_construction():
    ops = (op(site=0, module="fc1", source=source(line=132)), op(site=1, op="relu", module="act"))
    layer = weight(site=0, module="fc1", shape=(64, 100), std=2.0)           # no nn.init call seen
    built = param(name="fc1.weight", shape=(64, 100), source=source(line=12))
    finding = fires("LK302", stats(steps=20, ops=ops, weights=(layer,), params=(built,),
                                   activations=(activation(site=1, op="relu", module="act"),)))
    assert (finding.cause.line, finding.cause.what.split(" (")[0]) == (12, "fc1.weight built here with its default init")
    seen = weight(site=0, module="fc1", shape=(64, 100), std=2.0, init_source=source(line=40))
    finding = fires("LK302", stats(steps=20, ops=ops, weights=(seen,), params=(built,),
                                   activations=(activation(site=1, op="relu", module="act"),)))
    assert finding.cause.line == 40 and finding.cause.what.startswith("fc1.weight initialised here (std 2")


def _finding(code: str, severity=Severity.WARNING, module=None, **evidence) -> Finding:
    return Finding(code.lower(), code, severity, "m", "f", module, evidence=evidence)


def test_a_finding_that_explains_another_is_read_first():
    flat = _finding("LK204", explained_by=["LK304"])
    precision = _finding("LK304")
    dead = _finding("LK102", Severity.ERROR)
    assert [f.code for f in sort_findings([flat, precision, dead])] == ["LK102", "LK304", "LK204"]
    saturated = _finding("LK101", Severity.ERROR, module="1")
    inputs = _finding("LK303", Severity.ERROR, module="0", explains=[{"code": "LK101", "module": "1"}])
    assert [f.code for f in sort_findings([saturated, inputs])] == ["LK303", "LK101"]
    other = _finding("LK101", Severity.ERROR, module="7")
    assert [f.code + (f.module or "") for f in sort_findings([other, inputs])] == ["LK1017", "LK3030"]


def test_cause_in_json_terminal_html_sarif_and_the_store(tmp_path):
    script, marks = _script(tmp_path, "train.py", LOW_LR.replace("LR", "1e-7"))
    html, sarif, db = tmp_path / "r.html", tmp_path / "r.sarif", tmp_path / "runs.db"
    out = tmp_path / "report.json"
    main(["audit", "--no-table", "--json", str(out), "--html", str(html), str(script)])
    main(["audit", "--no-table", "--format", "sarif", "--output", str(sarif), str(script)])
    report = json.loads(out.read_text())
    (finding,) = _with(report, "LK202")
    assert finding["cause"]["line"] == marks["optimizer"]
    page = html.read_text()
    assert '<p class="cause"><b>Change</b>' in page and f"train.py:{marks['optimizer']}" in page
    (result,) = [r for r in json.loads(sarif.read_text())["runs"][0]["results"] if r["ruleId"] == "LK202"]
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["region"]["startLine"] == marks["optimizer"]
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "train.py"
    assert related["message"]["text"].startswith("change: the learning rate")

    with Store(str(db)) as store:
        run = store.start_run(str(script), [], torch_version="x", leaky_version="y", device="cpu", git_commit=None)
        store.record_finding(run, finding, 3)
        (back,) = store.findings(run)
    assert back["cause"] == finding["cause"]


def test_the_terminal_prints_the_line_to_change(tmp_path, capsys):
    script, marks = _script(tmp_path, "train.py", LOW_LR.replace("LR", "1e-7"))
    main(["audit", "--no-table", str(script)])
    out = " ".join(capsys.readouterr().out.split())
    assert f"change: {short_path(str(script))}:{marks['optimizer']}, the learning rate 1.0e-07 of Adam set here" in out


def _slow_stats(kind: str, losses, bound: float):
    """One 64×20 weight of rms 0.1 (norm 3.58) whose steps moved it ~1e-6 of its norm, at lr 1e-7."""
    rows = tuple((s, 1e-6) for s in range(len(losses)))
    weight_param = param(name="fc.weight", shape=(64, 20), update_ratios=rows, weight_norm=0.1 * (64 * 20) ** 0.5,
                         loss_change_bound=bound)
    return stats(steps=len(losses), params=(weight_param,),
                 optimizers=(optimizer_stats(kind=kind, lr=1e-7, source=source(line=9)),),
                 series=series(losses=losses, optimizer=0, lr=1e-7))


FLAT = [0.69 + 0.01 * ((-1) ** s) for s in range(30)]
NOISY_DROP = [0.75] * 5 + [0.69] * 25           # a drop the updates cannot have made


def test_lk202_too_slow_unit():
    finding = fires("LK202", _slow_stats("Adam", FLAT, bound=1e-7))
    assert finding.severity is Severity.WARNING and finding.cause.line == 9
    # lr / rms(w) = 1e-7 / 0.1 = 1e-6 per step at most: 10% of the norm takes >= 100,000 steps
    assert finding.evidence["ratio_bound"] == pytest.approx(1e-6)
    assert finding.evidence["steps_to_change_at_bound"] == pytest.approx(1e5)
    assert "~100,000 steps to change by 10%" in finding.message
    noisy = fires("LK202", _slow_stats("Adam", NOISY_DROP, bound=1e-7))
    assert noisy.severity is Severity.WARNING and "the batches' noise, not learning" in noisy.message
    learning = fires("LK202", _slow_stats("Adam", NOISY_DROP, bound=1e-2))
    assert learning.severity is Severity.INFO and "may be by design" in learning.message


def test_lk202_too_slow_is_judged_only_where_lr_alone_sets_the_step():
    # SGD's step is lr·||g||: a small one may be a small gradient (a converged model)
    assert [f for f in findings_of("LK202", _slow_stats("SGD", FLAT, bound=1e-7)) if f.severity is not Severity.INFO] == []


DETACHED = """
import torch, torch.nn as nn, torch.nn.functional as F
x = torch.randn(256, 8); y = torch.randint(0, 3, (256,))
enc = nn.Linear(8, 16); head = nn.Linear(16, 3)
opt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()), lr=1e-3)
for step in range(10):
    h = torch.relu(enc(x)).detach()  # MARK: cut
    loss = F.cross_entropy(head(h), y)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_cut_path_names_the_cut(tmp_path):
    script, marks = _script(tmp_path, "train.py", DETACHED)
    (finding,) = _with(_audit(tmp_path, script), "LK108")
    assert finding["cause"] == {"file": str(script), "line": marks["cut"], "what": "the gradient path cut here by .detach()"}


KILLED = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
x = torch.rand(512, 256); y = torch.randint(0, 20, (512,))   # pixels in [0, 1]: every unit moves one way
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 20))
opt = torch.optim.Adam(model.parameters(), lr=0.1)  # MARK: optimizer
for step in range(20):
    i = torch.randint(0, 512, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_units_killed_by_a_large_update_name_the_learning_rate(tmp_path):
    script, marks = _script(tmp_path, "train.py", KILLED)
    dead = [f for f in _with(_audit(tmp_path, script), "LK102", ("info", "warning", "error"))
            if f["evidence"]["died_during_observation"]]
    assert dead, "the units must die during the observed steps"
    assert all(f["cause"] == {"file": str(script), "line": marks["optimizer"],
                              "what": "the learning rate 0.1 of Adam set here"} for f in dead)


def test_a_loss_that_overflows_on_raw_features_names_the_learning_rate(tmp_path):
    """Linear regression on raw features (areas ~1e3, years ~2e3) with SGD at 1e-4: the
    curvature grows with feature², so the rate is far past 2/λmax and the loss overflows in
    a few steps. What explains the rise (a gradient norm that overflowed, a NaN at the loss)
    names no line of its own: the line to change is the learning rate, which their advice lowers."""
    script, marks = _script(tmp_path, "regression.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        area = 500 + 3000 * torch.rand(1000)
        year = 1950 + 70 * torch.rand(1000)
        x = torch.stack([area, year], 1)
        y = (0.12 * area + 0.4 * (year - 1950) + 10 * torch.randn(1000)).unsqueeze(1)
        model = nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)  # MARK: lr
        for step in range(40):
            idx = torch.randint(0, 1000, (200,))
            loss = nn.functional.mse_loss(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)
    (rising,) = _with(_audit(tmp_path, script, "--steps", "20"), "LK205")
    assert rising["evidence"].get("explained_by"), rising   # told under the overflow that explains it
    assert rising["cause"]["line"] == marks["lr"], rising["cause"]

"""torch.compile: leaky keeps out of compiled code (leaky/record/compiled.py).

The model is a small character GPT in nanoGPT's shape (token and position embeddings,
pre-norm blocks of causal SDPA attention and a GELU MLP, a final LayerNorm, a linear head),
compiled with torch.compile's default inductor backend, as users run it. The first compile
in a fresh environment takes about a minute on one CPU core; inductor's on-disk cache makes
the later compiles of the same graph cheap. The test of a block cut inside the compiled
model uses aot_eager (another graph, and what it tests does not depend on the backend);
so does the test of the other ways to compile.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import leaky
from leaky.cli import main
from leaky.record import compiled
from tests.conftest import no_leaky_left

SCRIPT = '''
"""A tiny character GPT, compiled: python train.py"""
import torch
from torch import nn
from torch.nn import functional as F

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
VOCAB = sorted(set(TEXT))
DATA = torch.tensor([VOCAB.index(c) for c in TEXT])
BLOCK, EMBD, HEADS = 16, 32, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(EMBD, 3 * EMBD)
        self.proj = nn.Linear(EMBD, EMBD)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(EMBD), Attention(), nn.LayerNorm(EMBD)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(len(VOCAB), EMBD), nn.Embedding(BLOCK, EMBD)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln_f = nn.LayerNorm(EMBD)
        self.head = nn.Linear(EMBD, len(VOCAB), bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)  # BLOCK
        return self.head(self.ln_f(x))


def train(model, steps=30):
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        ix = torch.randint(0, len(DATA) - BLOCK - 1, (8,))
        x = torch.stack([DATA[i:i + BLOCK] for i in ix])
        y = torch.stack([DATA[i + 1:i + BLOCK + 1] for i in ix])
        logits = model(x)  # LOGITS
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.compile(GPT(){backend})
    print(f"final loss {{train(model)[-1].item():.3f}}")
'''
CLAMPED = ("logits = model(x)  # LOGITS", "logits = torch.clamp(model(x), 0.0, 1.0)  # LOGITS")
CUT = ("x = block(x)  # BLOCK", "x = block(x).detach() if block is self.blocks[0] else block(x)  # BLOCK")


def _script(tmp_path, mutation=None, backend=""):
    text = SCRIPT.format(backend=backend)
    if mutation is not None:
        text = text.replace(*mutation)
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def _line(path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


class _TorchLog(logging.Handler):
    """Warnings torch logs (Dynamo's recompile-limit message is a log record, not a warning)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def torch_warnings():
    """Every warning and every torch log record at WARNING or above, while the test runs."""
    log = _TorchLog()
    logging.getLogger("torch").addHandler(log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught, log.records
    logging.getLogger("torch").removeHandler(log)


def _texts(caught, records) -> list[str]:
    # NOTE: DeprecationWarnings that torch raises while importing its own modules (torch.jit's
    # script_method, when Dynamo loads) appear without leaky too; leaky's and the user's would not be
    # DeprecationWarnings from torch's files.
    return ([f"{w.filename}:{w.lineno}: {w.message}" for w in caught
             if not (issubclass(w.category, DeprecationWarning) and "/torch/" in w.filename)]
            + [f"{r.name}: {r.getMessage()}" for r in records])


def _audit(path, capsys, *extra):
    report = path.parent / "report.json"
    code = main(["audit", "--json", str(report), *extra, str(path)])
    return code, json.loads(report.read_text()), capsys.readouterr().err


def test_a_healthy_compiled_gpt_gets_no_finding_no_warning_and_one_note(tmp_path, capsys, torch_warnings):
    path = _script(tmp_path)
    code, report, err = _audit(path, capsys)
    assert code == 0
    assert [f["code"] for f in report["findings"] if f["severity"] in ("warning", "error")] == []
    assert _texts(*torch_warnings) == []   # no recompile limit, no untraceable sys._getframe, no global hooks
    notes = [line for line in err.splitlines() if "torch.compile'd" in line]
    assert len(notes) == 1 and notes[0].startswith("leaky: model (GPT) is torch.compile'd")
    assert "TORCH_COMPILE_DISABLE=1" in notes[0]
    assert report["run"]["steps"] == 20 and len(report["run"]["losses"]) == 20
    names = {param["name"] for param in report["parameters"]}
    assert {"wte.weight", "blocks.0.attn.qkv.weight", "head.weight"} <= names   # no _orig_mod
    assert all(param["grad_steps"] == 20 and param["update_ratio"] for param in report["parameters"])
    assert no_leaky_left() == []


def test_a_clamp_on_the_compiled_models_logits_is_a_dead_zone_at_its_line(tmp_path, capsys, torch_warnings):
    path = _script(tmp_path, CLAMPED)
    code, report, _ = _audit(path, capsys)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["severity"] in ("warning", "error")]
    assert (finding["code"], finding["severity"], finding["op"]) == ("LK106", "error", "clamp")
    assert finding["source"]["line"] == _line(path, "# LOGITS")
    assert _texts(*torch_warnings) == []


def test_a_block_cut_inside_compiled_code_is_found_and_located_with_compile_disabled(tmp_path, capsys,
                                                                                      torch_warnings):
    """aot_eager: leaky does not see inside compiled code whatever the backend."""
    path = _script(tmp_path, CUT, backend=', backend="aot_eager"')
    code, report, _ = _audit(path, capsys)
    cut_off = {f["module"] for f in report["findings"] if f["code"] == "LK108"}
    assert code == 1 and {"wte", "wpe", "blocks.0.attn.qkv", "blocks.0.mlp.0"} <= cut_off
    assert not any(m.startswith("blocks.1") or m == "head" for m in cut_off)
    for finding in report["findings"]:
        assert finding["source"] is None and "inside torch.compile'd code" in finding["message"]
        assert "TORCH_COMPILE_DISABLE=1" in finding["fix"]
    assert _texts(*torch_warnings) == []

    with torch._dynamo.config.patch(disable=True):   # TORCH_COMPILE_DISABLE=1
        code, report, err = _audit(path, capsys)
    assert code == 1 and "torch.compile'd" not in err
    lines = {f["source"]["line"] for f in report["findings"] if f["code"] == "LK108"}
    assert lines == {_line(path, "# BLOCK")}
    assert no_leaky_left() == []


def _load(tmp_path):
    spec = importlib.util.spec_from_file_location("compiled_gpt", _script(tmp_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(gpt, instrument, steps=12):
    torch.manual_seed(0)
    model = gpt.GPT()
    compiled = torch.compile(model)
    with instrument:
        losses = gpt.train(compiled, steps)
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_compiled_training_is_bit_identical_and_compiled_once(tmp_path, torch_warnings):
    """The first compile happens under the audit: a plain run and a watch (the mode on and off
    between samples) then reuse its graphs, and give the same losses and parameters."""
    gpt = _load(tmp_path)
    audited = _train(gpt, leaky.audit(steps=None))
    graphs = _graphs()
    plain = _train(gpt, _Nothing())
    watched = _train(gpt, leaky.watch(every=2))
    assert _graphs() == graphs   # nothing of leaky's is guarded on: no recompile
    for losses, state in (audited, watched):
        assert all(torch.equal(a, b) for a, b in zip(plain[0], losses))
        assert all(torch.equal(plain[1][key], state[key]) for key in plain[1])
    assert _texts(*torch_warnings) == []
    assert no_leaky_left() == []


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _MLP(nn.Module):
    """Not a torch.nn container: Dynamo compiles a user's forward, not nn.Sequential's."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def _mlp():
    torch.manual_seed(0)
    return _MLP()


def _fit(model, forward, step=None, steps=4):
    optimizer = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    step = step(optimizer) if step else optimizer.step
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        loss = forward(torch.randn(32, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        step()
        losses.append(loss.detach().clone())
    return losses + [p.detach().clone() for p in model.parameters()]


def _in_place(model):
    model.compile(backend="aot_eager")
    return model


FORMS = {   # how a script compiles: (the forward to call, a compiled optimizer step or None)
    "module.compile()": lambda model: (_in_place(model), None),
    "a compiled function": lambda model: (torch.compile(lambda x: model(x), backend="aot_eager"), None),
    "a compiled optimizer step": lambda model: (model, lambda opt: torch.compile(opt.step, backend="aot_eager")),
    "a compiled step under a scheduler": lambda model: (model, _scheduled_step),
}


def _scheduled_step(optimizer):
    torch.optim.lr_scheduler.StepLR(optimizer, 1)   # puts a wrapper of its own in optimizer.step
    return torch.compile(optimizer.step, backend="aot_eager")


@pytest.mark.parametrize("form", sorted(FORMS))
def test_other_ways_to_compile_are_left_alone_too(form, torch_warnings):
    def run(audited):
        torch._dynamo.reset()
        model = _mlp()
        with leaky.audit(steps=None) if audited else _Nothing() as audit:
            forward, step = FORMS[form](model)
            values = _fit(model, forward, step)
        return values, audit, model

    plain, _, _ = run(False)
    graphs = _graphs()
    seen, audit, model = run(True)
    assert _graphs() > graphs   # compiled again, under the audit
    assert all(torch.equal(a, b) for a, b in zip(plain, seen))
    assert _texts(*torch_warnings) == []
    report = audit.report
    assert report.run["steps"] == 4
    assert {p.name for p in audit.stats.params} == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert all(p.grad_steps == 4 and p.update_ratio for p in audit.stats.params)
    compiled_note = [note for note in report.run["notes"] if "torch.compile'd" in note]
    assert len(compiled_note) == (0 if "step" in form else 1)
    assert no_leaky_left() == []
    if form == "module.compile()":
        assert model._compiled_call_impl.__code__.co_filename != compiled.__file__   # given back on exit


def test_an_error_inside_a_compiled_call_leaves_nothing_behind():
    model = torch.compile(_mlp(), backend="aot_eager")
    with pytest.raises(RuntimeError):
        with leaky.audit():
            model(torch.randn(4, 3))   # wrong width: raises inside the compiled call
    assert no_leaky_left() == []


def test_dynamos_own_patch_made_during_an_audit_outlives_it():
    """Dynamo wraps Module.__init__ the first time compiled code runs; when that happens inside
    an audit, the audit's exit must not take it away with its own wrapper."""
    code = textwrap.dedent("""
        import torch, leaky
        from torch._dynamo import mutation_guard
        with leaky.audit():
            model = torch.compile(torch.nn.Linear(3, 1), backend="eager")
            model(torch.randn(2, 3)).sum().backward()
        print(torch.nn.Module.__init__.__code__.co_filename == mutation_guard.__file__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_library_that_wraps_torch_compile_during_the_audit_keeps_its_wrapper():
    """Lightning wraps torch.compile when it is imported, which may happen while the audit
    runs: the audit's exit leaves that wrapper (and leaky's, beneath it, only calls through)."""
    before = torch.compile
    try:
        with leaky.audit():
            inner = torch.compile

            def theirs(*args, **kwargs):
                return inner(*args, **kwargs)

            torch.compile = theirs
        assert torch.compile is theirs and no_leaky_left() == []
        double = torch.compile(lambda x: 2 * x, backend="eager")
        assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
        assert no_leaky_left() == []   # leaky's, beneath, installed nothing again
    finally:
        torch.compile = before

"""LK301 loss-output-mismatch on hand-built stats: stats that must trigger it and stats that a
naive rule would misread but that must not (ruff-style fixtures, no training run); the last test
trains real models (a class dimension of size 1)."""
from __future__ import annotations

from pathlib import Path

from leaky.finding import Severity
from leaky.testing import loss_probe, op, source, stats
from tests.check_cases import fires, quiet


# -- LK301 loss-output-mismatch ------------------------------------------------------------
def _loss_after(node: str, name: str, **fields):
    producer = op(site=3, op=name, node=node, module="head", source=source(line=118))
    probe = loss_probe(input_node=node, input_site=3, source=source(line=120), **fields)
    return stats(steps=20, ops=(producer,), losses_seen=(probe,))


def test_lk301_cross_entropy_after_a_softmax_points_at_the_softmax():
    finding = fires("LK301", _loss_after("SoftmaxBackward0", "softmax", low=0.01, high=0.9))
    assert (finding.severity, finding.module, finding.op, finding.source.line) == \
        (Severity.ERROR, "head", "softmax", 118)
    assert "cross_entropy applies its own normalisation, but its input already went through softmax" in finding.message
    assert "(here [0.01, 0.9])" in finding.message
    assert finding.evidence["input_range"] == [0.01, 0.9]


def test_lk301_binary_cross_entropy_on_raw_outputs_points_at_the_loss_call():
    probe = loss_probe(op="binary_cross_entropy", expects="probabilities", input_shape=(32, 1), target_shape=(32, 1),
                       target_dtype="float32", low=-2.0, high=3.0, source=source(line=125))
    finding = fires("LK301", stats(steps=20, losses_seen=(probe,)))
    assert (finding.severity, finding.op, finding.source.line) == (Severity.ERROR, "binary_cross_entropy", 125)
    assert "it was given [-2, 3]" in finding.message


def test_lk301_log_softmax_into_cross_entropy_or_nll_and_tanh_onto_its_range_are_quiet():
    # softmax(log_softmax(z)) = softmax(z): the same loss and gradient as raw logits
    quiet("LK301", _loss_after("LogSoftmaxBackward0", "log_softmax", low=-9.0, high=-0.01))
    quiet("LK301", _loss_after("LogSoftmaxBackward0", "log_softmax", op="nll_loss", expects="log-probabilities",
                               low=-9.0, high=-0.01))
    quiet("LK301", _loss_after("TanhBackward0", "tanh", op="mse_loss", expects="values", input_shape=(32, 1),
                               target_shape=(32, 1), target_dtype="float32", low=-0.9, high=0.9,
                               target_low=-1.0, target_high=1.0))


# -- a class dimension of size 1, on real models -------------------------------------------
def _audited(out_features: int, loss_of):
    import torch
    from torch import nn

    import leaky

    torch.manual_seed(0)
    model = nn.Linear(20, out_features)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with leaky.audit(steps=20) as run:
        for _ in range(20):
            x, t = torch.rand(32, 20), torch.rand(32, 1)
            loss = loss_of(model(x), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run.report


def test_lk301_cross_entropy_over_one_class_is_an_error_at_the_loss():
    """pytorch/examples' DDP tutorial: a Linear(20, 1) trained with F.cross_entropy on float
    targets. The softmax over one class is 1, the loss -0.0 at every step, every gradient 0."""
    import torch.nn.functional as F

    report = _audited(1, lambda out, t: F.cross_entropy(out, t))   # ONE-CLASS
    (finding,) = report.by_code("LK301")
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# ONE-CLASS" in text)
    assert (finding.severity, finding.op, finding.source.line) == (Severity.ERROR, "cross_entropy", line)
    assert "a class dimension of size 1" in finding.message and finding.evidence["input_shape"] == [32, 1]
    # one output with the losses made for one output, and cross_entropy over 3 classes: quiet
    assert not _audited(1, lambda out, t: F.binary_cross_entropy_with_logits(out, t.round())).by_code("LK301")
    assert not _audited(1, lambda out, t: F.mse_loss(out, t)).by_code("LK301")
    assert not _audited(3, lambda out, t: F.cross_entropy(out, (t[:, 0] * 3).long().clamp(max=2))).by_code("LK301")

"""`assert_gradient_flow`: a leaky audit inside the user's own pytest suite.

    from leaky.testing import assert_gradient_flow

    def test_model_learns():
        assert_gradient_flow(model, (x, y), torch.nn.functional.cross_entropy,
                             optimizer=torch.optim.Adam(model.parameters()), steps=5,
                             accept=["update-ratio"])

It fails with the findings in the message; `accept` names (or codes) findings that are
expected. Without an optimizer it runs one forward and backward and leaves the
parameters' .grad as they were.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import torch

from leaky.audit import audit
from leaky.finding import Finding, Severity
from leaky.report.terminal import finding_renderable
from leaky.stats import AuditStats

_RANK = {"error": 2, "warning": 1, "info": 0}


def _forward(model, batch) -> tuple[Any, Any]:
    if isinstance(batch, dict):
        return model(**batch), batch
    inputs, target = batch
    if isinstance(inputs, (tuple, list)):
        return model(*inputs), target
    return model(inputs), target


def assert_gradient_flow(model: torch.nn.Module, batch, loss_fn: Callable, *,
                         optimizer: torch.optim.Optimizer | None = None, steps: int = 1,
                         accept: Iterable[str] = (), fail_on: str = "warning") -> list[Finding]:
    """Audit `steps` training steps on `batch`; raise AssertionError on unaccepted findings.

    batch: (inputs, target) with loss = loss_fn(model(inputs), target), or a dict of model
    keyword arguments with loss = loss_fn(model(**batch), batch). Returns all findings.
    """
    if fail_on not in _RANK:
        raise ValueError(f"fail_on must be one of {sorted(_RANK)}, not {fail_on!r}")
    accepted = {a.lower() for a in accept}
    saved = {p: p.grad for p in model.parameters()} if optimizer is None else {}
    try:
        with audit(steps=None) as observed:
            for _ in range(max(1, steps)):
                output, target = _forward(model, batch)
                loss = loss_fn(output, target)
                if optimizer is not None:
                    optimizer.zero_grad()
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                else:
                    break
    finally:
        for param, grad in saved.items():
            param.grad = grad
    findings = list(observed.report.findings)
    failing = [f for f in findings if f.severity.rank >= _RANK[fail_on]
               and f.name not in accepted and f.code.lower() not in accepted]
    if failing:
        lines = "\n".join(str(finding_renderable(f)) for f in failing)
        raise AssertionError(f"leaky found {len(failing)} gradient-flow problem(s) "
                             f"(accept=[...] takes names or codes):\n{lines}")
    return findings


def stats(**fields) -> AuditStats:
    """Hand-built AuditStats for a check's small tests: every field empty unless given,
    e.g. `stats(series=(SeriesRow(0, 1.0, 1.0, 0.1, 0), ...), optimizers=(...,))`."""
    return dataclasses.replace(AuditStats.empty(), **fields)


__all__ = ["assert_gradient_flow", "stats", "Severity"]

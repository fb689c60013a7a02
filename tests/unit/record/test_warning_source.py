"""Torch's warnings under an audit point where they point without one: the user's line.

Without `record/warning_source.py` every warning raised inside an op that leaky's
torch-function mode dispatched is attributed to leaky/record/opmode.py, looks like leaky's
problem and escapes the user's own warning filters.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from tests.conftest import no_leaky_left


def _train(steps: int = 3) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16)
    for _ in range(steps):
        out = model(x)
        copied = torch.tensor(out.sum(), requires_grad=True)  # C++ warning: copy-constructing a tensor
        loss = F.mse_loss(out, y) + 0 * copied  # Python warning, stacklevel=2: broadcasting a target
        opt.zero_grad()
        loss.backward()
        opt.step()


def _caught(run) -> list[tuple[str, int, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [(w.filename, w.lineno, str(w.message)[:30]) for w in caught if issubclass(w.category, UserWarning)]


def test_warnings_point_at_the_same_lines_as_without_leaky():
    plain = _caught(_train)

    def audited():
        with leaky.audit(steps=None):
            _train()

    observed = _caught(audited)
    assert plain and observed == plain
    assert all(filename == __file__ for filename, _, _ in observed)


def test_the_users_filters_still_apply():
    def audited():
        warnings.filterwarnings("ignore", message="Using a target size")
        with leaky.audit(steps=None):
            _train()

    observed = _caught(audited)
    assert observed and not any("Using a target" in text for _, _, text in observed)


def test_default_action_shows_each_line_once_as_without_leaky():
    def run(audit: bool):
        def body():
            warnings.resetwarnings()
            warnings.simplefilter("default")
            registry = globals().get("__warningregistry__")
            if registry:
                registry.clear()
            if audit:
                with leaky.audit(steps=None):
                    _train(steps=4)
            else:
                _train(steps=4)
        with warnings.catch_warnings(record=True) as caught:
            body()
        return [(w.filename, w.lineno) for w in caught if issubclass(w.category, UserWarning)]

    assert run(audit=True) == run(audit=False)


def test_an_error_filter_raises_at_the_users_op_as_without_leaky():
    def audited():
        with leaky.audit(steps=None):
            _train()

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(UserWarning, match="copy construct"):
            audited()
    assert no_leaky_left() == []


def test_nothing_is_left_after_the_audit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        showwarning, filters = warnings.showwarning, list(warnings.filters)
        with leaky.audit(steps=None):
            _train()
        assert warnings.showwarning is showwarning
        assert warnings.filters == filters

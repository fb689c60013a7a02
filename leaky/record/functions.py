"""Custom autograd.Functions: name their backward nodes, and re-check each one once.

`Function.apply` does not pass through torch-function modes, so this instrument wraps the
classmethod for the duration of the audit (restored on exit, also on errors). Functions
defined inside torch itself (checkpointing, say) are left alone.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.autograd.function import Function

from leaky.process.patch import Patch
from leaky.process.guards import outside_graphs
from leaky.record.gradcheck import GradcheckResult, check_function
from leaky.record.call_args import tensors_in

if TYPE_CHECKING:
    from leaky.record.roles import FunctionHost


@dataclass
class FunctionCheck:
    name: str
    module: int | None
    where: tuple[str, int] | None       # the call
    result: GradcheckResult
    backward_at: tuple[str, int] | None = None   # where its backward is defined: where a fix goes
    gradient_at: tuple = ()   # per input: the line of backward that computes its gradient (or None)


def _backward_location(cls) -> tuple[str, int] | None:
    try:
        backward = inspect.unwrap(cls.backward)
        lines, first = inspect.getsourcelines(backward)
    except (TypeError, OSError):
        return None
    offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith("def ")), 0)
    return inspect.getsourcefile(backward), first + offset   # the def line, after decorators


def _gradient_lines(cls) -> tuple:
    """Per input of a Function, the line of its backward that computes that input's
    gradient: the i-th value of the return statement, or, when it is a plain name, the
    last assignment to that name before it. Empty when backward has several returns."""
    try:
        backward = inspect.unwrap(cls.backward)
        lines, first = inspect.getsourcelines(backward)
        filename = inspect.getsourcefile(backward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, SyntaxError, IndentationError):
        return ()
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None] if func else []
    if len(returns) != 1:
        return ()
    value = returns[0].value
    values = value.elts if isinstance(value, ast.Tuple) else [value]
    assigned: dict[str, int] = {}
    for node in sorted((n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))),
                       key=lambda n: n.lineno):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and node.lineno <= returns[0].lineno:
                    assigned[name.id] = node.lineno
    result = []
    for item in values:
        if isinstance(item, ast.Constant) and item.value is None:
            result.append(None)
            continue
        line = assigned.get(item.id, item.lineno) if isinstance(item, ast.Name) else item.lineno
        result.append((filename, first + line - 1))
    return tuple(result)


def _user_function(cls) -> bool:
    return not cls.__module__.startswith("torch")


class CustomFunctions:
    """Context manager: while active, user Functions are attributed and checked."""

    def __init__(self, recorder: "FunctionHost") -> None:
        self.recorder = recorder
        self.checks: dict[type, FunctionCheck] = {}
        self._busy = False
        self._patch = Patch(Function, "apply", self._observed)

    def __enter__(self) -> "CustomFunctions":
        self._patch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._patch.__exit__(*exc)

    def _observed(self, apply_method: classmethod) -> classmethod:
        original, watch = apply_method.__func__, self

        def apply(cls, *args, **kwargs):
            if watch._busy or not _user_function(cls) or not watch.recorder.observing:
                return original(cls, *args, **kwargs)
            if cls not in watch.checks and torch.is_grad_enabled():
                watch.recorder.guarded(watch._check, cls, original, args, kwargs)
            out = original(cls, *args, **kwargs)
            if torch.is_grad_enabled():
                watch.recorder.guarded(watch._attribute, cls, args, kwargs, out)
            return out

        return classmethod(outside_graphs(apply, traced=original))

    def _attribute(self, cls, args, kwargs, out) -> None:
        outputs = tensors_in(out)
        if outputs:
            self.recorder.on_op(cls.__name__, args, kwargs, outputs)

    def _check(self, cls, original, args, kwargs) -> None:
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return
        rec = self.recorder
        where, module = rec.locator.locate(), rec.modules.current
        self._busy = True
        try:
            # NOTE: check_function restores the random generators it re-seeds, so the user's
            # random streams (dropout after this call, say) are untouched.
            with torch._C.DisableTorchFunction():
                result = check_function(lambda *xs: original(cls, *xs, **kwargs), args)
        finally:
            self._busy = False
        self.checks[cls] = FunctionCheck(cls.__name__, module, where, result, _backward_location(cls),
                                         _gradient_lines(cls))

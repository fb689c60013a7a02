"""torch.compile: leaky keeps out of compiled code.

Dynamo compiles the Python it meets. Had it met leaky's instruments in a compiled module
(the torch-function mode, the global module hooks), it would have traced leaky's own code
into the user's graphs, broken them at every op (a frame walk cannot be traced),
recompiled leaky's functions up to its recompile limit and run the model op by op: another
program, slower and rounded differently, with warnings that name leaky's functions. So:

- `CompiledCalls` runs every call of compiled code (`torch.compile(module)`; and, made
  while the audit runs, `module.compile()` and compiled functions) with leaky's mode,
  module hooks and `Function.apply` patch taken off: Dynamo sees what it sees without
  leaky, and losses and parameters are the same bit for bit. A compiled module is named
  first, so its parameters keep their paths. A compiled `optimizer.step` runs without
  leaky's step hooks, which are called around it instead.
- `outside_graphs` wraps every callback leaky hands to torch. Traced by Dynamo anyway (a
  module compiled in place before the audit began), it is a pass-through: nothing of
  leaky's enters a graph. Called eagerly while compiled code runs (a hook between two
  graphs), it runs with Dynamo off, so no function of leaky's is compiled.

What leaky sees of compiled code is what crosses its boundary: the loss, each parameter's
gradient and update, and the steps (`NOTE`). With TORCH_COMPILE_DISABLE=1 the same code
runs eagerly and is observed op by op.
"""
from __future__ import annotations

import functools
import inspect
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

from leaky.process.patch import Patch
from leaky.process.guards import frames_compiled_already, keep_dynamo_off_entries, note_compiled, outside_graphs

if TYPE_CHECKING:
    from leaky.record.roles import CompiledHost

NOTE = ("{name} is torch.compile'd: leaky does not look inside it, so it runs exactly as compiled; "
        "the loss, the steps and each parameter's gradient and update are measured, but not its ops "
        "(dead or saturated units, dead zones, where a NaN starts or the gradient path is cut). "
        "To audit its ops, run once with TORCH_COMPILE_DISABLE=1.")


class CompiledCalls:
    """Context manager: while active, each call of compiled code runs with leaky off."""

    def __init__(self, recorder: "CompiledHost") -> None:
        self.recorder: "CompiledHost | None" = recorder
        self.names: list[str] = []            # compiled modules and functions that ran, as the user names them
        self.module_keys: set[int] = set()    # the modules inside them (ModuleTracker keys)
        self._seen: set[int] = set()
        self._depth = 0
        self._compile = Patch(torch, "compile", self._compiling, unless_replaced=True)
        self._module_call: Patch | None = None   # OptimizedModule.__call__, once torch._dynamo is loaded
        self._in_place: list[tuple] = []      # (weakref to a module, its compiled call before ours)

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "CompiledCalls":
        self._compile.__enter__()
        if "torch._dynamo.eval_frame" in sys.modules:   # compiled modules may exist already
            self.recorder.guarded(self._install)
        return self

    def _compiling(self, original: Callable) -> Callable:
        calls = self

        @functools.wraps(original)
        def compile(model=None, *args, **kwargs):
            note_compiled()
            compiled = original(model, *args, **kwargs)
            if not calls._compile.active:
                return compiled   # after the audit, beneath another library's wrapper (see __exit__)
            calls.recorder.guarded(calls._install)   # it reaches into torch._dynamo: never break the user's compile
            return calls._wrap(model, compiled)

        return compile

    def __exit__(self, *exc) -> None:
        # NOTE: a library imported meanwhile may have wrapped ours (Lightning wraps
        # torch.compile at import): then ours stays beneath it, calling through.
        self._compile.__exit__(*exc)
        if self._module_call is not None:
            self._module_call.__exit__(*exc)
            self._module_call = None
        for ref, before in self._in_place:
            module = ref()
            if module is not None and getattr(module, "_compiled_call_impl", None) is not None:
                module._compiled_call_impl = before
        self._in_place.clear()
        self.recorder = None   # a compiled function made during the audit may outlive it: then it only calls through

    def _install(self) -> None:
        """Once torch._dynamo is loaded: route OptimizedModule calls through `_call`."""
        if self._module_call is not None:
            return
        from torch._dynamo.eval_frame import OptimizedModule
        if frames_compiled_already():
            note_compiled()
        keep_dynamo_off_entries()
        self._tag_modules_beneath_origins()
        self._module_call = Patch(OptimizedModule, "__call__", self._routed_call)
        self._module_call.__enter__()

    def _routed_call(self, original: Callable) -> Callable:
        calls = self

        @functools.wraps(original)
        def call(module, *args, **kwargs):
            return calls._call(module, original, module, *args, **kwargs)

        return outside_graphs(call, traced=original)

    def _tag_modules_beneath_origins(self) -> None:
        """Dynamo wraps Module.__init__ when it first runs (to tag the modules it may meet in
        a graph). Had it wrapped the origins wrapper, restoring torch's own on exit would drop
        Dynamo's: let Dynamo wrap torch's first, then put the origins wrapper back on top."""
        if not getattr(torch.nn.Module, "___needs_generation_tag_patch", True):
            return
        from torch._dynamo.mutation_guard import install_generation_tagging_init
        origins = self.recorder.origins
        origins.__exit__()
        try:
            install_generation_tagging_init()
        finally:
            origins.__enter__()

    def _wrap(self, model: Any, compiled: Any) -> Any:
        """What torch.compile returned, for a function: its calls go through `_call` too.
        `module.compile()` compiles the bound `_call_impl` and keeps it on the module: that
        module's compiled call is put back on exit. (A module: OptimizedModule, see _install.)"""
        if compiled is model or isinstance(compiled, torch.nn.Module) or not callable(compiled):
            return compiled   # compile disabled, or an OptimizedModule
        optimizer = _optimizer_stepped_by(model)
        if optimizer is not None:
            return self._wrap_step(optimizer, compiled)
        owner = getattr(model, "__self__", None)
        owner = owner if isinstance(owner, torch.nn.Module) else None
        if owner is not None and getattr(model, "__func__", None) is torch.nn.Module._call_impl:
            self._in_place.append((weakref.ref(owner), compiled))
        calls = self

        @functools.wraps(compiled)
        def call(*args, **kwargs):
            return calls._call(owner if owner is not None else model, compiled, *args, **kwargs)

        return outside_graphs(call, traced=compiled)

    def _wrap_step(self, optimizer: torch.optim.Optimizer, compiled: Callable) -> Callable:
        """`torch.compile(optimizer.step)`: Dynamo would trace the optimizer's step hooks, so
        leaky's are called here instead, around the compiled step, which runs without them."""
        calls = self

        @functools.wraps(compiled)
        def step(*args, **kwargs):
            rec = calls.recorder
            if calls._depth or rec is None or not rec.active:
                return compiled(*args, **kwargs)
            changed = rec._before_opt_step(optimizer, args, kwargs)
            if changed is not None:
                args, kwargs = changed   # a closure, observed as training code
            with rec.step_hooks_off():   # also when Dynamo falls back to running the step eagerly
                out = compiled(*args, **kwargs)
            rec._after_opt_step(optimizer, args, kwargs)
            return out

        return outside_graphs(step, traced=compiled)

    # -- calls -----------------------------------------------------------------------
    def _call(self, target: Any, run: Callable, *args, **kwargs) -> Any:
        """Run compiled code with leaky's traceable instruments off. With
        TORCH_COMPILE_DISABLE=1 it runs eagerly: then it is observed like any other code."""
        note_compiled()
        rec = self.recorder
        if self._depth or rec is None or not rec.active:
            return run(*args, **kwargs)
        if _compile_disabled():
            orig = getattr(target, "_orig_mod", None)
            if isinstance(orig, torch.nn.Module) and run is self._module_call:
                return orig(*args[1:], **kwargs)   # the same call, without OptimizedModule's hook warning
            return run(*args, **kwargs)
        rec.guarded(self._note, target)
        self._depth += 1
        try:
            with rec.left_out():
                out = run(*args, **kwargs)
        finally:
            self._depth -= 1
        if isinstance(target, torch.nn.Module) and run is self._module_call and rec.modules.current is None \
                and rec.modules.on_root_return is not None:
            rec.modules.on_root_return(target, args[1:], kwargs, out)   # LK306 probes its eager module
        return out

    @property
    def running(self) -> bool:
        """Inside a compiled call (its module hooks are off; see _call)."""
        return self._depth > 0

    def _note(self, target: Any) -> None:
        """Once per compiled module or function: its name, and its modules' paths."""
        if id(target) in self._seen:
            return
        self._seen.add(id(target))
        tracker = self.recorder.modules
        if not isinstance(target, torch.nn.Module):
            self.names.append(f"{getattr(target, '__qualname__', None) or 'a compiled function'}()")
            for module in _modules_used_by(target):
                self._note_modules(module)   # named as roots: their parameters keep their paths
            return
        key = self._note_modules(target)
        label = tracker.root_labels.get(key) if tracker.infos[key].root == key else tracker.name(key)
        kind = type(getattr(target, "_orig_mod", target)).__name__
        self.names.append(kind if label in (None, kind, "OptimizedModule") else f"{label} ({kind})")


    def _note_modules(self, module: torch.nn.Module) -> int:
        tracker = self.recorder.modules
        key = tracker.key_of(module)
        self.module_keys.update(tracker.key_of(inner) for inner in module.modules())
        return key


def _optimizer_stepped_by(fn: Any) -> torch.optim.Optimizer | None:
    """The optimizer whose `step` this is: a bound `optimizer.step`, or the wrapper an LR
    scheduler puts in its place (it holds a weak reference to the optimizer)."""
    if getattr(fn, "__name__", None) != "step":
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.optim.Optimizer):
        return owner
    try:
        held = inspect.getclosurevars(fn).nonlocals.values()
    except (TypeError, ValueError):
        return None
    for value in held:
        value = value() if isinstance(value, weakref.ref) else value
        if isinstance(value, torch.optim.Optimizer):
            return value
    return None


def _modules_used_by(fn: Any) -> list[torch.nn.Module]:
    """The modules a function reaches by name: its closure's and its globals'."""
    try:
        names = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return []
    found = [*names.nonlocals.values(), *names.globals.values()]
    return [value for value in found if isinstance(value, torch.nn.Module)]


def _compile_disabled() -> bool:
    """TORCH_COMPILE_DISABLE=1 (torch._dynamo.config.disable): compiled code runs eagerly."""
    from torch._dynamo import config
    try:
        return bool(config.disable)
    except AttributeError:   # a torch that hides or lacks the setting
        return False

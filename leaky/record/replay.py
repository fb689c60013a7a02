"""Naming a forward NaN born on a watch's unsampled step, by running the forward again.

A watch observes a step op by op only on its sampled steps. A NaN born in the forward of an
unsampled step (step 537, sampling every 100) would reach the next sampled step through the
parameters, where the first non-finite op is a different one. So on unsampled steps:

1. each call of a root model (one that owns parameters) keeps, in one pre-hook on that
   module, references to its args and kwargs (no copies) and, for a root whose forward
   draws random numbers (seen on sampled steps: `root_called`, `root_returned`), the
   random state before it: the CPU generator's, and the CUDA generator's of the inputs'
   device;
2. the step's loss is tested at backward() (one 0-d finiteness test, with no host sync
   added on a GPU: `nonfinite_without_sync`);
3. only when it is not finite, once per run, the kept calls are run again under the op
   mode, with the recorder observing, so that `Recorder._check_finite` names the op and
   the line, at this step. The random state is the one before the original call during
   the replay and is put back after it; the buffers are copied back (batch norm's running
   statistics); the user's hooks do not run; no backward runs, so no .grad changes.

Training stays bit-identical: the replay reads what the step already computed and puts
back everything it changes (tests/unit/watch/test_nan_replay.py).
"""
from __future__ import annotations

import math
from collections import deque
from contextlib import ExitStack
from typing import Any, Callable, NamedTuple

import torch
from torch import Tensor, nn

from leaky.process.guards import outside_graphs
from leaky.process.patch import Patch, Patches
from leaky.record.rerun import buffers_kept, untouched

KEPT_CALLS = 4   # root calls kept since the last backward (a GAN: G, then D on real and fake)
MAX_ROOTS = 8    # root models hooked at most: each hooked call leaves torch's fast path


class RootCall(NamedTuple):
    module: nn.Module
    args: tuple
    kwargs: dict
    cpu_state: Tensor | None                          # None: the root draws no random numbers
    cuda_state: tuple[torch.device, Tensor] | None   # the inputs' CUDA device and its generator's state
    autocast: tuple = ()                              # (device type, dtype) of each autocast on at the call


class ForwardReplay:
    """Context manager: the per-root hooks of a watch's unsampled steps, and the replay."""

    def __init__(self) -> None:
        self.armed = False      # an unsampled step of a watch: calls are kept
        self.calls: deque[RootCall] = deque(maxlen=KEPT_CALLS)
        self.tried = False      # one replay per run at most
        self.replays = 0        # replays run (a healthy run: 0)
        self.skipped: str | None = None   # why a non-finite loss was not replayed, if so
        self.weights_nonfinite_at: int | None = None   # the step whose loss found the weights non-finite
        self._hooked: dict[int, Any] = {}   # id(root) -> its pre-hook's handle
        self._roots_seen = 0
        self._keep_hook = _KeepHook(outside_graphs(self._keep))
        self.random: set[int] = set()   # id(root) of the roots whose forward drew random numbers
        self._before: tuple | None = None   # (id(root), the random states) at a sampled root call
        self.timed: Callable | None = None   # a watch's budget: timed(fn, *args) (record/budget.py)
        # while roots are hooked: their saved or copied state, and torch.jit.script, without the hook
        self._patches = Patches([Patch(nn.Module, "__getstate__", self._state_without_hook),
                                 Patch(torch.jit, "script", self._scripted_unhooked)])
        self._patched = False

    def __enter__(self) -> "ForwardReplay":
        return self

    def __exit__(self, *exc) -> None:
        self._unhook()
        if self._patched:
            self._patched = False
            self._patches.__exit__(None, None, None)
        self.calls.clear()
        self.armed = False

    def _unhook(self) -> None:
        """The pre-hooks off; `arm` puts them back at the next step's end (`_roots_seen`)."""
        for handle in self._hooked.values():
            handle.remove()
        self._hooked.clear()
        self._roots_seen = -1

    # -- on every unsampled step ---------------------------------------------------------
    def arm(self, on: bool, modules) -> None:
        """Keep root calls (on) or not; hook the roots that `modules` (ModuleTracker) met
        since the last look. NOTE: roots are named on sampled steps only (the global hooks
        are off in between): a model first called on an unsampled step is hooked from the
        next sampled step on."""
        self.armed = on and not self.tried
        if not on:
            self.calls.clear()
        elif len(modules.root_labels) != self._roots_seen and not self.tried:
            self._roots_seen = len(modules.root_labels)
            for root in modules.trained_roots():
                self._hook(root)

    def _hook(self, root: nn.Module) -> None:
        if id(root) in self._hooked or len(self._hooked) >= MAX_ROOTS or _compiled(root):
            return
        if not self._patched:
            self._patches.__enter__()
            self._patched = True
        self._hooked[id(root)] = root.register_forward_pre_hook(self._keep_hook, with_kwargs=True)

    def _state_without_hook(self, original: Callable) -> Callable:
        """nn.Module.__getstate__ while roots are hooked: a hooked root's state leaves the
        pre-hook out, so a model saved whole (torch.save(model)) or deep-copied (an EMA, a
        best-model snapshot) during the watch holds nothing of leaky's: the file loads where
        leaky is not installed, under `weights_only=True` with the script's own safe globals
        (pytorch/examples' word_language_model), and the copy runs torch's fast path."""
        keep = self._keep_hook

        def __getstate__(module):
            state = original(module)
            handle = self._hooked.get(id(module))
            hooks = state.get("_forward_pre_hooks")
            if handle is None or not hooks or hooks.get(handle.id) is not keep:
                return state
            state = dict(state)
            for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_pre_hooks_always_called"):
                table = state.get(name)
                if table is not None and handle.id in table:
                    state[name] = type(table)((k, v) for k, v in table.items() if k != handle.id)
            return state

        __getstate__.__wrapped__ = original
        return __getstate__

    def _scripted_unhooked(self, original: Callable) -> Callable:
        """torch.jit.script while roots are hooked: the hooks come off first (TorchScript
        compiles a module's forward pre-hooks, and fails on this one, a Python callable),
        and are put back at the step's end; calls of the rest of this step are not kept."""
        def script(obj, *args, **kwargs):
            if self._hooked:
                self._unhook()
            return original(obj, *args, **kwargs)

        script.__wrapped__ = original
        script.__doc__ = getattr(original, "__doc__", None)
        return script

    def _keep(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """The pre-hook: O(1), references only. Not under no_grad (an evaluation loop).

        NOTE: the random state is a 5 KB copy (the CPU generator's Mersenne Twister), about
        3 µs a call in place: taken only for the roots seen drawing random numbers."""
        if self.armed and torch.is_grad_enabled():
            if self.timed is None:
                self._kept(module, args, kwargs)
            else:
                self.timed(self._kept, module, args, kwargs)   # a watch's budget counts it (record/budget.py)
        return None   # the call's inputs are left as they are

    def _kept(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        random = id(module) in self.random
        self.calls.append(RootCall(module, args, kwargs, torch.get_rng_state() if random else None,
                                   _cuda_state(args) if random else None, _autocast()))

    # -- on sampled steps: which roots draw random numbers ------------------------------
    def root_called(self, module: nn.Module, args: tuple) -> None:
        """A root's call begins on a sampled step (ModuleTracker.on_root_call): note the
        random states. NOTE: only with gradients on (training); a root is taken to draw
        random numbers from the first training call seen to draw any, for the rest of the
        run: a dropout switched on later, between two sampled steps, is missed until the
        next one."""
        self._before = None
        if torch.is_grad_enabled() and id(module) not in self.random:
            self._before = (id(module), torch.get_rng_state(), _cuda_state(args))

    def root_returned(self, module: nn.Module) -> None:
        """The root's call ended (ModuleTracker.on_root_return): did its forward draw?"""
        before, self._before = self._before, None
        if before is None or before[0] != id(module):
            return
        _, cpu, cuda = before
        moved = not torch.equal(cpu, torch.get_rng_state())
        if cuda is not None:
            moved = moved or not torch.equal(cuda[1], torch.cuda.get_rng_state(cuda[0]))
        if moved:
            self.random.add(id(module))

    # -- when the loss is not finite -----------------------------------------------------
    def run(self, observed: Callable[[], Any], step: int) -> None:
        """Run the kept calls again, each under `observed()` (the recorder observing it as
        a sampled forward), with the random state each one started from."""
        self.tried = True
        self.armed = False
        calls, self.calls = list(self.calls), deque(maxlen=KEPT_CALLS)
        if not calls:
            return
        if not _parameters_finite([c.module for c in calls]):
            # NOTE: then the NaN was not born in this forward (an earlier backward or update
            # made it): the first op reading the parameters would be blamed for it. LK205
            # says so (AuditStats.weights_nonfinite_at), and the series holds the step whose
            # gradient norm turned non-finite; a sampled step that follows still names its
            # first non-finite op, as LK107 does today.
            self.skipped = f"the parameters were already non-finite at step {step}"
            self.weights_nonfinite_at = step
            return
        self.replays += 1
        for call in calls:
            _replay_one(call, observed)


class _KeepHook:
    """The pre-hook's callable.

    NOTE: a hooked root saved whole (torch.save(model)) or deep-copied (an EMA, a best-model
    snapshot) while the watch runs leaves this hook out of its state
    (`ForwardReplay._state_without_hook`). Where it is taken along all the same (a module
    class whose own __getstate__ skips nn.Module's, or a pickle of the hook table itself), it
    pickles as, and deep-copies to, `_inert` (a module-level function that does nothing): the
    save works (loading it then imports leaky), and the copy holds no reference to the
    recorder and keeps none of its calls."""

    def __init__(self, keep: Callable) -> None:
        self.keep = keep

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        return self.keep(module, args, kwargs)

    def __reduce__(self):
        return _inert_hook, ()

    def __deepcopy__(self, memo) -> Callable:
        return _inert


def _inert(module: nn.Module, args: tuple, kwargs: dict) -> None:
    return None


def _inert_hook() -> Callable:
    return _inert


def _replay_one(call: RootCall, observed: Callable[[], Any]) -> None:
    devices = [call.cuda_state[0]] if call.cuda_state is not None else []
    with ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=devices))   # the state of now, put back after
        if call.cpu_state is not None:
            torch.set_rng_state(call.cpu_state)
        if call.cuda_state is not None:
            torch.cuda.set_rng_state(call.cuda_state[1], call.cuda_state[0])
        for device_type, dtype in call.autocast:   # the replay runs at backward(), outside the script's autocast
            stack.enter_context(torch.autocast(device_type, dtype=dtype))
        for context in (untouched(call.module), buffers_kept(call.module), torch.enable_grad(), observed()):
            stack.enter_context(context)
        call.module(*call.args, **call.kwargs)


def nonfinite_without_sync(loss: Tensor) -> bool:
    """Whether the loss is NaN/Inf, asked only where the answer costs no wait.

    NOTE: a plain CPU loss comes read already (`read_on_host`). On a GPU reading a value waits
    for every kernel queued before it, so the loss is read only when the stream has nothing
    left to run (the script synced since its forward, or the GPU has caught up): otherwise the
    step goes untested, and a forward NaN that it made is named at the next sampled step, as
    before. A tensor subclass (a DTensor, whose read may be a collective) is not read."""
    if type(loss) is Tensor and loss.is_cuda and torch.cuda.current_stream(loss.device).query():
        with torch._C.DisableTorchFunction():
            return not math.isfinite(loss.item())
    return False


def nonfinite(loss: Tensor, host: float | None) -> bool:
    """Whether the loss is NaN/Inf: its value read on the host already (`read_on_host`), or
    else asked of the device where that costs no wait (`nonfinite_without_sync`)."""
    return not math.isfinite(host) if host is not None else nonfinite_without_sync(loss)


def read_on_host(loss: Tensor) -> float | None:
    """A plain CPU loss's value (one read: on the CPU it waits for nothing), else None.

    NOTE: at every backward of a watch. The read stands for the tensor calls that would keep
    the loss on the device (a detach and a copy) and for the NaN test of `nonfinite_without_sync`:
    after the forward, with the caches cold, each tensor call costs 3-5 µs on this machine. A
    tensor subclass (a DTensor, whose read may be a collective) is left on the device."""
    if type(loss) is Tensor and loss.is_cpu:
        with torch._C.DisableTorchFunction():
            return loss.item()
    return None


def _parameters_finite(roots: list[nn.Module]) -> bool:
    """One reduction over the kept roots' parameters, and one host read (once per run)."""
    with torch._C.DisableTorchFunction(), torch.no_grad():
        params = list({id(p): p for root in roots for p in root.parameters() if p.is_floating_point()}.values())
        if not params:
            return True
        norms = torch._foreach_norm([p.detach() for p in params])
        return bool(torch.isfinite(torch.stack([n.float() for n in norms])).all())


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast() -> tuple:
    """(device type, dtype) of each autocast region the call runs in: one C call (0.3 µs)
    when there is none."""
    if not _any_autocast():
        return ()
    return tuple((kind, torch.get_autocast_dtype(kind)) for kind in ("cpu", "cuda") if torch.is_autocast_enabled(kind))


def _cuda_state(args: tuple) -> tuple[torch.device, Tensor] | None:
    """The CUDA generator's state for the device of the first CUDA tensor among the args."""
    for arg in args:
        if isinstance(arg, Tensor):
            if arg.is_cuda:
                return arg.device, torch.cuda.get_rng_state(arg.device)
            return None   # NOTE: one look, at the first tensor: a CPU model's call stays cheap
    return None


def _compiled(root: nn.Module) -> bool:
    """A torch.compile'd module: its replay would run compiled code, which the op mode does not see."""
    return type(root).__name__ == "OptimizedModule"

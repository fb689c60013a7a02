"""Which module is running, and what the user calls it.

Global forward pre/post hooks keep a stack of running modules. The first time a module
runs with an empty stack it is a root: its `named_modules()` give every descendant its
dotted path. When one program has several roots (a Q-network and its target network), the
paths are prefixed with the variable that holds each root, found in the caller's frames:
`q_network.2`, or `agent.critic.4` for a root that a method runs as `self.critic(x)`.
A name, once handed out, never changes during the run, and no two modules share one.
It also notes, once per module, whether torch code called it (a layer that `nn.Sequential`
runs) rather than the user's own code.
"""
from __future__ import annotations

import itertools
import sys
import weakref
from dataclasses import dataclass

from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils.hooks import RemovableHandle

from leaky.record.compiled import outside_graphs
from leaky.record.sites import _is_internal

_MODULE_FILE = module_globals.__file__


@dataclass
class ModuleInfo:
    key: int
    root: int            # key of its root module
    path: str            # dotted path from the root's named_modules(); "" for the root
    type_name: str
    module: nn.Module
    called_by_torch: bool | None = None   # its first call came from torch code (a container), not the user's


class ModuleTracker:
    """Context manager: tracks the running module and names every module it meets."""

    def __init__(self) -> None:
        self.infos: list[ModuleInfo] = []
        self.root_labels: dict[int, str] = {}
        self._by_id: dict[int, int] = {}
        self._stack: list[int] = []
        self._handles: list[RemovableHandle] = []
        self._root_params: dict[int, bool] = {}
        self._names: list[str] = []          # per module key, fixed once handed out
        self._taken: set[str] = set()
        self._pre_hook = outside_graphs(self._pre)
        self._post_hook = outside_graphs(self._post)
        self.on_root_return = None   # (module, args, kwargs, output) after a root's forward (LK306's probe)
        # modules that hold a root but never ran themselves (an agent whose methods run
        # self.critic(x)): the variable naming each, for the parameters they own directly
        self._holders: dict[int, tuple[str, weakref.ref]] = {}

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> "ModuleTracker":
        self.attach()
        return self

    def __exit__(self, *exc) -> None:
        self.detach()
        self._stack.clear()

    def attach(self) -> None:
        """Put the global hooks on (again: a compiled module's call runs without them)."""
        if not self._handles:
            self._handles.append(module_globals.register_module_forward_pre_hook(self._pre_hook))
            self._handles.append(module_globals.register_module_forward_hook(self._post_hook, with_kwargs=True,
                                                                             always_call=True))

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def pause(self) -> None:
        """Between a watch's sampled steps: the hooks off, so that module calls take torch's
        fast path (a global hook sends every call of every module through the slow one: ~6 µs
        a call, 1 ms a step for a 50-layer MLP). Only between forwards: a running module's
        stack must see its post-hook."""
        if not self._stack:
            self.detach()

    def detach(self) -> None:
        for handle in self._handles:
            remove_global_hook(handle)
        self._handles.clear()

    # -- queries -------------------------------------------------------------------
    @property
    def current(self) -> int | None:
        return self._stack[-1] if self._stack else None

    def key_of(self, module: nn.Module) -> int:
        key = self._by_id.get(id(module))
        if key is None or self.infos[key].module is not module:
            key = self._register_root(module)
        return key

    def name(self, key: int | None) -> str | None:
        """The user-facing dotted path; None outside any module."""
        if key is None:
            return None
        if key >= len(self._names):
            self._name_new_modules()
        return self._names[key]

    def qualified(self, key: int) -> str:
        """The path prefixed with its root's label (`q_network.2`), whatever `name` says."""
        info = self.infos[key]
        label = self.root_labels[info.root]
        return f"{label}.{info.path}" if info.path else label

    def _name_new_modules(self) -> None:
        """Name the modules registered since the last call, in registration order.

        NOTE: a root is prefixed when more than one root owns parameters at the time its
        modules are first named. Roots without parameters (a loss module such as
        nn.CrossEntropyLoss()) do not make a second model. A watch names modules at its
        first check pass: a target network that first runs later gets its prefix, and the
        model named before keeps its short names, so no name changes mid-run."""
        multi = sum(1 for root in self.root_labels if self._has_params(root)) > 1
        for info in self.infos[len(self._names):]:
            short = info.path or info.type_name
            qualified = self.qualified(info.key)
            preferred = [qualified] if multi and self._has_params(info.root) else [short, qualified]
            self._names.append(self._claim(preferred))

    def _claim(self, preferred: list[str]) -> str:
        """The first free name of `preferred`, else the last one with `#2`, `#3`, ..."""
        numbered = (f"{preferred[-1]}#{count}" for count in itertools.count(2))
        name = next(n for n in itertools.chain(preferred, numbered) if n not in self._taken)
        self._taken.add(name)
        return name

    def _has_params(self, root: int) -> bool:
        cached = self._root_params.get(root)
        if cached is None:
            cached = self._root_params[root] = any(True for _ in self.infos[root].module.parameters())
        return cached

    def holder_parameters(self):
        """(the variable naming the holder, the parameter's path in it, parameter) for the
        parameters of the modules that hold a root without running (`agent`, `actor_logstd`
        when only `agent.actor_mean` and `agent.critic` run)."""
        for label, ref in self._holders.values():
            holder = ref()
            if holder is not None:
                for pname, param in holder.named_parameters():
                    yield label, pname, param

    def producer_of(self, key: int | None, param) -> int | str | None:
        """A parameter's module key; else the variable naming the module that holds a root
        without running and owns it (`agent`, for a cut of `self.actor_logstd`)."""
        if key is not None:
            return key
        return next((label for label, _, owned in self.holder_parameters() if owned is param), None)

    def parameters(self):
        """(module key, param name, parameter) for every parameter of every root."""
        for info in self.infos:
            if info.key == info.root or info.path:
                for pname, param in info.module.named_parameters(recurse=False):
                    yield info.key, pname, param

    # -- hooks ---------------------------------------------------------------------
    def note_caller(self, key: int) -> None:
        """Once per module, from inside one of its ops: did torch code call it?

        NOTE: done from the op, not from the forward pre-hook: only modules whose ops are
        observed need it, once each, and a frame walk per module call would cost more."""
        info = self.infos[key]
        if info.called_by_torch is None:
            info.called_by_torch = _caller_is_internal()

    def _pre(self, module: nn.Module, args) -> None:
        self._stack.append(self.key_of(module))

    def _post(self, module: nn.Module, args, kwargs, output) -> None:
        if self._stack:
            self._stack.pop()
        if not self._stack and self.on_root_return is not None and output is not None:
            self.on_root_return(module, args, kwargs, output)

    def _register_root(self, root: nn.Module) -> int:
        variable, holder = _variable_name(root)
        if holder is not None and id(holder) not in self._holders:
            self._holders[id(holder)] = (variable.split(".")[0], weakref.ref(holder))
        root_key = len(self.infos)
        self.root_labels[root_key] = self._free_label(variable or type(root).__name__)
        for path, module in root.named_modules():
            if id(module) in self._by_id and self.infos[self._by_id[id(module)]].module is module:
                continue  # already named under an earlier root
            key = len(self.infos)
            path = _unwrapped(path, root)
            self.infos.append(ModuleInfo(key, root_key, path, _type_name(module), module))
            self._by_id[id(module)] = key
        return self._by_id[id(root)]

    def _free_label(self, label: str) -> str:
        """Two roots never share a label: two models held by one loop variable get
        `model`, `model#2`."""
        used = set(self.root_labels.values())
        numbered = (f"{label}#{count}" for count in itertools.count(2))
        return next(n for n in itertools.chain([label], numbered) if n not in used)


def remove_global_hook(handle: RemovableHandle) -> None:
    """Remove a global module hook, all of it.

    NOTE: torch's handle of a global forward hook registered with_kwargs=True leaves its id
    in `_global_forward_hooks_with_kwargs` (torch 2.13): the dict keeps growing, and
    torch.compile then warns that global hooks exist."""
    handle.remove()
    module_globals._global_forward_hooks_with_kwargs.pop(handle.id, None)


def _caller_is_internal() -> bool:
    """Whether the code that called the running module is torch's or leaky's rather than
    the user's: the frame above the innermost run of nn.Module's call machinery."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != _MODULE_FILE:
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename == _MODULE_FILE:
        frame = frame.f_back
    return frame is not None and _is_internal(frame.f_code.co_filename)


_WRAPPERS = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module", "DataParallel": "module"}


def unwrapped_module(module: nn.Module) -> nn.Module:
    """The model under the wrappers the user did not name (torch.compile's, DDP's), eager:
    what a one-time probe runs (no recompile, no collective)."""
    while (wrapper := _WRAPPERS.get(type(module).__name__)) and isinstance(getattr(module, wrapper, None), nn.Module):
        module = getattr(module, wrapper)
    return module


def _unwrapped(path: str, root: nn.Module) -> str:
    """Paths without the wrappers the user did not name (torch.compile's `_orig_mod`,
    DDP's `module`), only under such a root; wrappers may nest."""
    while (wrapper := _WRAPPERS.get(type(root).__name__)) and hasattr(root, wrapper):
        if path == wrapper:
            return ""
        if path.startswith(wrapper + "."):
            path = path[len(wrapper) + 1:]
        root = getattr(root, wrapper)
    return path


def _type_name(module: nn.Module) -> str:
    """The user's class name: FSDP2's fully_shard swaps a Linear's class for `FSDPLinear`."""
    name = type(module).__name__
    if name.startswith("FSDP") and any(base.__name__ == name[4:] for base in type(module).__mro__[1:]):
        return name[4:]
    return name


def _variable_name(module: nn.Module) -> tuple[str | None, nn.Module | None]:
    """The name of a variable that holds this module in user code, or, for a module that a
    method runs as `self.critic(x)`, the variable that holds `self` and the attribute path
    to the module: `agent.critic`. The innermost user frame that knows it wins. Second, the
    module that variable holds when it is not this one (`agent`), else None."""
    target, suffix = module, ""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            found = _name_in_frame(frame, target)
            if found is not None:
                name, holder, path = found
                suffix = f".{path}{suffix}" if path else suffix
                if name != "self":
                    return name + suffix, (holder if holder is not module else None)
                target = holder   # name self, the module that holds it, in the frames further out
        frame = frame.f_back
    return (f"{type(target).__name__}{suffix}", None) if suffix else (None, None)


def _name_in_frame(frame, target: nn.Module) -> tuple[str, nn.Module, str] | None:
    """(variable, module it holds, path from that module to target) in one frame: a
    variable that is the target, else one that holds it among its submodules, else `self`."""
    scopes = (frame.f_locals, frame.f_globals)
    named = [(name, value) for scope in scopes for name, value in list(scope.items())
             if (name == "self" or not name.startswith("_")) and _is_module(value)]
    for name, value in named:
        if value is target and name != "self":
            return name, value, ""
    holders = [(name, value) for name, value in named if name != "self"] + \
              [(name, value) for name, value in named if name == "self"]
    for name, value in holders:
        path = _path_to(value, target)
        if path is not None:
            return name, value, path
    return None


def _is_module(value) -> bool:
    """isinstance, for any object a user frame holds (a lazy proxy's __class__ may raise)."""
    try:
        return isinstance(value, nn.Module)
    except Exception:
        return False


def _path_to(holder: nn.Module, target: nn.Module) -> str | None:
    """The dotted path from holder to target among holder's submodules, without the
    wrappers the user did not name ("" when holder only wraps it); None if holder does
    not hold it."""
    if holder is target:
        return None
    for path, module in holder.named_modules():
        if module is target:
            return _unwrapped(path, holder)
    return None

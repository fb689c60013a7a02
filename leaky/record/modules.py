"""Which module is running, and what the user calls it.

Global forward pre/post hooks keep a stack of running modules. The first time a module
runs with an empty stack it is a root: its `named_modules()` give every descendant its
dotted path. When one program has several roots (a Q-network and its target network), the
paths are prefixed with what the script calls each root, found in the caller's frames
(record/script_names.py): `q_network.2`, `agent.critic.4` for a root that a method runs as
`self.critic(x)`, `layers[1].relu` for the part of a list's element that runs alone.
A name, once handed out, never changes during the run, and no two modules share one.
It also notes, once per module, whether torch code called it (a layer that `nn.Sequential`
runs) rather than the user's own code.
"""
from __future__ import annotations

import itertools
import sys
import weakref
from collections import Counter
from dataclasses import dataclass

from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils.hooks import RemovableHandle

from leaky.process.frames import is_internal
from leaky.process.guards import outside_graphs
from leaky.record.script_names import script_name, unwrapped_path

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
        # (module, args) before a root's forward, hooks on: a watch's replay (record/replay.py)
        # and its budget's clock for the first step (record/budget.py)
        self.on_root_call = None
        # modules that hold a root but never ran themselves (an agent whose methods run
        # self.critic(x)): the variable naming each, for the parameters they own directly
        self._holders: dict[int, tuple[str, weakref.ref]] = {}
        self._indexed_roots: set[int] = set()   # roots named through a list's element (`layers[0].relu`)

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
        fast path (a global hook sends every call of every module through the slow one, a
        cost per call: docs/performance.md). Only between forwards: a running module's
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
        model named before keeps its short names, so no name changes mid-run.
        A root's own row is named by its class only when that says which module it is: not
        when another root has its class (two layers' `relu` that each runs alone), nor when
        the script names it through a list's element (`layers[0].relu`)."""
        multi = sum(1 for root in self.root_labels if self._has_params(root)) > 1
        classes = Counter(self.infos[root].type_name for root in self.root_labels)
        for info in self.infos[len(self._names):]:
            qualified = self.qualified(info.key)
            if multi and self._has_params(info.root):
                preferred = [qualified]
            elif info.path:
                preferred = [info.path, qualified]
            elif classes[info.type_name] > 1 or info.key in self._indexed_roots:
                preferred = [qualified]
            else:
                preferred = [info.type_name, qualified]
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

    def trained_roots(self) -> list[nn.Module]:
        """The root modules that own parameters (a model, not a loss module), in the order met."""
        return [self.infos[root].module for root in self.root_labels if self._has_params(root)]

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
        if not self._stack and self.on_root_call is not None:
            self.on_root_call(module, args)
        self._stack.append(self.key_of(module))

    def _post(self, module: nn.Module, args, kwargs, output) -> None:
        if self._stack:
            self._stack.pop()
        if not self._stack and self.on_root_return is not None and output is not None:
            self.on_root_return(module, args, kwargs, output)

    def _register_root(self, root: nn.Module) -> int:
        named = script_name(root)
        if named.holder is not None and id(named.holder) not in self._holders:
            used = [label for label, _ in self._holders.values()]
            self._holders[id(named.holder)] = (_free(named.holder_label, used), weakref.ref(named.holder))
        root_key = len(self.infos)
        self.root_labels[root_key] = _free(named.label or type(root).__name__, self.root_labels.values())
        if named.indexed:
            self._indexed_roots.add(root_key)
        for path, module in root.named_modules():
            if id(module) in self._by_id and self.infos[self._by_id[id(module)]].module is module:
                continue  # already named under an earlier root
            key = len(self.infos)
            path = unwrapped_path(path, root)
            self.infos.append(ModuleInfo(key, root_key, path, _type_name(module), module))
            self._by_id[id(module)] = key
        return self._by_id[id(root)]


def _free(label: str, used) -> str:
    """Two roots (two holders) never share a label: two models that only a loop variable
    names get `model`, `model#2`."""
    used = set(used)
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
    return frame is not None and is_internal(frame.f_code.co_filename)


def _type_name(module: nn.Module) -> str:
    """The user's class name: FSDP2's fully_shard swaps a Linear's class for `FSDPLinear`."""
    name = type(module).__name__
    if name.startswith("FSDP") and any(base.__name__ == name[4:] for base in type(module).__mro__[1:]):
        return name[4:]
    return name

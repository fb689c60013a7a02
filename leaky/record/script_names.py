"""What the user's script calls a module: the variable that holds it, found in the caller's frames.

`model` for a module a variable holds; `agent.critic` for one that a method runs as
`self.critic(x)` on an object the script holds as `agent`; `layers[1]` for an element of a
list, tuple or dict variable. A for-loop's variable (`for layer in layers:`) names a
different module at each turn, so it is the last resort: the container's indexed name
(`layers[1].relu`), or any other variable that holds the module, comes first.
"""
from __future__ import annotations

import dis
import functools
import sys
from dataclasses import dataclass

from torch import nn

from leaky.process.frames import user_frames

_WRAPPERS = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module", "DataParallel": "module"}
# NOTE: a list longer than this is data, not a model's layers: not searched for modules
_MAX_CONTAINER = 1024


@dataclass(frozen=True)
class ScriptName:
    label: str | None              # `model`, `agent.critic`, `layers[1].relu`; None when no frame knows it
    holder: nn.Module | None = None   # the module the name starts from when it is not this one (`agent`)
    holder_label: str | None = None   # what the script calls that holder (`agent`, `layers[1]`)
    indexed: bool = False          # it starts from an element of a container (`layers[1]`)


@dataclass(frozen=True)
class _Found:
    name: str            # a variable, or a container's element (`layers[1]`)
    value: nn.Module     # the module it names
    path: str            # from that module to the target; "" when it is the target
    kind: str            # "variable", "holder", "element", "self" or "loop", best first


def unwrapped_module(module: nn.Module) -> nn.Module:
    """The model under the wrappers the user did not name (torch.compile's, DDP's), eager:
    what a one-time probe runs (no recompile, no collective)."""
    while (wrapper := _WRAPPERS.get(type(module).__name__)) and isinstance(getattr(module, wrapper, None), nn.Module):
        module = getattr(module, wrapper)
    return module


def unwrapped_path(path: str, root: nn.Module) -> str:
    """Paths without the wrappers the user did not name (torch.compile's `_orig_mod`,
    DDP's `module`), only under such a root; wrappers may nest."""
    while (wrapper := _WRAPPERS.get(type(root).__name__)) and hasattr(root, wrapper):
        if path == wrapper:
            return ""
        if path.startswith(wrapper + "."):
            path = path[len(wrapper) + 1:]
        root = getattr(root, wrapper)
    return path


def script_name(module: nn.Module) -> ScriptName:
    """What the innermost user frame that knows this module calls it. A name through `self`
    goes on outward (`self.critic` in a method: the variable that holds `self`, `agent`); a
    loop variable goes on outward for a name that stays the module's over the run, and is
    used only when no frame has one."""
    frames = list(user_frames(sys._getframe(1)))
    module_code = {id(f.f_globals): f.f_code for f in frames if f.f_code.co_name == "<module>"}
    target, suffix, fallback = module, "", None
    for frame in frames:
        found = _name_in_frame(frame, target, module_code.get(id(frame.f_globals)))
        if found is None:
            continue
        path = f".{found.path}{suffix}" if found.path else suffix
        if found.kind == "loop":
            fallback = fallback or _named(found, path, module)
        elif found.kind != "self":
            return _named(found, path, module)
        else:
            target, suffix = found.value, path   # name self, the module that holds it, further out
    if fallback is not None:
        return fallback
    return ScriptName(f"{type(target).__name__}{suffix}") if suffix else ScriptName(None)


def _named(found: _Found, path: str, module: nn.Module) -> ScriptName:
    holder = found.value if found.value is not module else None
    return ScriptName(found.name + path, holder, found.name if holder is not None else None, found.kind == "element")


def _name_in_frame(frame, target: nn.Module, module_code) -> _Found | None:
    """The best name one frame has for target: a variable that is it, one that holds it
    among its submodules, an element of a list/tuple/dict variable that is or holds it,
    `self` holding it; last, a for-loop's variable (of this function's code for its locals,
    of the running module's code for its globals)."""
    candidates = []
    scopes = [(frame.f_locals, _loop_targets(frame.f_code))]
    if frame.f_globals is not frame.f_locals:
        scopes.append((frame.f_globals, _loop_targets(module_code) if module_code is not None else frozenset()))
    for scope, loops in scopes:
        for name, value in list(scope.items()):
            if name.startswith("_") and name != "self":
                continue
            if _is_module(value):
                path = "" if value is target else _path_to(value, target)
                if path is not None and not (name == "self" and value is target):
                    kind = "loop" if name in loops else "self" if name == "self" else \
                        "variable" if value is target else "holder"
                    candidates.append(_Found(name, value, path, kind))
            elif _is_container(value):
                candidates.extend(_in_container(name, value, target))
    order = ("variable", "holder", "element", "self", "loop")
    return min(candidates, key=lambda found: order.index(found.kind), default=None)


def _in_container(name: str, container, target: nn.Module):
    """`layers[1]` for a list/tuple/dict variable whose element is target or holds it."""
    items = container.items() if isinstance(container, dict) else enumerate(container)
    for key, value in items:
        if isinstance(key, (int, str)) and _is_module(value):
            path = "" if value is target else _path_to(value, target)
            if path is not None:
                yield _Found(f"{name}[{key!r}]", value, path, "element")


@functools.lru_cache(maxsize=256)
def _loop_targets(code) -> frozenset[str]:
    """The names a for loop (or a comprehension) of this code binds at each turn: those
    stored right after FOR_ITER, through any unpacking (`for i, layer in ...`)."""
    names: set[str] = set()
    after_for = False
    for instruction in dis.get_instructions(code):
        op = instruction.opname
        if op == "FOR_ITER":
            after_for = True
        elif after_for and op in ("UNPACK_SEQUENCE", "UNPACK_EX"):
            continue
        elif after_for and op in ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"):
            names.add(instruction.argval)
        elif after_for and op == "STORE_FAST_STORE_FAST":   # 3.13: two stores in one instruction
            names.update(instruction.argval)
        else:
            if after_for and op == "STORE_FAST_LOAD_FAST":   # 3.13: the store, then a load
                names.add(instruction.argval[0])
            after_for = False
    return frozenset(names)


def _is_module(value) -> bool:
    """isinstance, for any object a user frame holds (a lazy proxy's __class__ may raise)."""
    try:
        return isinstance(value, nn.Module)
    except Exception:
        return False


def _is_container(value) -> bool:
    """A list, tuple or dict short enough to be a model's parts (safe for any object)."""
    try:
        return isinstance(value, (list, tuple, dict)) and len(value) <= _MAX_CONTAINER
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
            return unwrapped_path(path, holder)
    return None

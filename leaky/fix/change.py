"""The code change behind a fix: a unified diff at a known line, or a short snippet.

Diffs are made by rewriting one call found with `ast` on the reported line, so they touch
only that expression, and only when the rewrite is unambiguous; anything else is a snippet.
"""
from __future__ import annotations

import ast
import difflib
import os
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Change:
    kind: str    # "diff" | "snippet"
    text: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text}


def snippet(text: str) -> Change:
    return Change("snippet", text)


def _read(file: str) -> tuple[str, ast.AST] | None:
    try:
        with open(file, encoding="utf-8") as handle:
            source = handle.read()
        return source, ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _diff(file: str, old: list[str], new: list[str]) -> Change:
    relative = os.path.relpath(file)
    before, after = (file, file) if relative.startswith("..") else (f"a/{relative}", f"b/{relative}")
    lines = difflib.unified_diff(old, new, before, after, n=2)
    return Change("diff", "".join(lines))


def call_name(node: ast.Call) -> str:
    """`clamp` for x.clamp(...), torch.clamp(...) and F.clamp(...)."""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def operand(source: str, node: ast.Call) -> str | None:
    """The tensor a call works on: the receiver of a method, else its first argument;
    parenthesised unless it is atomic, so it can be pasted into a larger expression."""
    func = node.func
    if isinstance(func, ast.Attribute) and not _is_namespace(func.value):
        target = func.value
    elif node.args:
        target = node.args[0]
    else:
        return None
    text = ast.get_source_segment(source, target)
    if text is None:
        return None
    atomic = isinstance(target, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
    return text if atomic else f"({text})"


def _is_namespace(node: ast.AST) -> bool:
    """torch, F, nn.functional, torch.nn.functional: a module, not a tensor."""
    text = ast.unparse(node)
    return text in ("torch", "F", "nn.functional", "torch.nn.functional", "functional", "torch.special")


def rewrite_call(file: str, line: int, names: set[str],
                 rewrite: Callable[[str, ast.Call], "str | tuple[str, str] | None"]) -> Change | None:
    """Replace the one call named in `names` on `line` by `rewrite(source, call)`; a
    `(prelude, replacement)` pair also inserts the statement `prelude` before the line."""
    parsed = _read(file)
    if parsed is None:
        return None
    source, tree = parsed
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == line
             and node.end_lineno == line and call_name(node) in names]
    if len(calls) != 1:
        return None
    node = calls[0]
    replacement = rewrite(source, node)
    if replacement is None:
        return None
    prelude, replacement = replacement if isinstance(replacement, tuple) else (None, replacement)
    lines = source.splitlines(keepends=True)
    encoded = lines[line - 1].encode("utf-8")
    new = [encoded[:node.col_offset].decode("utf-8") + replacement + encoded[node.end_col_offset:].decode("utf-8")]
    if prelude is not None:
        indent = lines[line - 1][:len(lines[line - 1]) - len(lines[line - 1].lstrip())]
        new.insert(0, f"{indent}{prelude}\n")
    return _diff(file, lines, lines[:line - 1] + new + lines[line:])


def insert_line(file: str, line: int, text: str, after: bool = True) -> Change | None:
    """Insert `text` before or after the statement on `line`, at its indentation."""
    parsed = _read(file)
    if parsed is None:
        return None
    source, tree = parsed
    statements = [node for node in ast.walk(tree) if isinstance(node, ast.stmt) and node.lineno <= line
                  <= (node.end_lineno or node.lineno) and not isinstance(node, _BLOCKS)]
    if not statements:
        return None
    statement = max(statements, key=lambda node: node.lineno)
    lines = source.splitlines(keepends=True)
    indent = lines[statement.lineno - 1][:statement.col_offset]
    at = (statement.end_lineno or statement.lineno) if after else statement.lineno - 1
    return _diff(file, lines, lines[:at] + [f"{indent}{text}\n"] + lines[at:])


def move_line(file: str, line: int, before: int) -> Change | None:
    """Move the one-line statement at `line` to just before the statement at `before`."""
    parsed = _read(file)
    if parsed is None or line == before:
        return None
    source, tree = parsed
    lines = source.splitlines(keepends=True)
    moved = [node for node in ast.walk(tree) if isinstance(node, ast.stmt) and node.lineno == line == node.end_lineno]
    target = [node for node in ast.walk(tree) if isinstance(node, ast.stmt) and node.lineno == before]
    if not moved or not target or isinstance(target[0], _BLOCKS):
        return None
    text = lines[line - 1].strip()
    indent = lines[before - 1][:len(lines[before - 1]) - len(lines[before - 1].lstrip())]
    kept = [entry for number, entry in enumerate(lines, 1) if number != line]
    at = before - 1 if line > before else before - 2
    return _diff(file, lines, kept[:at] + [f"{indent}{text}\n"] + kept[at:])


_BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.With,
           ast.Try, ast.AsyncFor, ast.AsyncWith)


def optimizer_constructions(file: str, near_line: int | None) -> list[tuple[ast.Call, str | None, str]]:
    """(call, variable it is assigned to, source) of each `torch.optim` constructor in the
    function around `near_line` (the whole file when it is at module level)."""
    import torch

    parsed = _read(file)
    if parsed is None:
        return []
    source, tree = parsed
    classes = {name for name in dir(torch.optim) if isinstance(getattr(torch.optim, name), type)
               and issubclass(getattr(torch.optim, name), torch.optim.Optimizer)}
    scope = tree
    if near_line is not None:
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and node.lineno <= near_line <= (node.end_lineno or node.lineno)]
        if functions:
            scope = max(functions, key=lambda node: node.lineno)
    found = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and call_name(node.value) in classes:
            target = node.targets[0].id if isinstance(node.targets[0], ast.Name) else None
            found.append((node.value, target, source))
    return found


def scale_lr(file: str, near_line: int | None, factor: float) -> Change | None:
    """Multiply the `lr=` of the one optimizer built near the training loop."""
    found = optimizer_constructions(file, near_line)
    if len(found) != 1:
        return None
    call, _, source = found[0]
    lr = next((kw.value for kw in call.keywords if kw.arg == "lr"), call.args[1] if len(call.args) > 1 else None)
    if lr is None or lr.lineno != lr.end_lineno:
        return None
    if isinstance(lr, ast.Constant) and isinstance(lr.value, (int, float)):
        new = f"{lr.value * factor:g}"
    else:
        new = f"{ast.get_source_segment(source, lr)} * {factor:g}"
    lines = source.splitlines(keepends=True)
    text = lines[lr.lineno - 1].encode("utf-8")
    changed = text[:lr.col_offset].decode("utf-8") + new + text[lr.end_col_offset:].decode("utf-8")
    return _diff(file, lines, lines[:lr.lineno - 1] + [changed] + lines[lr.lineno:])


def optimizer_variable(file: str, near_line: int | None) -> str | None:
    found = optimizer_constructions(file, near_line)
    return found[0][1] if len(found) == 1 else None

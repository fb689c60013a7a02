"""How the reports write what they show: numbers, shares, paths, names, times, severities.

    num(3.2e-07) == "3.2e-07"                      pct(0.5) == "50%"
    short_path("/home/me/proj/train.py") == "train.py"   (relative to the working directory)
    shorten_middle("transformer.h.3.mlp.c_fc", 14) == "t…h.3.mlp.c_fc"
    module_label("") == "<root>"

`num` and `pct` are `leaky.numbers`' (the checks write their messages with the same two).
Module names that must fit a narrow column are shortened from the middle, keeping the
tail: the tail tells layers apart (`h.3.mlp.c_fc` against `h.4.mlp.c_fc`), the head names
the model they belong to. The terminal views shorten; JSON and HTML keep the full names.
"""
from __future__ import annotations

import datetime
import os

from leaky.numbers import num, pct

ELLIPSIS = "…"

# rich styles of the terminal views, by severity value
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def short_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def module_label(name: object) -> str:
    """A module's name for a person: the root module (named "") is `<root>`."""
    if name is None:
        return "(no module)"
    if name == "":
        return "<root>"
    return str(name)


def ellipsize(text: str, limit: int) -> str:
    """Keep the end of long dotted names: the last components say the most."""
    return text if len(text) <= limit else ELLIPSIS + text[-(limit - 1):]


def shorten_middle(name: str, width: int) -> str:
    """`name` in at most `width` characters: its first character, an ellipsis and the
    longest tail of whole dotted parts that fits (cut inside the last part only when that
    part alone is too long)."""
    if len(name) <= width:
        return name
    if width < 3:
        return name[len(name) - max(width, 0):]
    room = width - 2                      # at least one head character and the ellipsis
    cut = len(name) - room
    dot = name.find(".", cut - 1)
    start = dot + 1 if 0 <= dot < len(name) - 1 else cut
    return name[0] + ELLIPSIS + name[start:]


def distinct_width(names: list[str], floor: int = 8) -> int:
    """The least width (from `floor`) at which the shortened names still tell every name
    apart; the longest name's length if only the full names do."""
    unique = set(names)
    longest = max((len(n) for n in unique), default=0)
    for width in range(min(floor, longest), longest):
        if len({shorten_middle(n, width) for n in unique}) == len(unique):
            return width
    return longest


def when(stamp: float | None, form: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A stored time stamp (seconds since the epoch) in local time; "" for none."""
    if stamp is None:
        return ""
    return datetime.datetime.fromtimestamp(stamp).strftime(form)


def run_status(run: dict) -> str:
    """A stored run's status, with a "running" run whose process is gone shown as "died"."""
    status = run.get("status")
    return "died" if status == "running" and not run.get("alive", True) else status


__all__ = ["ELLIPSIS", "SEVERITY_STYLE", "distinct_width", "ellipsize", "module_label", "num", "pct",
           "run_status", "short_path", "shorten_middle", "when"]

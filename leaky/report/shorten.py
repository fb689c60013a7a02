"""Module names that fit a narrow column: shortened from the middle, keeping the tail.

    shorten_middle("transformer.h.3.mlp.c_fc", 14) == "t…h.3.mlp.c_fc"

The tail tells layers apart (`h.3.mlp.c_fc` against `h.4.mlp.c_fc`); the head names the
model they belong to. The terminal views use these; JSON and HTML keep the full names.
"""
from __future__ import annotations

ELLIPSIS = "…"


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


__all__ = ["ELLIPSIS", "distinct_width", "shorten_middle"]

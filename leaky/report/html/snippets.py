"""A few lines of the user's source around a finding's line, the line highlighted.

    Sources().snippet({"file": "train.py", "line": 12})   # '<pre class="src">…</pre>', or ""

Each file is read once per page, and only as far as the deepest line asked for. A file
that cannot be read (gone, a directory, not text) gives no snippet, never an error.
"""
from __future__ import annotations

import os
from typing import Any

from leaky.report.html.values import esc

SOURCE_CONTEXT = 3          # lines shown above and below a finding's line


class Sources:
    """Lines of the user's files around a finding; unreadable files give no snippet."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str] | None] = {}

    def lines(self, path: str, upto: int) -> list[str] | None:
        """The file's first `upto` lines (tabs expanded), or None when it cannot be read."""
        cached = self._cache.get(path)
        if cached is not None and len(cached) >= upto:
            return cached
        if path in self._cache and cached is None:
            return None
        try:
            lines = _read(path, upto)
        except (OSError, ValueError):
            self._cache[path] = None
            return None
        self._cache[path] = lines
        return lines

    def snippet(self, source: Any) -> str:
        """The lines around `source` ({"file", "line"}) as a `<pre>`, or "" when there are none."""
        if not isinstance(source, dict) or not source.get("file"):
            return ""
        line = source.get("line")
        if not isinstance(line, int) or isinstance(line, bool) or line < 1:
            return ""
        lines = self.lines(str(source["file"]), line + SOURCE_CONTEXT)
        if not lines or len(lines) < line:
            return ""
        first = max(1, line - SOURCE_CONTEXT)
        width = len(str(min(len(lines), line + SOURCE_CONTEXT)))
        rows = []
        for n in range(first, min(len(lines), line + SOURCE_CONTEXT) + 1):
            text = f'<span class="ln">{str(n).rjust(width)}</span> {esc(lines[n - 1])}'
            rows.append(f'<span class="hl">{text}</span>' if n == line else text)
        return '<pre class="src">' + "\n".join(rows) + "</pre>"


def _read(path: str, upto: int) -> list[str]:
    if not os.path.isfile(path):
        raise OSError
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh):
            if i >= upto:
                break
            out.append(line.rstrip("\r\n").expandtabs(4))
    return out

"""Finding: the immutable record every check produces and every report renders."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How bad a finding is. Ordered: error > warning > info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclass(frozen=True)
class Source:
    """A place in the user's code: the first frame outside torch and leaky."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Cause:
    """The line a person has to change when it is not where the leak shows: where the
    learning rate was set, the weights initialised, the inputs built or the path cut.
    `what` says what stands there, in the user's numbers ("the learning rate 0.5 set here")."""

    file: str
    line: int
    what: str

    @classmethod
    def at(cls, source: Source | None, what: str) -> Cause | None:
        """A cause at a known source line; None when the line is not known."""
        return None if source is None else cls(source.file, source.line, what)

    @property
    def source(self) -> Source:
        return Source(self.file, self.line)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "what": self.what}


@dataclass(frozen=True)
class Finding:
    """One leak, where it is, the numbers that show it, and what to do about it."""

    name: str
    code: str
    severity: Severity
    message: str
    fix: str
    module: str | None = None
    op: str | None = None
    source: Source | None = None
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    cause: Cause | None = None   # the line to change, where it differs from `source`

    @property
    def where(self) -> str:
        """Human-readable location: module, op and source line, whichever are known."""
        parts = []
        if self.module is not None:
            parts.append(self.module or "<root>")
        if self.op:
            parts.append(self.op)
        text = " · ".join(parts)
        if self.source is not None:
            text = f"{text} ({self.source})" if text else str(self.source)
        return text or "<model>"

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "code": self.code,
            "severity": self.severity.value,
            "module": self.module,
            "op": self.op,
            "source": None if self.source is None else {"file": self.source.file, "line": self.source.line},
            "step": self.step,
            "message": self.message,
            "evidence": self.evidence,
            "fix": self.fix,
        }
        if self.cause is not None:       # optional key (leaky/report-v1): absent when unknown
            out["cause"] = self.cause.to_dict()
        return out

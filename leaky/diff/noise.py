"""How far two runs of the same program drift apart by chance: the tolerance of each statistic.

Run A again with its seeds shifted (`leaky fix`'s way: every seed the program sets moves by
the offset) and each statistic of each site moves by chance alone. A difference between A and
B counts only when it is larger than `SPREAD` times that chance movement (its root mean
square over the re-runs), larger than what the per-step spread of A and B allows for a mean
over their steps, and larger than the statistic's own floor: the smallest change that
matters to the gradient flow at all (FLOORS). Without re-runs (two reports, two stored runs)
only the per-step spread and the floors are left, and the comparison says so.

Statistics on a ratio scale (a gain, an update ratio) are compared as log10 of the ratio;
shares as plain differences.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from leaky.diff.align import align_reports

# NOTE: 4 root-mean-square chance movements: with one or two re-runs the estimate of that
# movement is itself rough (one or two degrees of freedom), and every site's every statistic
# is a comparison of its own: a smaller multiple reads the luck of one seed as a change.
SPREAD = 4.0
# NOTE: the smallest change that matters, from the math of the backward pass, not from any
# example: a gain 1.5x off (log10 0.18) compounds to 57x over 10 layers; an update ratio 2x
# off is a learning rate 2x off; 5 percentage points of the gradient zeroed, of units dead or
# of unit-samples flat is the smallest share the checks report as a trend.
# A site's backward running on a share of the steps 20 points apart (an expert routed to
# less often, a branch taken on fewer steps) is the least that changes which steps train it.
FLOORS = {"gain": math.log10(1.5), "update_ratio": math.log10(2.0), "zeroed_share": 0.05,
          "dead_share": 0.05, "flat_share": 0.05, "nonfinite": 0.5, "backward_share": 0.2}
LOG_SCALE = frozenset({"gain", "update_ratio"})


def scaled(stat: str, value: float | None) -> float | None:
    """The value on the scale it is compared on (log10 for ratios), None where it has none."""
    if value is None or isinstance(value, str):
        return None
    if stat in LOG_SCALE:
        return math.log10(value) if value > 0 and math.isfinite(value) else None
    return float(value) if math.isfinite(value) else None


def site_stats(report: dict) -> dict[int, dict[str, float | None]]:
    """Per site id of a report: each statistic the comparison reads (the share of steps its
    backward ran on, gain, zeroed share, dead and flat share of its units, its module's
    update ratio where the site trains a parameter, non-finite findings at it)."""
    units = {row["site"]: row for row in report.get("activations") or []}
    ratios = {row["module"]: row.get("update_ratio") for row in report.get("modules") or []}
    bad = {}
    for finding in report.get("findings") or []:
        if finding.get("name") == "non-finite" and finding.get("source"):
            key = (finding.get("module"), finding.get("op"), finding["source"].get("line"))
            bad[key] = bad.get(key, 0) + 1
    run = report.get("run") or {}
    # NOTE: the steps observed in detail (a watch's sampled ones), on which a site's backward is counted
    observed = run.get("sampled_steps") or run.get("steps") or len(report.get("series") or []) or 0
    stats = {}
    for op in report.get("ops") or []:
        unit = units.get(op["site"], {})
        line = (op.get("source") or {}).get("line")
        stats[op["site"]] = {
            "gain": op.get("gain"), "zeroed_share": op.get("zeroed_share"),
            "dead_share": unit.get("dead_share"), "flat_share": unit.get("flat_share"),
            "update_ratio": ratios.get(op.get("module")) if op.get("grad_param") is not None else None,
            "nonfinite": float(bad.get((op.get("module"), op.get("op"), line), 0)),
            # the share of the observed steps on which its backward ran (0 on both sides: not compared)
            "backward_share": min(1.0, (op.get("steps") or 0) / observed) if observed and op.get("steps") else None,
        }
    return stats


@dataclass
class Noise:
    """The chance movement of each site's statistics, keyed by A's site id and the statistic."""

    source: str                                # "reruns" | "steps"
    reruns: int = 0
    rms: dict[tuple[int, str], float] = field(default_factory=dict)

    def tolerance(self, stat: str, site_a: dict | None, site_b: dict | None) -> float:
        """The largest difference of `stat` (on its compared scale) that chance explains."""
        bound = FLOORS[stat]
        if site_a is not None:
            bound = max(bound, SPREAD * self.rms.get((site_a["site"], stat), 0.0))
        if stat == "gain" and site_a is not None and site_b is not None:
            bound = max(bound, SPREAD * _mean_error(site_a, site_b))
        return bound

    def describe(self) -> str:
        if self.source == "reruns":
            shifts = ", ".join(f"+{k}" for k in range(1, self.reruns + 1))
            return (f"A run again with its seeds shifted by {shifts}; a difference counts beyond {SPREAD:g}x the "
                    f"root-mean-square movement between those runs, and beyond its floor")
        return ("from the spread over A's and B's own steps, and the floors (A is a report or a stored run: "
                "it cannot be run again to measure the noise)")


def _mean_error(a: dict, b: dict) -> float:
    """The standard error of the difference of two geometric-mean gains, from each one's
    per-step spread (report ops[].gain_spread, log10) and its number of steps."""
    total = 0.0
    for side in (a, b):
        spread, steps = side.get("gain_spread"), side.get("steps") or 0
        if isinstance(spread, (int, float)) and math.isfinite(spread) and steps:
            total += spread ** 2 / steps
    return math.sqrt(total)


def from_reruns(base: dict, reruns: list[dict]) -> Noise:
    """The root-mean-square movement of every statistic of `base`'s sites over `reruns` (the
    same program, seeds shifted), each re-run aligned to `base` site by site."""
    squares: dict[tuple[int, str], list[float]] = {}
    base_stats = site_stats(base)
    for rerun in reruns:
        rerun_stats = site_stats(rerun)
        for pair in align_reports(base, rerun):
            if pair.a is None or pair.b is None or pair.status != "same":
                continue
            for stat, value in base_stats[pair.a["site"]].items():
                x, y = scaled(stat, value), scaled(stat, rerun_stats[pair.b["site"]].get(stat))
                if x is not None and y is not None:
                    squares.setdefault((pair.a["site"], stat), []).append((y - x) ** 2)
    rms = {key: math.sqrt(sum(values) / len(values)) for key, values in squares.items()}
    return Noise("reruns", len(reruns), rms)


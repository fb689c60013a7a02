"""Compare two audit reports: the first site, from the loss toward the inputs, whose gradient
statistics differ beyond the noise; what that means; the line to look at; the loss curves
and the set-up beside it.

Only a site's own statistics are compared (its gain, the share of the gradient it zeroes,
the dead and flat shares of its units, its module's update ratio, non-finite values born at
it), never the gradient norm that merely arrives at it: that one moves with every change
nearer the loss, and the walk from the loss has already looked there.
"""
from __future__ import annotations

from leaky.diff.align import Pair, align_reports
from leaky.diff.config import compare_config, line_text
from leaky.diff.loss import compare_losses
from leaky.diff.noise import LOG_SCALE, Noise, scaled, site_stats
from leaky.numbers import num, pct

STATS = ("backward_share", "zeroed_share", "gain", "dead_share", "flat_share", "update_ratio", "nonfinite")
# which set-up differences explain which statistic, nearest cause first
RELEVANT = {"update_ratio": ("learning_rate", "input", "init", "dtype", "mode"),
            "gain": ("init", "input", "mode", "dtype", "learning_rate"),
            "flat_share": ("input", "init", "learning_rate", "mode", "dtype"),
            "dead_share": ("learning_rate", "input", "init", "mode", "dtype"),
            "zeroed_share": ("input", "mode", "init", "learning_rate", "dtype"),
            "nonfinite": ("dtype", "learning_rate", "input", "init", "mode"),
            "backward_steps": ("mode", "init", "input", "learning_rate", "dtype"),
            "backward_share": ("mode", "init", "input", "learning_rate", "dtype"),
            "site": ("mode", "init", "input", "learning_rate", "dtype")}


def _side(op: dict | None) -> dict | None:
    if op is None:
        return None
    return {"site": op["site"], "op": op["op"], "module": op.get("module"), "source": op.get("source"),
            "grad_in": op.get("grad_in")}


def _name(op: dict) -> str:
    if op.get("module") is None:
        return f"`{op['op']}` at {line_text(op.get('source'))} (outside any module)"
    return f"`{op['module']}` (`{op['op']}` at {line_text(op.get('source'))})"


def _value(stat: str, value) -> str:
    if value is None:
        return "n/a"
    if stat in ("zeroed_share", "dead_share", "flat_share", "backward_share"):
        return pct(value)
    if stat == "nonfinite":
        return f"{int(value)}"
    return f"{num(value)}x" if stat == "gain" else num(value)


def _meaning(stat: str, pair: Pair, a, b) -> str:
    x = _value(stat, a) if pair.a is not None else "none, A does not run it"
    if a is None and pair.status == "changed_op":
        x = f"none at its `{pair.a['op']}`"
    y = _value(stat, b)
    if pair.b is None:
        return f"{_name(pair.a)} is not in B's backward pass, where in A {_value(stat, a)} {_SAID[stat]}"
    who = f"in B, {_name(pair.b)}"
    if pair.status == "changed_op":
        where = f"`{pair.b['module']}` " if pair.b.get("module") is not None else "the op "
        who = (f"in B, {where}(`{pair.a['op']}` at {line_text(pair.a.get('source'))} in A) is `{pair.b['op']}` at "
               f"{line_text(pair.b.get('source'))}, and")
    if stat == "zeroed_share":
        return f"{who} zeroes {y} of the gradient that reaches it (A: {x})"
    if stat == "gain":
        return f"{who} passes back {y} of the gradient norm that reaches it (A: {x})"
    if stat == "dead_share":
        return f"{who} has {y} of its units dead, never firing (A: {x})"
    if stat == "flat_share":
        return f"{who} has {y} of its unit-samples where its derivative is near 0 (A: {x})"
    if stat == "update_ratio":
        return f"{who} moves its weights by {y} of their norm per step (A: {x})"
    if stat == "backward_share":
        return f"{who} has the gradient pass through it on {y} of the observed steps (A: {x})"
    return f"{who} produces non-finite values at {y} step(s) (A: {x})"


_SAID = {"backward_share": "of the steps passed the gradient through it",
         "zeroed_share": "of the gradient reaching it was zeroed there", "dead_share": "of its units were dead",
         "flat_share": "of its unit-samples were flat", "nonfinite": "non-finite values were born there",
         "gain": "was its gain", "update_ratio": "was its update ratio"}


def _differences(pair: Pair, stats_a: dict, stats_b: dict, noise: Noise) -> list[dict]:
    """The statistics of an aligned site that differ beyond the noise. A site on one side
    only is held against none at all: a share it has (of the gradient zeroed, of its units
    dead or flat) is a difference; a gain or the share of steps it ran on is not."""
    found = []
    if pair.a is not None and pair.b is not None and bool(pair.a.get("steps")) != bool(pair.b.get("steps")):
        # its forward ran on both sides, its backward on one only: a cut between it and the loss
        a, b = pair.a.get("steps") or 0, pair.b.get("steps") or 0
        found.append({"stat": "backward_steps", "a": a, "b": b, "noise": 0.0, "log10": False,
                      "meaning": (f"in B, no gradient reaches {_name(pair.b)}: its backward never ran (A: on {a} "
                                  f"steps)") if not b else
                                 f"in B, the gradient reaches {_name(pair.b)} on {b} steps (A: never)"})
        return found
    for stat in STATS:
        a = stats_a[pair.a["site"]].get(stat) if pair.a is not None else None
        b = stats_b[pair.b["site"]].get(stat) if pair.b is not None else None
        x, y = scaled(stat, a), scaled(stat, b)
        if x is None and y is None:
            continue
        tolerance = noise.tolerance(stat, pair.a, pair.b)
        if x is None or y is None:
            # NOTE: a gain or the share of steps its backward ran is no difference by itself:
            # every site has one (a reduction's gain is set by its shape)
            if stat in LOG_SCALE or stat == "backward_share" or pair.status == "same":
                continue
            beyond = abs(x if y is None else y) > tolerance
        else:
            beyond = abs(y - x) > tolerance
        if beyond:
            found.append({"stat": stat, "a": a, "b": b, "noise": tolerance, "log10": stat in LOG_SCALE,
                          "meaning": _meaning(stat, pair, a, b)})
    return found


def _findings_at(report: dict, op: dict | None, run: str) -> list[dict]:
    if op is None:
        return []
    line = (op.get("source") or {}).get("line")
    file = (op.get("source") or {}).get("file")
    out = []
    for finding in report.get("findings") or []:
        source = finding.get("source") or {}
        here = source.get("line") == line and source.get("file") == file
        if here or (finding.get("module") and finding.get("module") == op.get("module")):
            out.append(dict(finding, run=run))
    return out


def _key(finding: dict) -> tuple:
    return finding.get("code"), finding.get("op"), finding.get("severity")


def _finding_sets(a: dict, b: dict) -> dict:
    keys_a = [_key(f) for f in a.get("findings") or []]
    keys_b = [_key(f) for f in b.get("findings") or []]
    only_a = [f for f, k in zip(a.get("findings") or [], keys_a) if k not in keys_b]
    only_b = [f for f, k in zip(b.get("findings") or [], keys_b) if k not in keys_a]
    both = [f for f, k in zip(b.get("findings") or [], keys_b) if k in keys_a]
    return {"only_a": only_a, "only_b": only_b, "both": both}


def _change(entry: dict, pair: Pair, config: list[dict], only_b: list[dict]) -> dict | None:
    """The line to look at for a parted site: the op that changed; a cause a finding of B
    alone names; the set-up line that explains the statistic; the site itself."""
    if pair.status == "changed_op":
        return dict(pair.b["source"], what=f"`{pair.b['op']}` here, where A ran `{pair.a['op']}` at "
                                           f"{line_text(pair.a.get('source'))}") if pair.b.get("source") else None
    if pair.status == "only_b" and entry["differences"] and pair.b.get("source"):
        return dict(pair.b["source"], what=f"`{pair.b['op']}` here, which A does not run")
    keys = {_key(f) for f in only_b}
    for finding in entry["explained_by"]:
        if finding.get("run") == "B" and _key(finding) in keys and finding.get("cause"):
            return dict(finding["cause"])
    cut = any(d["stat"] == "backward_steps" for d in entry["differences"])
    if pair.status in ("only_a", "only_b") or cut:
        for finding in only_b:
            if finding.get("cause") and finding.get("name") == "no-gradient-path":
                return dict(finding["cause"])
    stat = entry["differences"][0]["stat"] if entry["differences"] else "site"
    module = (pair.b or pair.a).get("module")
    for kind in RELEVANT[stat]:
        rows = [r for r in config if r["kind"] == kind and r["source_b"]]
        row = next((r for r in rows if r.get("module") == module), rows[0] if rows else None)
        if row is not None:
            return dict(row["source_b"], what=row.get("why") or f"{row['what']}: {row['b']} in B, {row['a']} in A")
    side = pair.b or pair.a
    if side.get("source"):
        return dict(side["source"], what=f"`{side['op']}` in {'B' if pair.b else 'A'}")
    return None


def _counterparts(pairs: list[Pair]) -> tuple[set, set]:
    """The module paths of A, and of B, that have a site aligned with one on the other side."""
    paired = [pair for pair in pairs if pair.a is not None and pair.b is not None]
    return ({pair.a.get("module") for pair in paired}, {pair.b.get("module") for pair in paired})


def _entry(pair: Pair, a: dict, b: dict, stats_a: dict, stats_b: dict, noise: Noise, paired: tuple[set, set]) -> dict:
    differences = _differences(pair, stats_a, stats_b, noise)
    status = pair.status
    # NOTE: a site on one side only parts the runs when its whole module left (or joined)
    # the backward pass, or when it has a share of its own beyond the floors (a clamp that
    # only B runs, zeroing the gradient): an op that a refactor split or fused, inside a
    # module both runs still train, is not a change in the gradient flow.
    side = pair.a if status == "only_a" else pair.b if status == "only_b" else None
    module_left = side is not None and side.get("module") is not None \
        and side["module"] not in paired[0 if status == "only_a" else 1]
    parted = bool(differences) or module_left
    if status == "only_a":
        meaning = (f"{_name(pair.a)} is not in B's backward pass: no gradient went through it in B "
                   f"(cut before it, or it ran without a gradient, or not at all)")
    elif status == "only_b":
        meaning = f"{_name(pair.b)} runs in B's backward pass only"
    else:
        meaning = "the same within the noise"
    if differences:
        meaning = differences[0]["meaning"]
    elif status == "changed_op":
        meaning = f"B runs `{pair.b['op']}` where A ran `{pair.a['op']}`, with the same gradient statistics"
    explained = _findings_at(b, pair.b, "B") + _findings_at(a, pair.a, "A")
    return {"status": "parted" if parted and status == "same" else status, "parted": parted,
            "a": _side(pair.a), "b": _side(pair.b), "differences": differences, "meaning": meaning,
            "change": None, "explained_by": explained}


def compare(a: dict, b: dict, noise: Noise, reruns: list[dict] | None = None) -> dict:
    """The comparison of report `b` against report `a` (report-v1 dicts): every aligned site
    from the loss toward the inputs, the first parted one, the loss curves, the set-up."""
    pairs = align_reports(a, b)
    stats_a, stats_b = site_stats(a), site_stats(b)
    config = compare_config(a, b)
    findings = _finding_sets(a, b)
    paired = _counterparts(pairs)
    entries = []
    for pair in pairs:
        entry = _entry(pair, a, b, stats_a, stats_b, noise, paired)
        if entry["parted"]:
            entry["change"] = _change(entry, pair, config, findings["only_b"])
        entries.append(entry)
    first = next((e for e in entries if e["parted"]), None)
    losses = compare_losses(a, b, reruns or [])
    parted = first is not None or any(row["parted_at"] is not None for row in losses)
    flow = [{"label": f"{(e['b'] or e['a'])['module'] or '<script>'} · {(e['b'] or e['a'])['op']}",
             "a": (e["a"] or {}).get("grad_in"), "b": (e["b"] or {}).get("grad_in"), "parted": e["parted"]}
            for e in entries]
    return {"verdict": "parted" if parted else "same", "reason": None,
            "noise": {"source": noise.source, "reruns": noise.reruns, "detail": noise.describe()},
            "first_parted": first, "sites": entries, "loss": losses, "config": config,
            "findings": findings, "flow": flow}

"""Detection benchmark: run `leaky audit` on every case of the zoo and score the findings.

For each case folder in benchmarks/zoo/ (sorted) this runs, in the case folder,

    python -m leaky audit --json <tmp> [label "args"] train.py [label "script_args"]

(`leaky probe` instead of `leaky audit` for a label with "command": "probe", the cases of
LK308 and LK309 and their look-alikes; its leaky/probe-v1 JSON has the same `findings`)
with OMP_NUM_THREADS=1 and a 120 s timeout, loads the JSON report and scores it against
label.json (format: benchmarks/zoo/README.md):

- detected:  a finding with the expected code (or name) at warning or error severity;
- localized: detected, and a matching finding points at the label's line of train.py (its
             `source`, or its `cause`: the line to change) (when
             the label gives a line), else sits in the label's module or one of its
             submodules (when it gives a module), else detected is enough;
- top-1:     the most severe findings (ties: all of them) include the expected code, at
             warning or error;
- healthy cases: every warning or error is a false alarm.

Prints a per-check table, the overall rates, the false alarms, the published figures of
other tools (measured by their authors on other data) and the targets. Exit 0: it is a
measurement, not a gate; exit 1 only when leaky itself crashed on a case (its internal
error: exit code 2 with "internal error", a report whose run.internal_error is set, or an
uncaught traceback from inside the leaky package).

    python benchmarks/detection.py
    python benchmarks/detection.py --cases 'h*' --jobs 2
    python benchmarks/detection.py --markdown --json results.json
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"
TIMEOUT_S = 120
RANK = {"info": 1, "warning": 2, "error": 3}
ALARM = RANK["warning"]

TARGETS = {"detection": 0.95, "localization": 0.90, "top1": 0.85}

PEERS = [
    ("DeepDiagnosis", "46/53 identified (87%), 34/53 localized (64%)"),
    ("DeepFD", "27/52 correct diagnosis (52%)"),
    ("AUTOTRAINER", "12/52 detected (23%), when rerun independently"),
]


# -- running one case -------------------------------------------------------------------
def _leaky_dir() -> str | None:
    spec = importlib.util.find_spec("leaky")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


LEAKY_DIR = _leaky_dir()


def _leaky_traceback(text: str) -> bool:
    """An uncaught Python traceback whose innermost frame is inside the leaky package."""
    if "Traceback (most recent call last)" not in text or not LEAKY_DIR:
        return False
    frames = re.findall(r'File "([^"]+)", line \d+', text.rsplit("Traceback (most recent call last)", 1)[1])
    return bool(frames) and os.path.realpath(frames[-1]).startswith(LEAKY_DIR + os.sep)


def run_case(case: Path) -> dict:
    result: dict = {"case": case.name, "status": None, "rc": None, "seconds": None, "findings": [],
                    "healthy": None, "expect": [], "false_alarms": [], "output_tail": ""}
    try:
        label = json.loads((case / "label.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        result.update(status="bad-label", detail=f"label.json: {exc}")
        return result
    result["healthy"] = bool(label.get("healthy"))
    result["label"] = label
    audit_args = [str(a) for a in label.get("args") or []]
    script_args = [str(a) for a in label.get("script_args") or []]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="leaky-detect-") as tmp:
        out_json = os.path.join(tmp, "report.json")
        command = label.get("command", "audit")   # "probe": LK308/LK309, judged by `leaky probe`
        cmd = [sys.executable, "-m", "leaky", command, "--json", out_json, *audit_args, "train.py", *script_args]
        result["command"] = cmd[1:]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=case, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            result["seconds"] = round(time.perf_counter() - start, 2)
            tail = (exc.stdout or b"") + (exc.stderr or b"")
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            result.update(status="timeout", output_tail=tail[-2000:])
            return score(result, None, label)
        result["seconds"] = round(time.perf_counter() - start, 2)
        result["rc"] = proc.returncode
        output = (proc.stdout or "") + (proc.stderr or "")
        result["output_tail"] = output[-2000:]
        report = None
        if os.path.exists(out_json):
            try:
                with open(out_json, encoding="utf-8") as handle:
                    report = json.load(handle)
            except ValueError as exc:
                result["detail"] = f"unreadable JSON report: {exc}"
    internal = (report or {}).get("run", {}).get("internal_error")
    if (proc.returncode == 2 and "internal error" in output.lower()) or internal or _leaky_traceback(output):
        result["status"] = "crash"
        result["detail"] = internal or _last_line(proc.stderr or proc.stdout)
    elif report is None:
        result["status"] = "no-report"
        result["detail"] = result.get("detail") or _last_line(proc.stderr or proc.stdout)
    else:
        result["status"] = "ok"
    return score(result, report, label)


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# -- scoring ----------------------------------------------------------------------------
def _matches(finding: dict, exp: dict) -> bool:
    return ((exp.get("code") is not None and finding.get("code") == exp.get("code"))
            or (exp.get("name") is not None and finding.get("name") == exp.get("name")))


def _line_ok(finding: dict, line: int) -> bool:
    """The finding's `source` or its `cause` (the line to change) is the label's line of train.py."""
    for src in (finding.get("source") or {}, finding.get("cause") or {}):
        if src.get("line") == line and (not src.get("file") or os.path.basename(src["file"]) == "train.py"):
            return True
    return False


def _module_ok(finding: dict, module: str) -> bool:
    got = finding.get("module")
    return got is not None and (got == module or got.startswith(module + "."))


def score(result: dict, report: dict | None, label: dict) -> dict:
    findings = [{"name": f.get("name"), "code": f.get("code"), "severity": f.get("severity"),
                 "module": f.get("module"), "op": f.get("op"), "source": f.get("source"),
                 "cause": f.get("cause"), "message": (f.get("message") or "")[:400]}
                for f in (report or {}).get("findings", [])]
    result["findings"] = findings
    alarms = [f for f in findings if RANK.get(f["severity"], 0) >= ALARM]
    top = max((RANK.get(f["severity"], 0) for f in findings), default=0)
    most_severe = [f for f in findings if RANK.get(f["severity"], 0) == top] if top >= ALARM else []
    if result["healthy"]:
        result["false_alarms"] = alarms
    for exp in label.get("expect") or []:
        hits = [f for f in alarms if _matches(f, exp)]
        detected = bool(hits)
        if exp.get("line") is not None:
            localized = any(_line_ok(f, exp["line"]) for f in hits)
        elif exp.get("module") is not None:
            localized = any(_module_ok(f, exp["module"]) for f in hits)
        else:
            localized = detected
        result["expect"].append({
            "code": exp.get("code"), "name": exp.get("name"), "line": exp.get("line"), "module": exp.get("module"),
            "detected": detected, "localized": localized,
            "top1": any(_matches(f, exp) for f in most_severe),
            "got": [{"severity": f["severity"], "module": f["module"], "source": f["source"]} for f in hits],
        })
    return result


# -- output -----------------------------------------------------------------------------
def _pct(num: int, den: int) -> str:
    return f"{num}/{den} ({100.0 * num / den:.0f}%)" if den else "n/a"


def _table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in [h, *(r[i] for r in rows)]) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*[str(c) for c in row]) for row in rows]
    return "\n".join(lines)


def _heading(text: str, markdown: bool) -> str:
    return f"\n### {text}\n" if markdown else f"\n{text}\n{'=' * len(text)}"


def _where(f: dict) -> str:
    src = f.get("source") or {}
    loc = f"{os.path.basename(src['file'])}:{src['line']}" if src.get("file") else "-"
    return loc


def render(results: list[dict], markdown: bool) -> str:
    out: list[str] = []
    broken = [r for r in results if r["healthy"] is False]
    healthy = [r for r in results if r["healthy"] is True]

    out.append(_heading("Cases", markdown))
    rows = []
    for r in results:
        if r["healthy"]:
            verdict = f"{len(r['false_alarms'])} false alarm(s)" if r["false_alarms"] else "clean"
        elif r["healthy"] is None:
            verdict = "-"
        else:
            verdict = ", ".join(
                f"{e['code'] or e['name']}: " + ("D" if e["detected"] else "-") + ("L" if e["localized"] else "-")
                + ("T" if e["top1"] else "-") for e in r["expect"]) or "no expectation"
        found = ", ".join(sorted({f"{f['code']}:{f['severity'][0].upper()}" for f in r["findings"]})) or "-"
        rows.append([r["case"], "healthy" if r["healthy"] else ("broken" if r["healthy"] is False else "?"),
                     r["status"], "" if r["rc"] is None else r["rc"],
                     "" if r["seconds"] is None else f"{r['seconds']:.1f}", verdict, found])
    out.append(_table(["case", "kind", "status", "rc", "s", "expected (D=detected L=localized T=top-1)",
                       "findings (code:severity)"], rows, markdown))

    exps = [e for r in broken for e in r["expect"]]
    if broken:
        out.append(_heading("Per check (broken cases)", markdown))
        by_code: dict[str, list[dict]] = {}
        for e in exps:
            by_code.setdefault(e["code"] or e["name"], []).append(e)
        rows = [[code, len(es), _pct(sum(e["detected"] for e in es), len(es)),
                 _pct(sum(e["localized"] for e in es), len(es)), _pct(sum(e["top1"] for e in es), len(es))]
                for code, es in sorted(by_code.items())]
        rows.append(["all", len(exps), _pct(sum(e["detected"] for e in exps), len(exps)),
                     _pct(sum(e["localized"] for e in exps), len(exps)), _pct(sum(e["top1"] for e in exps), len(exps))])
        out.append(_table(["code", "cases", "detected", "localized", "top-1"], rows, markdown))

    out.append(_heading("Overall", markdown))
    n_exp = len(exps)
    det = sum(e["detected"] for e in exps)
    loc = sum(e["localized"] for e in exps)
    top = sum(e["top1"] for e in exps)
    cases_all = sum(1 for r in broken if r["expect"] and all(e["detected"] for e in r["expect"]))
    alarmed = [r for r in healthy if r["false_alarms"]]
    n_alarms = sum(len(r["false_alarms"]) for r in healthy)
    rows = [
        ["broken cases (all expectations detected)", _pct(cases_all, len(broken))],
        ["detection (expectations)", _pct(det, n_exp)],
        ["localization (expectations)", _pct(loc, n_exp)],
        ["top-1 (expectations)", _pct(top, n_exp)],
        ["healthy cases with a false alarm", _pct(len(alarmed), len(healthy))],
        ["false alarms (warning/error on healthy cases)", str(n_alarms)],
    ]
    not_run = [r for r in results if r["status"] != "ok"]
    if not_run:
        rows.append(["cases without a usable report", ", ".join(f"{r['case']} ({r['status']})" for r in not_run)])
    out.append(_table(["measure", "value"], rows, markdown))

    out.append(_heading("False alarms on healthy cases", markdown))
    if not healthy:
        out.append("no healthy case was run")
    elif not n_alarms:
        out.append(f"none: 0 warnings or errors on {len(healthy)} healthy cases")
    else:
        rows = [[r["case"], f["code"], f["name"], f["severity"], f["module"] or "-", f["op"] or "-", _where(f),
                 " ".join(f["message"].split())[:160]]
                for r in alarmed for f in r["false_alarms"]]
        out.append(_table(["case", "code", "name", "severity", "module", "op", "source", "message"], rows, markdown))

    problems = [r for r in not_run]
    if problems:
        out.append(_heading("Cases that produced no usable report", markdown))
        rows = [[r["case"], r["status"], "" if r["rc"] is None else r["rc"], r.get("detail") or "-"] for r in problems]
        out.append(_table(["case", "status", "rc", "detail"], rows, markdown))

    out.append(_heading("Published figures of other tools (measured by their authors, on other data)", markdown))
    out.append("Not measured on this zoo and not directly comparable: different benchmarks, fault "
               "definitions and scoring." + ("\n" if markdown else ""))
    out.append(_table(["tool", "published result"], [list(p) for p in PEERS], markdown))

    out.append(_heading("Targets", markdown))

    def rate(n, d):
        return n / d if d else None

    measured = {"detection": rate(det, n_exp), "localization": rate(loc, n_exp), "top1": rate(top, n_exp)}
    rows = []
    for key, label in (("detection", "detection"), ("localization", "localization"), ("top1", "top-1")):
        value = measured[key]
        rows.append([label, f">= {TARGETS[key]:.0%}", "n/a" if value is None else f"{value:.1%}",
                     "n/a" if value is None else ("met" if value >= TARGETS[key] else "NOT met")])
    rows.append(["false alarms on healthy cases", "0", str(n_alarms) if healthy else "n/a",
                 "n/a" if not healthy else ("met" if n_alarms == 0 else "NOT met")])
    out.append(_table(["target", "goal", "measured", "status"], rows, markdown))
    return "\n".join(out)


# -- main -------------------------------------------------------------------------------
def find_cases(pattern: str | None) -> list[Path]:
    cases = sorted(p for p in ZOO.iterdir() if p.is_dir() and (p / "train.py").exists())
    if pattern:
        cases = [p for p in cases if fnmatch.fnmatch(p.name, pattern)]
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", metavar="GLOB", help="only the case folders whose name matches (e.g. 'h*')")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="cases run in parallel (default 1)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", metavar="PATH", help="write every per-case result here")
    args = parser.parse_args(argv)

    cases = find_cases(args.cases)
    if not cases:
        print(f"no case folder in {ZOO} matches {args.cases!r}", file=sys.stderr)
        return 0
    results: dict[str, dict] = {}
    done = 0
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_case, case): case for case in cases}
        for future in concurrent.futures.as_completed(futures):
            r = future.result()
            results[r["case"]] = r
            done += 1
            extra = f", {len(r['false_alarms'])} false alarm(s)" if r["false_alarms"] else ""
            secs = f" {r['seconds']:.1f}s" if r["seconds"] is not None else ""
            print(f"[{done}/{len(cases)}] {r['case']}: {r['status']}{secs}{extra}", file=sys.stderr, flush=True)
    ordered = [results[c.name] for c in cases]
    print(render(ordered, args.markdown))
    print(f"\n{len(cases)} cases in {time.perf_counter() - started:.0f} s (--jobs {args.jobs})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"cases": ordered, "targets": TARGETS,
                       "peers": [{"tool": t, "published": p} for t, p in PEERS]}, handle, indent=2)
    crashed = [r["case"] for r in ordered if r["status"] == "crash"]
    if crashed:
        print(f"leaky crashed (internal error) on: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

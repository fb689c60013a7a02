"""The command line's arguments: one sub-parser per command, their help and the exit codes."""
from __future__ import annotations

import argparse
import os
import re


EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2
EXIT_CODES = """exit status:
  0  no finding at or above --fail-on, and the script did not fail
  1  findings at or above --fail-on{fail_fast}
  2  the script could not be run, or no backward pass was observed (and it did not fail)
  N  the script's own nonzero status, as `python SCRIPT` would end (1: an uncaught
     exception; N: sys.exit(N); 130: Ctrl-C); it wins over 1 for findings. The
     script's traceback, without leaky's frames, follows the report on stderr."""
FAIL_ON = ("error", "warning", "info", "never")
PROBE_EXIT_CODES = """exit status:
  0  every probe passed
  1  a probe failed (its LK308/LK309 finding is in the report)
  2  no probe failed, and one could not run (the reason is in its row), or the script
     cannot be run at all
  N  the real-input run's own nonzero status, as `python SCRIPT` would end (1: an
     uncaught exception; N: sys.exit(N)); its traceback follows on stderr. 130: Ctrl-C"""


DIFF_EXIT_CODES = """exit status:
  0  no difference beyond the noise
  1  B parts from A: a site's gradient statistics, or the loss curve, differ beyond the noise
  2  the comparison could not be made (the reason is printed): a side cannot be read or
     run, or made no optimizer step. 130: Ctrl-C"""


_INTERPRETER = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")
_TAKES_VALUE = {"-W", "-X", "-Q"}   # the interpreter's options that take the next word


def without_interpreter(words: list[str]) -> tuple[list[str], str | None]:
    """`python train.py args` as the user wrote it for the script: the words without a
    leading Python interpreter (and its own options, such as -u), and a line saying what was
    dropped (None when nothing was). leaky runs the script in its own Python, so `leaky watch
    python train.py` means `leaky watch train.py`. `python -m MODULE` and `python -c CODE`
    are not scripts: ValueError with the reason."""
    if not words or not _INTERPRETER.fullmatch(os.path.basename(words[0])) or os.path.isfile(words[0] + ".py"):
        return words, None
    at, options = 1, []
    while at < len(words) and words[at].startswith("-") and words[at] != "-":
        option = words[at]
        if option.startswith(("-m", "-c")):
            what = " ".join(words[:at + 2]) if option in ("-m", "-c") else " ".join(words[:at + 1])
            raise ValueError(f"leaky runs a script file, not `{what}`: give the training script's .py file")
        take = 2 if option in _TAKES_VALUE else 1
        options.extend(words[at:at + take])
        at += take
    rest = words[at:]
    if not rest:
        return words, None   # `python` alone: the usual "no such file" error says it
    dropped = " ".join([words[0], *options])
    note = (f"running {rest[0]} in leaky's own Python; the leading `{dropped}` is not needed"
            + (f" (its option{'s' if len(options) > 1 else ''} {' '.join(options)} "
               f"{'are' if len(options) > 1 else 'is'} not applied)" if options else ""))
    return rest, note


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("expected 0 or more")
    return value


def _share(text: str) -> float:
    """`2%`, `2` (percent) or `0.02`: a share of the training time, above 0 and below 100%."""
    raw = text.strip()
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 2% or 0.5%, not {text!r}") from None
    share = value / 100 if raw.endswith("%") or value >= 1 else value
    if not 0 < share < 1:
        raise argparse.ArgumentTypeError(f"expected a percentage above 0% and below 100%, not {text!r}")
    return share


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive number")
    return value


def _steps(text: str) -> int | None:
    if text in ("all", "0"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes a positive number or 'all', not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("--steps must be positive (or 'all')")
    return value


def _rerun_arguments(command, scored: str, repeats: str, schema: str) -> None:
    """The flags `leaky fix` and `leaky probe` share: K, H, R, the JSON, --example, the script."""
    command.add_argument("--steps", type=_positive, default=200, metavar="K",
                         help="training steps of each run (default 200)")
    command.add_argument("--holdout", type=_positive, default=20, metavar="H",
                         help=f"held-out steps after step K, the model frozen, that {scored} (default 20)")
    command.add_argument("--repeats", type=_positive, default=2, metavar="R", help=f"{repeats} (default 2)")
    command.add_argument("--json", metavar="PATH", help=f"write the leaky/{schema}-v1 JSON result here ('-': stdout)")
    command.add_argument("--example", metavar="NAME", help="a built-in example instead of a script (see leaky demo)")
    command.add_argument("script", nargs="?", help="the training script, run as `python SCRIPT args...` would")
    command.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leaky", description="Find where backprop leaks in PyTorch training.")
    sub = parser.add_subparsers(dest="command", required=True)
    audit = sub.add_parser("audit", help="run a training script under instrumentation and report leaks",
                           epilog=EXIT_CODES.format(fail_fast=""), formatter_class=argparse.RawDescriptionHelpFormatter)
    audit.add_argument("--steps", type=_steps, default=20, metavar="N",
                       help="optimizer steps to observe (backward calls if no optimizer); 'all' for the whole "
                            "script (default 20)")
    audit.add_argument("--json", metavar="PATH", help="write the leaky/report-v1 JSON report here ('-': stdout)")
    audit.add_argument("--fail-on", choices=FAIL_ON, default="error",
                       help="exit 1 when a finding at or above this severity exists (default error)")
    audit.add_argument("--no-table", action="store_true", help="leave out the gradient-flow table")
    audit.add_argument("--format", choices=("text", "json", "sarif"), default="text",
                       help="text (default) for people; json or sarif on stdout, or into --output")
    audit.add_argument("--output", metavar="PATH", help="write the --format json/sarif output here")
    audit.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report here")
    audit.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    audit.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    watch = sub.add_parser("watch", help="follow a whole training run cheaply and keep it in a store",
                           epilog=EXIT_CODES.format(fail_fast=" (or --fail-fast stopped training)"),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    watch.add_argument("--every", type=_positive, default=None, metavar="N",
                       help="observe every N-th step in detail, whatever it costs (overrides --overhead)")
    watch.add_argument("--overhead", type=_share, default=None, metavar="P%",
                       help="observe as many steps in detail as P%% of the training time pays for, "
                            "measured in the run (default 2%%)")
    watch.add_argument("--store", metavar="PATH", default="leaky-runs.db",
                       help="SQLite run store (default ./leaky-runs.db)")
    watch.add_argument("--fail-fast", action="store_true",
                       help="stop training at the first error-severity finding (exit 1)")
    watch.add_argument("--json", metavar="PATH", help="write the leaky/report-v1 JSON report at the end")
    watch.add_argument("--fail-on", choices=FAIL_ON, default="error",
                       help="exit 1 when a finding at or above this severity exists (default error)")
    watch.add_argument("--no-table", action="store_true", help="leave out the gradient-flow table")
    watch.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard events to this log dir")
    watch.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report here")
    watch.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    watch.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    runs = sub.add_parser("runs", help="list the runs in a store")
    runs.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    report = sub.add_parser("report", help="write a stored run's HTML report")
    report.add_argument("run", nargs="?", default="latest", help="run id, or 'latest' (default)")
    report.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    report.add_argument("--html", metavar="PATH", required=True, help="where to write the HTML report")
    show = sub.add_parser("show", help="a stored run's findings and timeline")
    show.add_argument("run", nargs="?", default="latest", help="run id, or 'latest' (default)")
    show.add_argument("--store", metavar="PATH", default="leaky-runs.db")
    fix = sub.add_parser("fix", help="try the fix for each finding as a short run from the same start, and judge it",
                         epilog="exit status: 0; 2 when the script cannot be run or makes no optimizer step; "
                                "or the unfixed run's own nonzero status, as `python SCRIPT` would end (its "
                                "traceback follows on stderr); 130 on Ctrl-C")
    _rerun_arguments(fix, "score each run", "unfixed runs with shifted seeds that measure the noise", "fix")
    probe = sub.add_parser("probe", help="the active checks: can the model memorise one batch (LK308), does it "
                                         "use its input (LK309); short runs from the same start",
                           epilog=PROBE_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _rerun_arguments(probe, "score LK309's runs", "real-input runs with shifted seeds that measure LK309's noise",
                     "probe")
    diff = sub.add_parser("diff", help="compare two runs: the first op, from the loss toward the inputs, where "
                                       "their gradient flow parted", epilog=DIFF_EXIT_CODES,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    diff.add_argument("sides", nargs="*", metavar="RUN",
                      help="A, then B: a report written with --json, or a stored run (an id or 'latest', in --store)")
    diff.add_argument("--run", action="append", default=[], metavar="COMMAND",
                      help='audit a command here, e.g. --run "train.py --old" --run "train.py --new" (A first); '
                           "A is run again with shifted seeds to measure the noise")
    diff.add_argument("--example", metavar="NAME",
                      help="a built-in broken example (B) against the example that fixes it (A); see leaky demo")
    diff.add_argument("--store", metavar="PATH", default="leaky-runs.db", help="SQLite run store (default "
                                                                             "./leaky-runs.db)")
    diff.add_argument("--steps", type=_positive, default=30, metavar="K",
                      help="optimizer steps of each run made here (default 30)")
    diff.add_argument("--reruns", type=_count, default=2, metavar="R",
                      help="runs of A with shifted seeds that measure the noise, when A is run here (default 2; "
                           "0: the spread over A's own steps)")
    diff.add_argument("--json", metavar="PATH", help="write the leaky/diff-v1 JSON result here ('-': stdout)")
    diff.add_argument("--html", metavar="PATH", help="also write an HTML page overlaying the two runs")
    explain = sub.add_parser("explain", help="print what a check means and how to fix it")
    explain.add_argument("check", nargs="?", help="a check name (dead-zone) or code (LK106); none lists all")
    demo = sub.add_parser("demo", help="audit the built-in broken models next to their fixes")
    demo.add_argument("--steps", type=_steps, default=20, metavar="N", help="steps per example (default 20)")
    demo.add_argument("--only", metavar="NAME", help="run one example pair (e.g. dqn-clamped-td)")
    return parser

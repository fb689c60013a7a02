"""The `leaky` command: audit, watch, runs, show, explain, demo.

    leaky audit [--steps N] [--json PATH] [--fail-on error] SCRIPT [script args...]
    leaky watch [--every N] [--store PATH] [--fail-fast] [--json PATH] SCRIPT [script args...]
    leaky runs [--store PATH]
    leaky show RUN [--store PATH]
    leaky fix [--steps K] [--holdout H] [--repeats R] [--json PATH] SCRIPT [script args...]
    leaky probe [--steps K] [--holdout H] [--repeats R] [--json PATH] SCRIPT [script args...]
    leaky diff A.json B.json | RUN RUN [--store PATH] | --run "train.py --old" --run "train.py --new"
    leaky explain dead-zone | LK106
    leaky demo

Exit codes of `audit` and `watch` (EXIT_CODES below, printed by their --help): 0 no finding
at or above --fail-on; 1 there are such findings; 2 the script could not be run, or no
backward pass was observed; or the script's own nonzero status, as `python SCRIPT` would
have ended (1 for an uncaught exception, N for `sys.exit(N)`, 130 for Ctrl-C), which wins
over 1 for findings. The script's traceback, without leaky's frames, follows the report on
stderr. `fix` ends with 0, 2 when it could judge nothing, or the unfixed run's own status.
`probe` ends with 0 when every probe passed, 1 when one failed, 2 when none failed and one
could not run, or the real-input run's own status (PROBE_EXIT_CODES). `diff` ends with 0 when
B does not part from A beyond the noise, 1 when it does, 2 when no comparison could be made.
"""
from __future__ import annotations

import sys
from importlib import import_module

from leaky.cli.parser import EXIT_UNUSABLE, build_parser, without_interpreter

# command -> (module, function): a command's module is imported only when it runs, so the
# commands that never touch torch (--help, explain, runs, show, a typo) answer at once.
COMMANDS = {"audit": ("leaky.cli.run", "cmd_audit"), "watch": ("leaky.cli.run", "cmd_watch"),
            "runs": ("leaky.cli.stored", "cmd_runs"), "show": ("leaky.cli.stored", "cmd_show"),
            "report": ("leaky.cli.stored", "cmd_report"), "explain": ("leaky.cli.fix", "cmd_explain"),
            "demo": ("leaky.cli.fix", "cmd_demo"), "fix": ("leaky.cli.fix", "cmd_fix"),
            "probe": ("leaky.cli.probe", "cmd_probe"), "diff": ("leaky.cli.diff", "cmd_diff")}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "script", None):
        try:
            _drop_interpreter(args)
        except ValueError as exc:
            print(f"leaky: {exc}", file=sys.stderr)
            return EXIT_UNUSABLE
    module, function = COMMANDS[args.command]
    return getattr(import_module(module), function)(args)


def _drop_interpreter(args) -> None:
    """`leaky watch python train.py ...`: run train.py (parser.without_interpreter)."""
    words = [args.script, *(args.args[1:] if args.args[:1] == ["--"] else args.args)]
    kept, note = without_interpreter(words)
    if note is not None:
        args.script, args.args = kept[0], kept[1:]
        print(f"leaky: {note}", file=sys.stderr)


__all__ = ["build_parser", "main"]

"""`leaky runs`, `leaky show` and `leaky report`: the runs a watch stored."""
from __future__ import annotations

from rich.text import Text

from leaky.cli.output import error, write_html
from leaky.cli.parser import EXIT_OK, EXIT_UNUSABLE
from leaky.report.terminal import people_console


def open_store(path: str):
    import os

    from leaky.store import Store

    if not os.path.exists(path):
        raise FileNotFoundError(f"no run store at {path}; `leaky watch` creates it (or pass --store PATH)")
    return Store(path)


def stored_run(path: str, run_id: int | None) -> dict | None:
    if run_id is None:
        return None
    from leaky.report.html import run_payload
    from leaky.store import Store

    with Store(path) as store:
        return run_payload(store, run_id)


def cmd_report(args) -> int:
    from leaky.report.html import run_payload
    from leaky.store import StoreError, resolve_run

    try:
        with open_store(args.store) as store:
            payload = run_payload(store, resolve_run(store, args.run))
    except (StoreError, FileNotFoundError) as exc:
        error(str(exc))
        return EXIT_UNUSABLE
    if not write_html(args.html, {}, payload):
        return EXIT_UNUSABLE
    people_console().print(Text(f"leaky: wrote {args.html}", style="dim"))
    return EXIT_OK


def cmd_runs(args) -> int:
    from leaky.report.runs import runs_table
    from leaky.store import StoreError

    try:
        with open_store(args.store) as store:
            people_console().print(runs_table(store.runs(), args.store))
    except (StoreError, FileNotFoundError) as exc:
        error(str(exc))
        return EXIT_UNUSABLE
    return EXIT_OK


def cmd_show(args) -> int:
    from leaky.report.runs import show_run
    from leaky.store import StoreError, resolve_run

    try:
        with open_store(args.store) as store:
            run_id = resolve_run(store, args.run)
            people_console().print(show_run(store, run_id))
    except (StoreError, FileNotFoundError) as exc:
        error(str(exc))
        return EXIT_UNUSABLE
    return EXIT_OK

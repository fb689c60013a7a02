"""What benchmarks/overhead.py and benchmarks/watch_overhead.py share: the peers they compare
with (Cockpit's economy loop, naive `.item()` logging) and the table helpers.

Each mode runs in its own process, builds a workload of audit_overhead.py and runs
`CockpitLoop.step` or `naive_step`.
"""
from __future__ import annotations

import statistics
import sys
import types

from torch import nn

# Cockpit needs module losses (extended by BackPACK) and the per-sample losses.
COCKPIT_LOSSES = {"mlp": nn.CrossEntropyLoss, "cnn": nn.CrossEntropyLoss, "lstm": nn.MSELoss,
                  "transformer": nn.CrossEntropyLoss}


class Skip(Exception):
    """A mode that cannot run on a model; the message says why (printed as a note)."""


def import_cockpit():
    """(backpack, cockpit, schedules, configuration, note), or raise ImportError."""
    note = ""
    try:
        import cockpit  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "pkg_resources":
            raise
        # cockpit/__init__.py reads its version through pkg_resources and nothing else.
        stub = types.ModuleType("pkg_resources")

        class DistributionNotFound(Exception):
            pass

        def get_distribution(name):
            raise DistributionNotFound(name)

        stub.DistributionNotFound, stub.get_distribution = DistributionNotFound, get_distribution
        sys.modules["pkg_resources"] = stub
        sys.modules.pop("cockpit", None)
        import cockpit  # noqa: F401
        note = "cockpit imported with a stub for pkg_resources (missing from this setuptools)"
    import backpack
    from cockpit.utils import schedules
    from cockpit.utils.configuration import configuration
    return backpack, cockpit, schedules, configuration, note


def cockpit_available() -> tuple[bool, str]:
    try:
        return True, import_cockpit()[4]
    except Exception as exc:     # not installed, or broken
        return False, f"{type(exc).__name__}: {exc}"


def unsupported(model: nn.Module, extensions) -> list[str]:
    """Modules holding parameters directly that a BackPACK extension has no rule for."""
    found = []
    for _, module in model.named_modules():
        own = [n for n, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        for ext in extensions:
            table = getattr(ext, "_BackpropExtension__module_extensions", None)
            if table is not None and type(module) not in table:
                label = type(module).__name__ + (" (a bare nn.Parameter)" if list(module.children()) else "")
                if label not in found:
                    found.append(label)
                break
    return found


class CockpitLoop:
    """Cockpit's documented loop: extend() model and loss, per-sample losses with
    reduction="none", `with cockpit(global_step, info=...)` around backward; the economy
    quantities tracked every `interval` steps."""

    def __init__(self, work, model_name: str, interval: int, max_gb: float) -> None:
        backpack, cockpit, schedules, configuration, _ = import_cockpit()
        if model_name not in COCKPIT_LOSSES:
            raise Skip(f"no Cockpit loss set up for model {model_name}")
        n_params = sum(p.numel() for p in work.model.parameters() if p.requires_grad)
        gb = work.inputs.shape[0] * n_params * 4 / 2**30
        if gb > max_gb:
            raise Skip(f"per-sample gradients: batch {work.inputs.shape[0]} x {n_params / 1e6:.2f}M parameters = "
                       f"{gb:.1f} GB, over --cockpit-max-gb {max_gb:g}")
        self.work = work
        self.cockpit = cockpit.Cockpit(work.model.parameters(), quantities=configuration(
            "economy", track_schedule=schedules.linear(interval=interval)))
        missing = unsupported(work.model, self.cockpit._get_extensions(0))
        if missing:
            raise Skip(f"BackPACK does not support {', '.join(missing)}")
        self.model = backpack.extend(work.model)
        self.loss_fn = backpack.extend(COCKPIT_LOSSES[model_name]())
        self.individual_loss_fn = COCKPIT_LOSSES[model_name](reduction="none")
        self.global_step = 0

    def step(self) -> int:
        """One training step; returns the step's index."""
        w, cp, step = self.work, self.cockpit, self.global_step
        w.opt.zero_grad(set_to_none=True)
        out = self.model(w.inputs)
        loss = self.loss_fn(out, w.targets)
        losses = self.individual_loss_fn(out, w.targets).detach()
        with cp(step, info={"batch_size": w.inputs.shape[0], "individual_losses": losses, "loss": loss,
                            "optimizer": w.opt}):
            loss.backward(create_graph=cp.create_graph(step))
        w.opt.step()
        self.global_step += 1
        return step

    def heavy(self, step: int) -> bool:
        """Whether any quantity computes at this step (a tracked step s also makes Alpha,
        Distance and UpdateSize work at s + 1)."""
        return any(q.should_compute(step) for q in self.cockpit.quantities)


def naive_step(work, log: dict[str, float]) -> None:
    """A training step that logs every parameter's gradient norm with `.item()` (a host sync each)."""
    work.opt.zero_grad(set_to_none=True)
    loss = work.loss_fn(work.model(work.inputs), work.targets)
    loss.backward()
    for name, p in work.model.named_parameters():
        if p.grad is not None:
            log[name] = p.grad.norm().item()
    work.opt.step()


def iqr(xs: list[float]) -> tuple[float, float]:
    """The middle half of a list of per-round ratios: (25th, 75th percentile)."""
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (float("nan"), float("nan"))
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def print_table(header, body, markdown: bool) -> None:
    """A table as markdown or aligned text; the first column (two when the second is
    "mode") left-aligned, the rest right-aligned."""
    left = 2 if header[1] == "mode" else 1
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(["---"] * left + ["---:"] * (len(header) - left)) + "|")
        for row in body:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in body:
        print(line(row))

"""LK201's fixes (checks/stale_parameter.py): parameters in no optimizer are added to it;
a zero_grad() between backward() and step() is moved before backward()."""
from __future__ import annotations

import torch

from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, remedy, short_place


@remedy("LK201")
def stale_parameter(finding: Finding, context: Context) -> list[Candidate]:
    if finding.evidence.get("cause") == "gradients cleared before the step" and finding.source is not None:
        return _move_zero_grad(finding, context)
    if finding.evidence.get("cause") != "not in any optimizer":
        return []
    names = list(finding.evidence.get("parameters") or [])
    modules = sorted({name.rpartition(".")[0] for name in names})
    found: list = []

    def collect(module, path):
        wanted = {name.rpartition(".")[2] for name in names if name.rpartition(".")[0] == path}
        found.extend(p for n, p in module.named_parameters(recurse=False) if n in wanted)

    site = context.backward_site
    opt = (edits.optimizer_variable(site[0], site[1]) if site else None) or "optimizer"
    groups = ", ".join(f"{context.root or 'model'}.{m}.parameters()" if m else f"{context.root or 'model'}.parameters()"
                       for m in modules)
    return [Candidate(("add-params",), "add the missing parameters to the optimizer", [finding],
                      [lambda: rt.ModuleEdit(modules, collect, "found"),
                       lambda: rt.add_missing_parameters(lambda: found)], modules,
                      [lambda: edits.snippet(f"{opt}.add_param_group({{'params': [*{groups}]}})"
                                             if len(modules) > 1 else
                                             f"{opt}.add_param_group({{'params': {groups}}})")])]


def _move_zero_grad(finding: Finding, context: Context) -> list[Candidate]:
    """zero_grad() between backward() and step(): skip it there, zero after each step."""
    file, line = finding.source.file, finding.source.line
    site = context.backward_site
    what = "zero_grad() before backward(), not between backward() and step()"

    def change():
        made = edits.move_line(file, line, site[1]) if site and site[0] == file else None
        return made or edits.snippet("optimizer.zero_grad()   # before loss.backward(), not after it")
    return [Candidate(("move-zero-grad", file, line), what, [finding],
                      [lambda: rt.SkipCallAtLine((torch.optim.Optimizer, torch.nn.Module), "zero_grad", file, line,
                                                 "misplaced zero_grad() skipped"), rt.zero_grad_after_step],
                      [short_place(finding.source)], [change])]

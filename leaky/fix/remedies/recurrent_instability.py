"""LK105's fixes (checks/recurrent_instability.py): clip the gradient norm (the median norm
over the growth leaky measured through time) when the spectral radius is above 1, and
orthogonal recurrent weights (spectral radius 1) for an nn.RNN/GRU/LSTM."""
from __future__ import annotations

from leaky.finding import Finding
from leaky.fix import change as edits
from leaky.fix import runtime as rt
from leaky.fix.remedies import Candidate, Context, clipped_gradient, parameter_name, remedy


@remedy("LK105")
def recurrent(finding: Finding, context: Context) -> list[Candidate]:
    candidates = []
    growth = finding.evidence.get("growth_first_over_last")
    if (finding.evidence.get("spectral_radius") or 0) > 1:
        candidates.extend(clipped_gradient(finding, context, growth))
    module = finding.module
    if module and context.module_types.get(module) in ("RNN", "GRU", "LSTM"):
        weight = parameter_name(module, "weight_hh_l0", context)
        candidates.append(Candidate(
            ("orthogonal", module), "orthogonal recurrent weights (spectral radius 1)", [finding],
            [lambda: rt.ModuleEdit([module], rt.reinitialise(rt.orthogonal(), names=("weight_hh",), zero_bias=False),
                                   "orthogonal")], [module],
            [lambda: edits.snippet(f"# after building the model, for each layer k:\ntorch.nn.init.orthogonal_({weight})")]))
    return candidates

"""Which nonlinearity follows a layer, and how much of it a pre-activation scale leaves flat:
LK302 and LK303 both need them."""
from __future__ import annotations

import bisect
import math

from leaky import ops
from leaky.config import AuditConfig
from leaky.finding import Finding
from leaky.stats import ActivationStats, AuditStats

def _order(stats: AuditStats):
    """(sorted layer positions, sorted activation positions, activations): built once per
    AuditStats, so looking up every layer stays O(n log n) on 10,000-module models."""
    cached = stats.__dict__.get("_layer_order")
    if cached is None:
        layers = sorted(op.first_seq for op in stats.ops if ops.layer_kind(op.op) is not None)
        acts = sorted(((stats.op(a.site).first_seq, i) for i, a in enumerate(stats.activations)
                       if stats.op(a.site) is not None))
        cached = (layers, [seq for seq, _ in acts], [stats.activations[i] for _, i in acts])
        object.__setattr__(stats, "_layer_order", cached)   # a cache on a frozen record
    return cached


def following_activation(stats: AuditStats, site: int) -> ActivationStats | None:
    """The first activation after this layer op in forward order, if no other layer op
    comes between them."""
    layer = stats.op(site)
    if layer is None:
        return None
    layers, act_seqs, acts = _order(stats)
    next_layer = bisect.bisect_right(layers, layer.first_seq)
    limit = layers[next_layer] if next_layer < len(layers) else math.inf
    index = bisect.bisect_right(act_seqs, layer.first_seq)
    if index < len(acts) and act_seqs[index] < limit:
        return acts[index]
    return None


def expected_std(family: str | None, fan_in: int, fan_out: int) -> tuple[float, str]:
    """The fan-based weight std for the nonlinearity that follows, and the init to use
    (ops: each activation family's Init; none, or an unknown one: what follows is linear)."""
    init = ops.init_for(family)
    return init.std(fan_in, fan_out), init.text


def flat_share_at(family: str | None, scale: float, config: AuditConfig) -> float | None:
    """The share of pre-activations z ~ N(0, scale²) in the activation's flat region, where
    its derivative is below `flat_derivative_share` of its maximum: P(|z| > e) = erfc(e / (scale·√2)),
    e its flat edge (ops). For a layer z = W x with i.i.d. weights of std s and fan-in n,
    z has scale sqrt(n)·s·rms(x). None when the family has no flat region (ReLU, linear)."""
    found = ops.family(family)
    if found is None or found.flat_beyond is None or not scale > 0:
        return None
    return math.erfc(found.flat_beyond(config.flat_derivative_share) / (scale * math.sqrt(2)))


def activation_of(finding: Finding, stats: AuditStats) -> ActivationStats | None:
    """The finding's activation site: its module, op and line (a module may run the same op
    at several lines, `F.relu` after each layer of a forward). None when a fix replaced the
    op at that line (a LeakyReLU has no dead units): another line's units are not its own.
    Without a line, its module and op, else its module."""
    if finding.source is not None:
        line = (finding.source.file, finding.source.line)
        return next((a for a in stats.activations if a.module == finding.module and a.op == finding.op
                     and a.source is not None and (a.source.file, a.source.line) == line), None)
    return next((a for a in stats.activations if a.module == finding.module and a.op == finding.op), None) or \
        next((a for a in stats.activations if a.module == finding.module), None)

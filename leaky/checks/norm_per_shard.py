"""LK403 norm-per-shard: a gradient clip (or norm) taken on this rank's shard alone.

Under FSDP each rank holds a shard g_k of every gradient, and the norm of the whole is
||g||^2 = sum_k ||g_k||^2. `torch.nn.utils.clip_grad_norm_(fsdp1_model.parameters())` or a
norm of `p.grad.to_local()` computes ||g_k|| alone: each rank then scales its shard by its own
factor max_norm / ||g_k||, so the update points elsewhere than the gradient, and the norm
logged is ~||g|| / sqrt(N) for N ranks holding similar shards. record/instruments/clip_norms.py
notes, on sampled steps, the norm each 2-norm clip acted on and the squared norms of the
gradients it covered (shards summed over the ranks): the ratio of the two is 1 up to float
rounding when the clip is global. The fix: FSDP1's `model.clip_grad_norm_`; under FSDP2,
clip the DTensor gradients themselves (`clip_grad_norm_(model.parameters())`).
"""
from __future__ import annotations

from leaky.checks import register
from leaky.checks._util import line_of, num
from leaky.config import AuditConfig
from leaky.finding import Finding, Severity, Source
from leaky.stats import AuditStats


@register("LK403", "norm-per-shard", "a gradient clip or norm taken on one rank's shard")
def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:
    wrong = _wrong(stats, config)
    if not wrong:
        return []
    by_line: dict[tuple, list[dict]] = {}
    for call in wrong:
        by_line.setdefault((call["source"]["file"], call["source"]["line"]), []).append(call)
    # NOTE: `clip_grads_with_norm_(params, c, get_total_norm(local))`: the clip's line is the
    # finding, the norm's line is named in it (one wrong clip, not two findings)
    clips = [calls for calls in by_line.values() if calls[0]["call"].startswith("clip")]
    norms = [calls for calls in by_line.values() if not calls[0]["call"].startswith("clip")]
    if not clips:
        return [_finding(calls, len(_compared(stats)), []) for calls in norms]
    return [_finding(calls, len(_compared(stats)), [n[0] for n in norms]) for calls in clips]


def _compared(stats: AuditStats) -> list[dict]:
    return [c for c in stats.derived.get("clip_norms", ()) if c["ratio"] is not None and _finite(c["norm"])]


def _wrong(stats: AuditStats, config: AuditConfig) -> list[dict]:
    return [c for c in _compared(stats) if abs(c["ratio"] - 1.0) > _tolerance(c["eps"], config)]


def _tolerance(eps: float, config: AuditConfig) -> float:
    """Float rounding of the two norms: the summation order in float32, or a few ulps of a
    float16/bfloat16 gradient's own dtype (`eps`), in which torch rounds its norm."""
    return max(config.clip_norm_tolerance, config.clip_norm_roundings * eps)


def _finite(value) -> bool:
    return value is not None and value == value and abs(value) != float("inf")


def _finding(calls: list[dict], compared: int, norms: list[dict]) -> Finding:
    first = calls[0]
    ranks, ratio = first["ranks"], first["ratio"]
    covered = " and ".join(first["covered"])
    call = f"torch.nn.utils.{first['call']}"
    spread = (f"; the {ranks} ranks' norms average {num(first['norm_mean'])}, spread ±{num(first['norm_spread'])}"
              if first["norm_spread"] else "")
    count = f"{first['tensors']} gradient{'s' if first['tensors'] != 1 else ''}"
    message = (f"{call} at step {first['step']} acted on a norm of {num(first['norm'])} on rank 0, but the "
               f"{count} it covered ({covered}) {'have' if first['tensors'] != 1 else 'has'} a global norm of "
               f"{num(first['global_norm'])} over the {ranks} ranks: a ratio of {ratio:.3f} (1/√{ranks} = "
               f"{ranks ** -0.5:.3f} when the shards are alike){spread}. Each rank took the norm of its own shard, "
               f"||g_k||, not ||g|| = √(Σ_k ||g_k||²), so each shard is clipped by its own factor and the update "
               f"no longer points along the gradient ({len(calls)} of {compared} sampled clip calls).")
    if norms:
        message += " " + "; ".join(f"torch.nn.utils.{n['call']} at "
                                   f"{line_of(Source(n['source']['file'], n['source']['line']))} "
                                   f"took the same kind of norm (ratio {n['ratio']:.3f})" for n in norms) + "."
    if "FSDP1 flat parameters" in first["covered"]:
        fix = ("Clip through the FSDP1 wrapper: model.clip_grad_norm_(max_norm), which all-reduces the shards' "
               "squared norms (torch.nn.utils.clip_grad_norm_ sees only this rank's flat-parameter shard).")
    else:
        fix = ("Clip the DTensor gradients themselves: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) "
               "reduces the shards' norms across ranks; a norm of p.grad.to_local() is this rank's shard alone.")
    source = Source(first["source"]["file"], first["source"]["line"])
    return Finding("norm-per-shard", "LK403", Severity.ERROR, message, fix, None, None, source, first["step"],
                   {"ratio": ratio, "ranks": ranks, "norm": first["norm"], "global_norm": first["global_norm"],
                    "norm_mean": first["norm_mean"], "norm_spread": first["norm_spread"], "covered": first["covered"],
                    "call": first["call"], "calls": len(calls), "compared": compared})


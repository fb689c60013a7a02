"""One line on what a watch cost: the report's `run.overhead` (record/budget.py), in words."""
from __future__ import annotations


def overhead_line(section: dict | None) -> str | None:
    """`leaky watch cost 1.8% of the training time (budget 2%): ...`; None without a section.

    NOTE: the share is what leaky timed of itself (record/budget.py): its code at its entry
    points and its sampled steps' extra. The dispatch into its hooks and its effect on the
    caches are not in it: benchmarks/budget.py compares whole runs against plain ones."""
    if not section:
        return None
    measured, steps, sampled = section.get("measured"), section.get("steps", 0), section.get("sampled_steps", 0)
    if section.get("schedule") == "budget":
        how = f"budget {_pct(section['budget'])}"
    else:
        how = f"--every {section.get('every')}"
        if section.get("reason"):
            how += f": {section['reason']}"
    if measured is None:
        return (f"leaky watch ({how}): {sampled} of {steps} steps observed in detail; too few plain steps "
                "to measure its cost")
    parts = [f"leaky watch cost {_pct(measured)} of the training time ({how}): "
             f"{sampled} of {steps} steps observed in detail"]
    plain, extra, first = section.get("plain_step_ms"), section.get("sampled_extra_ms"), section.get("first_step_extra_ms")
    if plain is not None and extra is not None:
        parts.append(f"each about +{_ms(extra)} over a {_ms(plain)} step" +
                     (f", the first +{_ms(first)} (its one-time probes)" if first is not None else ""))
    monitor = section.get("monitor_ms")
    if monitor is not None:
        norm = section.get("norm_every") or 1
        clipped = section.get("norms_from_clip") or 0
        if section.get("optimizer_steps") == 0:   # parameters updated by hand: no optimizer, no norm taken
            parts.append(f"every step +{_ms(monitor)} for the loss (no optimizer step, so no gradient norm)")
        else:
            parts.append(f"every step +{_ms(monitor)} for the loss and " +
                         ("the gradient norm" if norm == 1 else
                          f"the gradient norm every {norm} steps (the budget's limit)"
                          + (f"; on {clipped} other steps the script's clip_grad_norm_ gave it" if clipped else "")))
        budget = section.get("budget") if section.get("schedule") == "budget" else None
        mean = section.get("plain_mean_ms") or plain
        if budget and mean and monitor / mean >= budget:
            # NOTE: against the mean plain step, as the budget counts: a PPO's 2.8 ms updates
            # between rollouts are not the whole of its time
            step = (f"this model's {_ms(mean)} step" if plain is None or abs(mean - plain) <= 0.1 * plain else
                    f"this run's {_ms(mean)} a step (its median step {_ms(plain)}, and the work between steps)")
            parts.append(f"on {step} that alone is {_pct(monitor / mean)}, over the budget: "
                         "no more steps could be observed in detail (raise --overhead, or --every N to choose)")
            return "; ".join(parts)
    if section.get("schedule") == "budget" and sampled == 1 and steps >= ONE_LOOK_STEPS:
        # NOTE: a short run's budget pays for its first step alone (its one-time probes); what
        # changes after it (units that die, a policy that collapses) is not seen, and the line
        # says so: on pytorch/examples' mnist (90 steps) and actor_critic (300 episodes) a
        # watch at 2% saw step 0 only, where an audit's 20 steps found the damage.
        parts.append("only the first step was observed in detail, so what changed after it went unseen "
                     "(leaky audit observes the first 20 steps; --overhead 10% or --every N observe more of this run)")
    return "; ".join(parts)


ONE_LOOK_STEPS = 20   # a run this long, sampled once: the line says what that leaves unseen


def _pct(share: float) -> str:
    value = share * 100
    return f"{value:.2g}%" if value < 10 else f"{value:.0f}%"


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.01 else f"{value * 1000:.3g} µs"

"""AuditConfig: every threshold leaky uses, with the reason for its value.

Thresholds come from the math of the local derivatives and from healthy models, never
from one fixture. Change them here, not inside a check.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AuditConfig:
    # Optimizer steps to observe (backward calls when no optimizer is used). None: all.
    steps: int | None = 20
    # A unit-sample is "flat" when its local derivative is below this share of the
    # nonlinearity's maximum (sigmoid max 1/4, tanh max 1): |z| >~ 6 for sigmoid, 3 for tanh.
    flat_derivative_share: float = 1e-2
    # LK101: share of a layer's unit-samples in the flat region.
    saturated_warning: float = 0.5
    saturated_error: float = 0.9
    # LK102: a unit is dead when it never fired in the trailing window of steps
    # (min(dead_window_steps, ceil(steps / 2))), judged on at least dead_min_samples samples.
    dead_window_steps: int = 5
    dead_min_samples: int = 32
    # Healthy ReLU nets keep a fair share of silent units (a VAE's encoder, a DQN on a few
    # distinct states: 30-35% measured on healthy benchmark cases), so a quarter is only
    # worth knowing; 40% (Karpathy's "sometimes 40% of neurons") is likely harm.
    dead_info: float = 0.25
    dead_warning: float = 0.4
    dead_error: float = 0.6
    # LK103 / LK104: gradient norm entering the earliest parameterised module over the one
    # entering the latest. 1e-3 is three orders of magnitude.
    vanishing_warning: float = 1e-3
    vanishing_error: float = 1e-5
    exploding_warning: float = 1e3
    exploding_error: float = 1e5
    # LK104: a step whose total gradient norm exceeds this many times the median of the
    # earlier steps (at least spike_min_history of them) is a spike.
    spike_factor: float = 100.0
    spike_min_history: int = 3
    # LK105: spectral radius bands, and the growth/decay of the per-time-step gradient
    # from the last time step to the first that confirms it.
    radius_high: float = 1.05
    radius_low: float = 0.5
    time_growth: float = 1e2
    time_decay: float = 1e-3
    # LK106: share of the elements that lead to the loss whose gradient the op zeroes.
    dead_zone_warning: float = 0.25
    dead_zone_error: float = 0.5
    # LK202: median ||dw||/||w|| per step of a layer's weight. Karpathy's rule of thumb is
    # ~1e-3; Adam at lr 1e-3 on wide layers reaches ~1e-1, which trains fine. Above 1 the
    # update is larger than the weight itself. Below `update_low` on every sampled step the
    # weight is effectively frozen.
    update_high_warning: float = 0.2
    update_high_error: float = 1.0
    update_low: float = 1e-7
    # LK204/LK205: losses over the observed steps; the first and last tenth (>= 3 steps) are
    # compared, so minibatch noise averages out.
    loss_min_steps: int = 20
    loss_flat_share: float = 0.01     # less than 1% lower at the end: flat
    loss_rise_factor: float = 1.5     # 50% higher at the end: diverging
    # LK204: a flat loss is "stuck" (a warning without another leak to explain it) when, at
    # first order, the observed steps could not lower it by this share of the drop that counts
    # as learning: |ΔL| per step <= Σ ||g||·||Δw|| (Cauchy-Schwarz), whatever the weights' scale.
    loss_stuck_share: float = 0.1
    # Exit status: findings at or above this severity make `leaky audit` exit 1.
    fail_on: str = "error"
    # Raise leaky's own internal errors instead of warning and observing no further.
    # Off for users (never break their training); the test suite sets LEAKY_STRICT=1.
    strict: bool = field(default_factory=lambda: os.environ.get("LEAKY_STRICT") == "1")

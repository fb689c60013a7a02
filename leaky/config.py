"""AuditConfig: every threshold leaky uses, with the reason for its value.

Thresholds come from the math of the local derivatives and from healthy models, never
from one fixture. Change them here, not inside a check.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env_steps(name: str) -> int | None:
    """A positive whole number of steps from the environment, else None."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


@dataclass(frozen=True)
class AuditConfig:
    # Optimizer steps to observe (backward calls when no optimizer is used). None: all.
    steps: int | None = 20
    # An audit measures its first steps in full (every site planned and measured, the one-time
    # probes run: see full_steps). After them a steady step is measured in full once every
    # steady_every steps; the steps between are light, as a watch's unsampled step: the loss, the
    # total gradient norm and the learning rate (the every-step series) and nothing per op.
    # Statistics per op and per unit are then taken on the measured steps only, and every
    # share divides by the steps, samples or elements that measured it. With 4 the steady steps
    # of a small RNN, whose full step is ~4.5x a plain one, cost ~2x on average. None (the
    # default; LEAKY_STEADY_EVERY=N sets it): every step in full. Not the default, because a
    # light step loses what only a watch of every op sees: the exact step a unit died, a unit
    # judged over the last steps its layer ran (docs/performance.md, issue 34).
    steady_every: int | None = field(default_factory=lambda: _env_steps("LEAKY_STEADY_EVERY"))
    # A unit-sample is "flat" when its local derivative is below this share of the
    # nonlinearity's maximum (sigmoid max 1/4, tanh max 1): |z| >~ 6 for sigmoid, 3 for tanh.
    flat_derivative_share: float = 1e-2
    # LK101: share of a layer's unit-samples in the flat region. A softmax row is flat by the
    # same rule on its Jacobian J = diag(p) - pp^T: tr J = 1 - ||p||^2 below flat_derivative_share
    # of a uniform row's 1 - 1/n (for n = 2 exactly the sigmoid's rule); a softmax is judged on
    # its rows at the first step it ran, before training could have made it peaked.
    saturated_warning: float = 0.5
    saturated_error: float = 0.9
    # LK101: a unit is "stuck" when it sits in the flat region on at least this share of its
    # samples (reported as evidence: a stuck unit passes ~no gradient on any input).
    stuck_unit_share: float = 0.99
    # LK101: a softmax row is "peaked" when its largest probability is above this: its
    # Jacobian diag(p) - pp^T is then ~0 on that row (counted by the recorder, per row).
    peaked_row_probability: float = 0.99
    # LK101: a softmax is reported, as info only, when at least this share of its rows put
    # > 0.99 on one entry and its own backward gain (||grad out|| / ||grad in||) is below
    # softmax_blocked_gain, which shows the gradient is actually blocked: peaked attention is
    # normal.
    softmax_peaked_share: float = 0.99
    softmax_blocked_gain: float = 1e-3
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
    # ...but an error only while the loss shows the harm: when the run's one loss ended at or
    # below this share of its start (halved: far better than where it began; pytorch/examples
    # mnist and a Lightning CNN fit their data with 64-79% of a layer dead), the live units
    # carry the fit, and the dead ones are capacity lost: a warning.
    dead_fit_share: float = 0.5
    # LK102: what happened just before the units died (Karpathy's "knocked off by a large
    # update"): a gradient norm this many times its median over the earlier steps is "a
    # spike"; an update this large a share of a weight's norm (||dw||/||w||) is a large
    # update. A learning-rate jump is `lr_jump`.
    dead_spike_factor: float = 10.0
    dead_large_update: float = 0.1
    # LK103 / LK104: gradient norm entering the earliest parameterised module over the one
    # entering the latest. 1e-3 is three orders of magnitude.
    vanishing_warning: float = 1e-3
    vanishing_error: float = 1e-5
    exploding_warning: float = 1e3
    exploding_error: float = 1e5
    # LK103 / LK104: the ops named as where the gradient is lost are those between the two
    # modules whose local gain (||grad out|| / ||grad in||) is below culprit_shrink_gain; where
    # it grows, above culprit_grow_gain.
    culprit_shrink_gain: float = 0.5
    culprit_grow_gain: float = 2.0
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
    # LK105: a recurrence whose gradient does not reach its early steps is only worth knowing
    # (info) when the loss falls by at least this share (first tenth to last): then it learns
    # from the steps it reaches. A smaller drop is no such evidence: a random output layer
    # starts a few percent above chance (logits of std s add ~s²/2 to log C: a 2-class model
    # that stays at chance goes 0.72 -> 0.69, 4%).
    reach_learning_drop: float = 0.1
    # LK106: share of the elements that lead to the loss whose gradient the op zeroes, over all
    # the observed steps. In a hidden layer the next matrix product spreads each output's
    # gradient over every unit, so a zeroed element is one path among many.
    dead_zone_warning: float = 0.25
    dead_zone_error: float = 0.5
    # LK106, a clamp or step on the loss path (no layer between it and the loss: a clipped TD
    # error, a clamped prediction): each element there is one output of one sample and its
    # gradient has no other way back, so a zeroed share s drops s of the batch's outputs from
    # the update: the ones past the bound, the largest errors. A clamp that only guards a
    # valid range on a healthy model zeroes 0.4-2.5% (zoo clamped-output-range, seeds 0-3, 20-200
    # steps); a clipped TD error with rewards of scale 1, 10-24% (dqn-clamped-td-small-rewards).
    # One output in 20 is likely harm, one in 4 (the worst quarter never learns) an error.
    dead_zone_loss_warning: float = 0.05
    dead_zone_loss_error: float = 0.25
    # LK106, the same clamp or step on the loss path weighed by the gradient it zeroes: the share
    # of the arriving gradient's mass (Σ|g| over the observed steps) sent on as 0. A clamp on a
    # BCE input zeroes few elements, but those past the bound on the wrong side carry gradients
    # near 1/eps: 0.4-2% of the elements and > 99.9% of the mass. Where a clamp binds on harmless
    # samples (targets near the bound, small gradients there) the mass share stays near the
    # element share: 0.6-5.7% on clamped-output-range (seeds 0-2, 20-200 steps), 22-40% for
    # dqn-clamped-td-small-rewards (already judged by its elements). A quarter of the signal is
    # likely harm, half an error.
    dead_zone_mass_warning: float = 0.25
    dead_zone_mass_error: float = 0.5
    # LK301: a bounded output (sigmoid [0, 1], tanh [-1, 1], relu [0, inf)) regressed onto
    # targets is an error when more than this share of the targets' range lies outside its
    # bounds: then a part of the targets can never be reached (a ReLU head on standardised
    # targets: about half). Targets that stray a hair past a bound (noise) are not judged.
    unreachable_target_share: float = 0.05
    # LK307: the first loss is "far above" a neutral output layer's when it is at least this
    # many times it. At 2x, half of the starting loss is the initialisation's offset, not the
    # task: cross-entropy over 10 classes starting at 4.6 nats has logits of std ~3 (a
    # default nn.Linear head gives ~0.5 and starts within 5% of log C).
    loss_init_factor: float = 2.0
    # LK307: a neutral loss at or below this (constant targets, a discriminator's all-ones
    # labels) is not judged: every ratio to it would be huge and none meaningful.
    loss_init_min_baseline: float = 1e-6
    # LK306: probe each root model once, at its first training call, for outputs that
    # depend on other samples of the batch (one more forward and a few backward passes of
    # one batch; an audit only, never a watch's later steps).
    batch_probe: bool = True
    # LK201: a parameter in the optimizer is "left unchanged" when it had a nonzero gradient
    # and no change at all on every one of at least this many sampled steps.
    stale_min_steps: int = 2
    # LK202: median ||dw||/||w|| per step of a layer's weight. Karpathy's rule of thumb is
    # ~1e-3; Adam at lr 1e-3 on wide layers reaches ~1e-1, which trains fine. Above 1 the
    # update is larger than the weight itself. Below `update_low` on every sampled step the
    # weight is effectively frozen.
    update_high_warning: float = 0.2
    update_high_error: float = 1.0
    update_low: float = 1e-7
    # LK202: a weight frozen only from some step on (below `update_low` on every sampled step
    # after it) is judged when the learning rate in force fell there and the frozen stretch is
    # at least this share of the sampled steps. A schedule annealed toward 0 spends a vanishing
    # share of its steps below 1e-4 of its peak rate (cosine: ~0.6%, linear: 0.01%); a rate
    # decayed per batch where the schedule meant epochs spends most of the run there.
    update_frozen_share: float = 0.25
    # LK202, too slow to matter: under an Adam-family rule a step moves each element by about lr
    # at most, so ||Δw||/||w|| <~ lr / rms(w). A weight that could not move by
    # `update_material_change` (a tenth) of its norm in `update_slow_steps` steps even at that
    # bound, and did not on any sampled step, is not being trained in any run of practical
    # length. Fine-tuning at lr 1e-5 has lr/rms(w) ~ 1e-4 to 1e-3 (10% in 100-1,000 steps).
    update_material_change: float = 0.1
    update_slow_steps: int = 10_000
    # LK202: steps after a weight was exactly 0 whose update ratio is not judged: it gets its
    # scale from the first updates (with momentum the second can exceed the first weight).
    zero_weight_warmup: int = 5
    # LK202: a weight is judged on at least this many sampled update ratios. The update
    # outgrowing the weight (> update_high_error) on this many steps is an error, even when
    # the median is in the band: a blow-up is often over in a few steps, which a median hides.
    update_min_steps: int = 2
    update_error_overshoots: int = 2
    # LK202 / LK201 / LK204: the line to change for the learning rate is the scheduler's when
    # it moved the rate more than this many times up (or down) from the constructed rate
    # during the observed steps; else the optimizer's construction.
    scheduler_moved: float = 2.0
    # LK203: gradients are "never zeroed" when every one of at least this many checked steps
    # started backward() with the previous step's gradient still in .grad.
    accumulation_min_steps: int = 3
    # LK204/LK205: losses over the observed steps; the first and last tenth (>= 3 steps) are
    # compared, so minibatch noise averages out.
    loss_min_steps: int = 20
    loss_flat_share: float = 0.01     # less than 1% lower at the end: flat
    loss_rise_factor: float = 1.5     # 50% higher at the end: diverging
    # LK205: ... and the rise beyond this many standard errors of the step-to-step noise: the
    # noise σ² ≈ mean(Δloss²) / 2 (von Neumann: Δ of two iid draws has variance 2σ², and a
    # smooth trend adds little to it; heavy-tailed batches count in full); the difference of
    # two means of k steps has sd σ·√(2/k). A loss of minibatches
    # on different data (PPO's epochs over a rollout) swings from step to step; a rise within
    # its spread is no trend. A diverging loss rises step after step, far beyond it.
    loss_rise_noise_z: float = 3.0
    loss_rising_share: float = 0.1    # LK204: 10% higher at the end is rising, not flat (LK205's)
    # LK204/LK205: a learning rate that rises more than this many times from one step to the
    # next is a restart (the loss is judged within the periods between restarts); one that
    # rose this many times over the observed steps is a warmup (LK204: small steps by design).
    # LK102 names such a jump as what happened just before units died.
    lr_jump: float = 2.0
    # LK204/LK205, a moving target (a synced target network) or restarts: the resets must be
    # at least this many steps apart (median) for a period between them to be judged on its
    # own, and a trend within the periods needs this many periods to be called typical.
    loss_min_period: int = 8
    loss_min_periods: int = 3
    # LK205: an oscillation grows when the relative step-to-step swings of the last quarter are
    # this many times those of the first, and are at least loss_min_swing of the loss: growth
    # of swings that stay within 1% of the loss is noise around a plateau.
    loss_swing_growth: float = 4.0
    loss_min_swing: float = 0.01
    # LK204: a flat loss is "stuck" (a warning without another leak to explain it) when, at
    # first order, the observed steps could not lower it by this share of the drop that counts
    # as learning: |ΔL| per step <= Σ ||g||·||Δw|| (Cauchy-Schwarz), whatever the weights' scale.
    loss_stuck_share: float = 0.1
    # LK302: a weight's std over the fan-based std for the nonlinearity after it (Kaiming for
    # ReLU, Xavier for tanh/sigmoid): each layer multiplies the signal's scale by sqrt(n)·s.
    init_scale_warning: float = 10.0
    init_scale_error: float = 30.0
    # LK302: the forward signal (the RMS of each layer's output on the first step) changing by
    # this many orders of magnitude across at least init_depth_min_layers layers, with at least
    # init_depth_consistent of the layer-to-layer steps in the same direction: geometric growth
    # or decay with depth.
    init_depth_warning: float = 2.0
    init_depth_error: float = 4.0
    init_depth_min_layers: int = 4
    init_depth_consistent: float = 0.75
    # LK303: a standardised feature has |mean| ~ 0 and std ~ 1; raw data whose worst feature
    # has |mean| or std above this is off scale (reported only when the layer it enters is
    # measurably saturated or dead).
    input_off_scale: float = 3.0
    # LK304: share of float16/bfloat16 gradient elements at a dense op that are exactly 0. Only
    # zeros make an error (subnormals keep a few bits, and a weight gradient summing many of
    # them can stay close to its float32 value); zeros and subnormals together above
    # underflow_error are a warning.
    underflow_warning: float = 0.10
    underflow_error: float = 0.50
    # LK304, updates that round away: of the elements of float16/bfloat16 parameters whose gradient
    # was nonzero on a sampled step, the share the optimizer step left exactly unchanged. A
    # bfloat16 weight keeps 8 significant bits: a step below |w|·2^-8 (0.4% of the weight) is
    # lost, and with it the optimizer's computed update (Adam's buffers move on, the weight does
    # not). AdamW at lr 1e-4 on a model kept in bfloat16: 75-84% per step, the loss 2.39 -> 2.30 in
    # 20 steps; at lr 1e-3 the same model loses 27-31% and trains (1.6 by step 15). Most of the
    # weights unable to take their step is likely harm, nearly all of them an error.
    rounded_update_warning: float = 0.5
    rounded_update_error: float = 0.9
    # LK401/LK402: DDP gives every rank the same bytes of the averaged gradient and the same
    # step, so replicas are bitwise equal; only the float64 rounding of the fingerprint itself
    # (a norm of n terms: relative error <= n·2^-53, 1e-7 at n = 10^9 elements) may differ.
    # A relative spread (max - min) / max over the ranks above this is a real difference.
    replica_tolerance: float = 1e-6
    # LK403: the norm a clip acted on against the global norm of the same gradients. Both are
    # float32 sums of the same squares in another order: relative error <= log2(n)·2^-24 for n
    # elements summed pairwise, 2e-6 at n = 10^9, so 1e-5 is rounding. A float16/bfloat16
    # gradient's norm is rounded to its own dtype, a few ulps: this many of its eps instead.
    clip_norm_tolerance: float = 1e-5
    clip_norm_roundings: float = 4.0
    # Exit status: findings at or above this severity make `leaky audit` exit 1.
    fail_on: str = "error"
    # Raise leaky's own internal errors instead of warning and observing no further.
    # Off for users (never break their training); the test suite sets LEAKY_STRICT=1.
    strict: bool = field(default_factory=lambda: os.environ.get("LEAKY_STRICT") == "1")

    @property
    def full_steps(self) -> int:
        """The first steps an audit measures in full, whatever steady_every says: as many
        consecutive observed steps as the checks that judge a run of them need (LK102's dead
        window, LK104's spike history and the spike, LK203's checked steps, LK201's and
        LK202's least steps)."""
        return max(self.dead_window_steps, self.spike_min_history + 1, self.accumulation_min_steps,
                   self.stale_min_steps, self.update_min_steps)

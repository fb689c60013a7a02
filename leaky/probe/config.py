"""The probes' settings: the run lengths (as `leaky fix`'s) and the two verdicts' thresholds."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeConfig:
    steps: int = 200          # K: training steps of every probe run (the repeated batch's too)
    holdout: int = 20         # H: held-out steps after step K, model frozen, that score LK309's runs
    repeats: int = 2          # real-input runs with shifted seeds, for LK309's noise
    audit_steps: int = 20     # steps audited in every run; the first run's audit is the evidence
    # steps audited in LK308's run (None: audit_steps). Its audit is not evidence: the repeated
    # batch is the probe's doing (a memorised batch makes a slow or stale parameter).
    overfit_audit_steps: int | None = None
    # LK308: what is left of the reducible loss, (L_K - floor) / (L_0 - floor), after K steps
    # on one repeated batch; above this, the model cannot memorise it. Healthy scripts of five
    # kinds (MLPs, a BatchNorm CNN, LSTM/GRU, a tiny Transformer LM, regression; Adam, AdamW,
    # SGD as their scripts set them) and the zoo's healthy examples leave at most 0.094 at
    # K = 200 (most under 0.013; four zoo examples still falling fast, 0.22-0.39, are not
    # judged: `overfit_still_falling`); broken ones
    # 0.60-1.0 (docs/probe.md, benchmarks/probe_calibration.py). 0.2: twice the slowest
    # healthy model that has stopped falling, a factor 3 below the best broken one.
    overfit_fraction: float = 0.2
    # LK308: above the threshold but still falling is "not yet", not "cannot": not judged when,
    # at the pace of the last quarter of the K steps, the loss would reach the threshold within
    # this many times K more steps. Healthy models in their slow start need up to 2.2 K (Adam
    # 1e-3 on a shallow MLP at K = 40; the zoo's slow regression 2.1 K at K = 100); stalled
    # broken ones 9.6 K to inf, but a softmax before cross_entropy, creeping to its floor,
    # 1.8-2 K at K = 100-200 (it is judged at K = 400: 14 K).
    overfit_still_falling: float = 2.5
    # LK308: fewer steps than this cannot tell a slow start from a stall: not judged. The
    # zoo's slow regression (regression-bias-at-mean) has fallen only 6-9% at K = 40-60, and
    # its pace there says 6-12 K: it would be called stuck.
    overfit_min_steps: int = 100
    # LK308: L_K is the mean of the last few training losses (dropout makes one step noisy).
    overfit_tail: int = 5

"""The probes' settings: the run lengths (as `leaky fix`'s) and the two verdicts' thresholds."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeConfig:
    steps: int = 200          # K: training steps of every probe run (the repeated batch's too)
    holdout: int = 20         # H: held-out steps after step K, model frozen, that score LK309's runs
    repeats: int = 2          # real-input runs with shifted seeds, for LK309's noise
    audit_steps: int = 20     # steps audited in LK309's runs
    overfit_audit_steps: int | None = None   # steps audited in LK308's run; None: all K
    # LK308: what is left of the reducible loss, (L_K - floor) / (L_0 - floor), after K steps
    # on one repeated batch; above this, the model cannot memorise it. Healthy models of five
    # kinds (MLP, BatchNorm CNN, LSTM/GRU, a tiny Transformer LM, regression; SGD and Adam as
    # their scripts set them) leave at most 0.011 at K = 200 and 0.04 at K = 100; models whose
    # path to the loss is cut or whose loss cannot express the target leave 0.35-1.0
    # (docs/probe.md, `benchmarks/probe_calibration.py`). 0.2 is 5x the worst healthy
    # model at K = 100 and below the best broken one by a factor 1.7.
    overfit_fraction: float = 0.2
    # LK308: above the threshold but still falling is "not yet", not "cannot": not judged when,
    # at the pace of the last quarter of the K steps, the loss would reach the threshold within
    # this many times K more steps. Healthy models in their slow start need up to 2.2 K (Adam
    # 1e-3 on a shallow MLP at K = 40; a slow regression 2.1 K at K = 100); stalled broken ones
    # 9 K to inf, but a softmax before cross_entropy, creeping to its floor, 1.8-2 K at
    # K = 100-200 (it is judged at K = 400: 14 K).
    overfit_still_falling: float = 2.5
    # LK308: fewer steps than this cannot tell a slow start from a stall: not judged.
    overfit_min_steps: int = 20
    # LK308: L_K is the mean of the last few training losses (dropout makes one step noisy).
    overfit_tail: int = 5
    # LK308: a first loss within this of its floor leaves nothing to reduce: not judged.
    overfit_min_reducible: float = 1e-6

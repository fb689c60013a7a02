"""LK202 judges weight matrices and kernels, not vectors kept as rows.

CleanRL's continuous PPO keeps its policy's log-std as `nn.Parameter(torch.zeros(1, D))`.
Started at 0, it holds only what its updates made it, so ||Δw||/||w|| does not depend on the
learning rate: raw torch on rpo_continuous_action.py (Pendulum-v1), 0.739 at step 10 with lr
3e-4 and 3.06 with lr 3e-5. `leaky watch --every 10` announced 'WARNING LK202 ... a median
0.398× its norm' there (ratios 0.739 and 0.057 at steps 10 and 20, with the policy loss not
falling) and advised lowering the rate; the median over the run was 4e-4."""
from __future__ import annotations

from leaky.testing import optimizer, param, series, source, stats
from tests.check_cases import fires, quiet

RPO = ((10, 0.739), (20, 0.0569))        # the log-std's sampled ratios under the watch
FLAT = [1.0 + 0.01 * (i % 3) for i in range(21)]   # a policy loss that does not fall


def _run(shape):
    weight = param(name="agent.actor_logstd", shape=shape, update_ratios=RPO)
    return stats(steps=21, params=(weight,), series=series(losses=FLAT, lr=3e-4),
                 optimizers=(optimizer(kind="Adam", lr=3e-4, source=source(line=186)),))


def test_a_log_std_kept_as_a_row_is_not_judged():
    quiet("LK202", _run((1, 1)))
    quiet("LK202", _run((1, 6)))
    quiet("LK202", _run((1, 16, 1, 1)))


def test_a_weight_matrix_with_the_same_ratios_still_is():
    assert fires("LK202", _run((64, 6))).evidence["direction"] == "high"

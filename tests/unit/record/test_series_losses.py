"""The every-step loss series: a CPU loss is read on the host once at its backward (a float in
the pending row, no tensor copy), a GPU's stays a 0-d tensor until the batched copy; either
way the series holds the loss the script computed, summed over the step's backward calls."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.record.monitor import StepMonitor


def _losses_of_a_watched_run(tmp_path, **watch):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt = torch.optim.Adam([*gen.parameters(), *disc.parameters()], lr=1e-3)
    want = []
    with leaky.watch(store=tmp_path / "runs.db", **watch) as run:
        for _ in range(40):
            opt.zero_grad()
            real, fake = torch.randn(16, 8), gen(torch.randn(16, 8))
            first = F.binary_cross_entropy_with_logits(disc(real), torch.ones(16, 1))
            second = F.binary_cross_entropy_with_logits(disc(fake), torch.zeros(16, 1))
            first.backward()
            second.backward()   # two backward calls, one step: the step's loss is their sum
            want.append(first.item() + second.item())
            opt.step()
    return want, {row.step: row.loss for row in run.recorder.builder.series}, set(run.recorder.builder.sample_steps)


@pytest.mark.parametrize("watch", [{}, {"every": 7}], ids=["budget", "every-7"])
def test_each_steps_loss_is_the_sum_the_script_computed(tmp_path, watch):
    want, rows, sampled = _losses_of_a_watched_run(tmp_path, **watch)
    assert sorted(rows) == list(range(40)) and 0 < len(sampled) < 40
    for step, loss in enumerate(want):
        assert rows[step] == pytest.approx(loss, rel=1e-6), step


def test_host_values_and_device_values_keep_their_order_in_one_copy():
    """Rows whose loss is a float (read on the host) and rows whose loss is a tensor (a loss on
    another device, or one that came without its value) are copied together in order."""
    monitor = StepMonitor()
    a, b, c = torch.tensor(1.5, requires_grad=True) * 1, torch.tensor(2.25, requires_grad=True) * 1, \
        torch.tensor(4.0, requires_grad=True) * 1
    monitor.note_loss(a, host=1.5)
    monitor.end_step(0, None)
    monitor.note_loss(b)                     # kept on the device
    monitor.end_step(1, None)
    monitor.note_loss(b, host=2.25)
    monitor.note_loss(c)                     # a float, then a tensor: summed as a tensor
    monitor.end_step(2, None)
    monitor.note_loss(c)
    monitor.note_loss(a, host=1.5)           # a tensor, then a float
    monitor.end_step(3, None)
    rows = monitor.flush()
    assert [row.loss for row in rows] == [1.5, 2.25, 6.25, 5.5]
    assert all(isinstance(row.loss, float) for row in rows)

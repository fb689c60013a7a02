"""He/Kaiming init on the recurrent matrix of a tanh RNN: rho(W_hh) ~ 2.2, gradients explode back in time."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(fixed, iterations=120):
    train.random.seed(42)
    torch.manual_seed(42)
    data = train.build_corpus()
    chars = sorted(set(data))
    vocab = len(chars)
    encoded = torch.tensor([chars.index(c) for c in data])
    model = train.CharRNN(vocab, train.HIDDEN_SIZE)
    if fixed:
        with torch.no_grad():
            nn.init.orthogonal_(model.W_hh)
            nn.init.normal_(model.W_xh, std=0.01)
            nn.init.normal_(model.W_hy, std=0.01)
    rho = torch.linalg.eigvals(model.W_hh.detach()).abs().max().item()
    opt = torch.optim.Adam(model.parameters(), lr=train.LEARNING_RATE)
    growth, losses = [], []
    for n in range(iterations):
        inputs, targets = train.get_batch(encoded, vocab)
        h = inputs.new_zeros(inputs.shape[1], train.HIDDEN_SIZE)
        hs, logits = [], []
        for t in range(inputs.shape[0]):
            h = torch.tanh(inputs[t] @ model.W_xh + h @ model.W_hh + model.b_h)
            h.retain_grad()
            hs.append(h)
            logits.append(h @ model.W_hy + model.b_y)
        loss = F.cross_entropy(torch.stack(logits).reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        growth.append(hs[0].grad.norm().item() / hs[-1].grad.norm().item())
        if fixed:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(loss.item())
    g20 = sorted(growth[:20])[10]
    return rho, g20, sum(losses[-10:]) / 10


rho_b, g_b, loss_b = run(False)
rho_f, g_f, loss_f = run(True)
print(f"kaiming_normal_(tanh) W_hh: rho {rho_b:.2f}; median |dL/dh_0| / |dL/dh_49| over the first 20 steps {g_b:.3g}; loss after 120 iters {loss_b:.3f}")
print(f"orthogonal W_hh, small W_xh/W_hy, clip 5: rho {rho_f:.2f}; growth {g_f:.3g}; loss after 120 iters {loss_f:.3f}")
ok_symptom = rho_b > 1.5 and g_b > 30
ok_fix = rho_f < 1.05 and g_f < 10 and loss_f < loss_b - 0.3
print(("PASS" if ok_symptom else "FAIL") + f": the gradient grows {g_b:.0f}x from the last time step back to the first (rho = {rho_b:.2f})")
print(("PASS" if ok_fix else "FAIL") + f": with an orthogonal recurrent matrix it grows {g_f:.1f}x and the loss after 120 iterations is lower ({loss_b:.3f} -> {loss_f:.3f})")
sys.exit(0 if ok_symptom and ok_fix else 1)

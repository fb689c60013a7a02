"""A positive pair that samples the same signature twice has distance 0; sqrt's backward there is inf * 0 = NaN."""
import os
import random
import sys

import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")


def contrastive_loss_fixed(emb_a, emb_b, same, margin=train.MARGIN):
    dist = torch.linalg.vector_norm(emb_a - emb_b, dim=1)
    pos = same * dist.pow(2)
    neg = (1 - same) * torch.clamp(margin - dist, min=0).pow(2)
    return 0.5 * (pos + neg).mean(), dist


def run(loss_fn, steps=train.STEPS):
    random.seed(1)
    torch.manual_seed(1)
    feats, writers = train.make_signatures()
    by_writer = {w: torch.nonzero(writers == w).flatten().tolist() for w in range(train.N_WRITERS)}
    model = train.SignatureEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    first_nan_grad, origin, zero_pairs, last = None, None, 0, None
    for step in range(steps):
        a, b, same = train.sample_pairs(by_writer, train.BATCH_SIZE)
        if first_nan_grad is None:
            try:
                with torch.autograd.detect_anomaly(check_nan=True):
                    loss, dist = loss_fn(model(feats[a]), model(feats[b]), same)
                    opt.zero_grad()
                    loss.backward()
            except RuntimeError as err:
                origin = str(err).split("'")[1] if "'" in str(err) else str(err)[:60]
                first_nan_grad = step
                zero_pairs = int((a == b).sum())
        if first_nan_grad is not None:
            loss, dist = loss_fn(model(feats[a]), model(feats[b]), same)
            opt.zero_grad()
            loss.backward()
        opt.step()
        last = (loss.item(), dist[same == 1].mean().item(), dist[same == 0].mean().item())
    return first_nan_grad, origin, zero_pairs, last


nan_b, origin_b, zero_b, last_b = run(train.contrastive_loss)
nan_f, origin_f, zero_f, last_f = run(contrastive_loss_fixed)
print(f"torch.sqrt(sum of squares): first NaN gradient at step {nan_b} from {origin_b}; identical pairs (i == j) in that batch: {zero_b}; "
      f"final loss {last_b[0]:.4f}")
print(f"torch.linalg.vector_norm: first NaN gradient at step {nan_f}; final loss {last_f[0]:.4f}, "
      f"mean distance same {last_f[1]:.3f} vs different {last_f[2]:.3f}")
ok_symptom = nan_b is not None and nan_b < 20 and origin_b is not None and "Sqrt" in origin_b and zero_b > 0
ok_fix = nan_f is None and last_f[0] == last_f[0] and last_f[1] < last_f[2]
print(("PASS" if ok_symptom else "FAIL") + f": detect_anomaly names {origin_b} at step {nan_b}, on a batch with {zero_b} zero-distance pair(s)")
print(("PASS" if ok_fix else "FAIL") + ": with vector_norm (gradient 0 at 0) no NaN appears in 150 steps and same-writer pairs end closer than different-writer pairs")
sys.exit(0 if ok_symptom and ok_fix else 1)

"""Plain torch: the encoder is per-sample in eval mode (a cloud's embedding does not change
with its batch), and the contrastive loss falls well below chance ln(2B - 1)."""
import math
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, run, verdict  # noqa: E402

ns = run(SRC)
model, clouds = ns["model"], ns["clouds"]
model.eval()
with torch.no_grad():
    alone = model(clouds[:1])[0]
    batched = model(clouds[:64])[0]
    other = model(torch.cat([clouds[:1], clouds[500:563]]))[0]
history = ns["history"]
chance = math.log(127)
verdict((alone - batched).abs().max().item() < 1e-5 and (batched - other).abs().max().item() < 1e-5,
        mean(history[-10:]) < 0.6 * chance,
        [f"cloud 0's embedding alone vs in two batches: {(alone - batched).abs().max().item():.2g}, "
         f"{(batched - other).abs().max().item():.2g}",
         f"NT-Xent: first {history[0]:.3f}, last 10 {mean(history[-10:]):.3f}, chance {chance:.3f}"])

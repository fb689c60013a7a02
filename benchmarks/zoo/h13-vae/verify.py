"""Plain torch: the negative ELBO falls clearly, and held-out images are reconstructed far\nbetter than by the mean image."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
losses, model = train.main(verbose=False)
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
x = train.make_data(512, seed=2)
with torch.no_grad():
    _, mu, _ = model(x)
    recon = torch.sigmoid(model.dec(mu))
err = (recon - x).pow(2).mean().item()
base = (train.make_data(train.N).mean(0) - x).pow(2).mean().item()    # predict the mean image
print(f"-ELBO: first 10 steps {first:.1f}, last 10 steps {last:.1f}; held-out reconstruction MSE "
      f"{err:.4f} (mean-image baseline {base:.4f})")
assert last < 0.6 * first and err < 0.5 * base, (first, last, err, base)
print("PASS")

"""pred.clamp(1, 5) on a dot-product recommender: every prediction outside [1, 5] gets exactly zero gradient."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def raw_score(model, users, items):
    dot = (model.user_factors(users) * model.item_factors(items)).sum(dim=1)
    return dot + model.user_bias(users).squeeze(1) + model.item_bias(items).squeeze(1)


class SigmoidRangeRecommender(train.DotProductRecommender):
    def forward(self, users, items):
        lo, hi = self.rating_range
        return (lo - 0.5) + (hi - lo + 1.0) * torch.sigmoid(raw_score(self, users, items))


def run(cls):
    torch.manual_seed(4)
    users, movies, ratings = train.make_ratings()
    n_train = int(0.9 * train.N_RATINGS)
    model = cls(train.N_USERS, train.N_MOVIES, train.N_FACTORS)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=1e-5)
    outside, zero_rows = [], []
    for epoch in range(train.EPOCHS):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, train.BATCH_SIZE):
            idx = perm[i:i + train.BATCH_SIZE]
            loss = F.mse_loss(model(users[idx], movies[idx]), ratings[idx])
            opt.zero_grad()
            loss.backward()
            with torch.no_grad():
                s = raw_score(model, users[idx], movies[idx])
                outside.append(((s < 1) | (s > 5)).float().mean().item())
                rows = model.item_factors.weight.grad[movies[idx]].abs().sum(dim=1)
                zero_rows.append((rows == 0).float().mean().item())
            opt.step()
    with torch.no_grad():
        rmse = F.mse_loss(model(users[n_train:], movies[n_train:]), ratings[n_train:]).sqrt().item()
    return sum(outside[:20]) / 20, sum(zero_rows[:20]) / 20, rmse


out_b, zero_b, rmse_b = run(train.DotProductRecommender)
out_f, zero_f, rmse_f = run(SigmoidRangeRecommender)
print(f"pred.clamp(1, 5):      raw scores outside [1, 5] in the first 20 batches {out_b:.1%}; "
      f"rated movies whose factor row got an all-zero gradient {zero_b:.1%}; val rmse {rmse_b:.3f}")
print(f"0.5 + 5*sigmoid(pred): all-zero factor rows {zero_f:.1%}; val rmse {rmse_f:.3f}")
ok_symptom = zero_b >= 0.5
ok_fix = zero_f < 0.01 and rmse_f < 0.5 * rmse_b
print(("PASS" if ok_symptom else "FAIL") + f": the clamp cuts the gradient of {zero_b:.0%} of the rated movies' factors")
print(("PASS" if ok_fix else "FAIL") + f": a sigmoid range keeps every gradient and the val rmse falls {rmse_b:.3f} -> {rmse_f:.3f}")
sys.exit(0 if ok_symptom and ok_fix else 1)

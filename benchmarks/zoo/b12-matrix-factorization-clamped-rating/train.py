import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(4)

N_USERS = 500
N_MOVIES = 300
N_FACTORS = 32
N_RATINGS = 20000
BATCH_SIZE = 256
EPOCHS = 3


def make_ratings(seed=4):
    g = torch.Generator().manual_seed(seed)
    user_taste = torch.randn(N_USERS, 6, generator=g)
    movie_style = torch.randn(N_MOVIES, 6, generator=g)
    movie_quality = 0.5 * torch.randn(N_MOVIES, generator=g)
    users = torch.randint(0, N_USERS, (N_RATINGS,), generator=g)
    movies = torch.randint(0, N_MOVIES, (N_RATINGS,), generator=g)
    affinity = (user_taste[users] * movie_style[movies]).sum(1) / 6 ** 0.5
    raw = 3.4 + 0.8 * affinity + movie_quality[movies] + 0.4 * torch.randn(N_RATINGS, generator=g)
    ratings = raw.round().clamp(1, 5)
    return users, movies, ratings


class DotProductRecommender(nn.Module):
    def __init__(self, n_users, n_items, n_factors, rating_range=(1.0, 5.0)):
        super().__init__()
        self.user_factors = nn.Embedding(n_users, n_factors)
        self.item_factors = nn.Embedding(n_items, n_factors)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        self.rating_range = rating_range
        for emb in (self.user_factors, self.item_factors, self.user_bias, self.item_bias):
            nn.init.normal_(emb.weight, std=0.01)

    def forward(self, users, items):
        dot = (self.user_factors(users) * self.item_factors(items)).sum(dim=1)
        pred = dot + self.user_bias(users).squeeze(1) + self.item_bias(items).squeeze(1)
        return pred.clamp(*self.rating_range)


def main():
    users, movies, ratings = make_ratings()
    n_train = int(0.9 * N_RATINGS)
    model = DotProductRecommender(N_USERS, N_MOVIES, N_FACTORS)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=1e-5)

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            pred = model(users[idx], movies[idx])
            loss = F.mse_loss(pred, ratings[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step:3d}  mse {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            val_pred = model(users[n_train:], movies[n_train:])
            rmse = F.mse_loss(val_pred, ratings[n_train:]).sqrt().item()
        print(f"epoch {epoch}  val rmse {rmse:.4f}")


if __name__ == "__main__":
    main()

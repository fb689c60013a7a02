import torch
import torch.nn as nn

torch.manual_seed(0)

N_USERS, N_ITEMS, RANK = 500, 300, 8


def make_ratings(n_ratings=20000, seed=2):
    g = torch.Generator().manual_seed(seed)
    u_true = torch.randn(N_USERS, RANK, generator=g) / RANK ** 0.25
    v_true = torch.randn(N_ITEMS, RANK, generator=g) / RANK ** 0.25
    users = torch.randint(0, N_USERS, (n_ratings,), generator=g)
    items = torch.randint(0, N_ITEMS, (n_ratings,), generator=g)
    ratings = (u_true[users] * v_true[items]).sum(1) + 3.5 + 0.3 * torch.randn(n_ratings, generator=g)
    return users, items, ratings.clamp(1, 5)


class MatrixFactorization(nn.Module):
    def __init__(self, n_users, n_items, rank):
        super().__init__()
        self.user_factors = nn.Embedding(n_users, rank)
        self.item_factors = nn.Embedding(n_items, rank)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        self.global_bias = nn.Parameter(torch.tensor(3.5))
        for emb in (self.user_factors, self.item_factors):
            nn.init.normal_(emb.weight, std=0.1)
        for emb in (self.user_bias, self.item_bias):
            nn.init.zeros_(emb.weight)

    def forward(self, users, items):
        dot = (self.user_factors(users) * self.item_factors(items)).sum(1)
        return dot + self.user_bias(users).squeeze(1) + self.item_bias(items).squeeze(1) + self.global_bias


def main():
    users, items, ratings = make_ratings()
    n_train = 16000
    model = MatrixFactorization(N_USERS, N_ITEMS, RANK)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    history = []

    for epoch in range(5):
        perm = torch.randperm(n_train)
        for i in range(0, n_train, 256):
            idx = perm[i:i + 256]
            pred = model(users[idx], items[idx])
            loss = loss_fn(pred, ratings[idx])
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            history.append(loss.item())
        with torch.no_grad():
            val_rmse = loss_fn(model(users[n_train:], items[n_train:]), ratings[n_train:]).sqrt().item()
        print(f"epoch {epoch}  train mse {sum(history[-62:]) / 62:.4f}  val rmse {val_rmse:.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

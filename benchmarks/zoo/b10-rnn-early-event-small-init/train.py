import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(21)

SEQ_LEN = 60
N_FEATURES = 4
HIDDEN = 64
N_SEQUENCES = 4000
BATCH_SIZE = 64
EPOCHS = 3


def make_machine_logs(n, seed=21):
    g = torch.Generator().manual_seed(seed)
    x = 0.5 * torch.randn(n, SEQ_LEN, N_FEATURES, generator=g)
    faulty = torch.rand(n, generator=g) < 0.5
    start = torch.randint(0, 5, (n,), generator=g)
    for i in torch.nonzero(faulty).flatten().tolist():
        s = int(start[i])
        x[i, s:s + 3, 0] += 2.0
        x[i, s:s + 3, 2] -= 1.5
    return x, faulty.long()


class FaultDetector(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.rnn = nn.RNN(n_features, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, 2)
        for name, p in self.named_parameters():
            nn.init.normal_(p, mean=0.0, std=0.01)

    def forward(self, x):
        out, h_n = self.rnn(x)
        return self.classifier(h_n[-1])


def main():
    x, y = make_machine_logs(N_SEQUENCES)
    x_train, y_train, x_test, y_test = x[:3500], y[:3500], x[3500:], y[3500:]

    model = FaultDetector(N_FEATURES, HIDDEN)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(len(x_train))
        for i in range(0, len(x_train), BATCH_SIZE):
            idx = perm[i:i + BATCH_SIZE]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"epoch {epoch} step {step:3d}  loss {loss.item():.4f}")
            step += 1
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch}  test acc {acc:.3f}")


if __name__ == "__main__":
    main()

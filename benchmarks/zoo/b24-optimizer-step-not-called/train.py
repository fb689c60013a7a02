import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

VOCAB = 500
POSITIVE_WORDS = list(range(10, 40))
NEGATIVE_WORDS = list(range(40, 70))


def make_reviews(n, seed):
    g = torch.Generator().manual_seed(seed)
    texts, labels = [], []
    for _ in range(n):
        length = int(torch.randint(8, 30, (1,), generator=g))
        tokens = torch.randint(70, VOCAB, (length,), generator=g)
        label = int(torch.randint(0, 2, (1,), generator=g))
        pool = POSITIVE_WORDS if label == 1 else NEGATIVE_WORDS
        k = int(torch.randint(1, 4, (1,), generator=g))
        slots = torch.randint(0, length, (k,), generator=g)
        tokens[slots] = torch.tensor(pool)[torch.randint(0, len(pool), (k,), generator=g)]
        texts.append(tokens)
        labels.append(label)
    return texts, labels


def collate(texts, labels):
    offsets = torch.tensor([0] + [len(t) for t in texts[:-1]]).cumsum(0)
    return torch.cat(texts), offsets, torch.tensor(labels)


class SentimentModel(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCAB, dim, mode="mean")
        self.fc1 = nn.Linear(dim, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, tokens, offsets):
        h = self.embedding(tokens, offsets)
        return self.fc2(F.relu(self.fc1(h)))


def main():
    texts, labels = make_reviews(2000, seed=1)
    model = SentimentModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    history = []
    batch_size = 64

    for epoch in range(3):
        order = torch.randperm(len(texts)).tolist()
        correct = 0
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            tokens, offsets, y = collate([texts[i] for i in idx], [labels[i] for i in idx])
            logits = model(tokens, offsets)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step
            correct += (logits.argmax(1) == y).sum().item()
            history.append(loss.item())
        print(f"epoch {epoch}  loss {sum(history[-32:]) / 32:.4f}  acc {correct / len(texts):.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

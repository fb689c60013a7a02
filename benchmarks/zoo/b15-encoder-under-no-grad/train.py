import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

VOCAB_SIZE = 300
SEQ_LEN = 24
D_MODEL = 64
NUM_CLASSES = 3
MARKERS = torch.tensor([11, 22, 33])


def make_corpus(n, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(40, VOCAB_SIZE, (n, SEQ_LEN), generator=g)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    for i in range(n):
        pos = torch.randperm(SEQ_LEN, generator=g)[:3]
        ids[i, pos] = MARKERS[labels[i]]
    return ids, labels


class SentenceClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.pos_embed = nn.Parameter(torch.randn(1, SEQ_LEN, D_MODEL) * 0.02)
        layer = nn.TransformerEncoderLayer(D_MODEL, nhead=4, dim_feedforward=128,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.classifier = nn.Sequential(nn.Linear(D_MODEL, D_MODEL), nn.GELU(),
                                        nn.Linear(D_MODEL, NUM_CLASSES))

    def forward(self, ids):
        with torch.no_grad():
            hidden = self.encoder(self.embed(ids) + self.pos_embed)
        pooled = hidden.mean(dim=1)
        return self.classifier(pooled)


def main():
    train_ids, train_labels = make_corpus(2048, seed=1)
    val_ids, val_labels = make_corpus(256, seed=2)

    model = SentenceClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    batch_size = 32
    history = []

    for step in range(150):
        idx = torch.randint(0, len(train_ids), (batch_size,))
        logits = model(train_ids[idx])
        loss = F.cross_entropy(logits, train_labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 25 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        acc = (model(val_ids).argmax(-1) == val_labels).float().mean().item()
    print(f"val accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

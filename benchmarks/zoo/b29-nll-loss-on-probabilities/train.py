import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

VOCAB = 120
N_INTENTS = 5
MAX_LEN = 16


def make_utterances(n, seed):
    """Token sequences; each intent has its own keyword tokens scattered among filler."""
    g = torch.Generator().manual_seed(seed)
    keywords = torch.arange(2, 2 + N_INTENTS * 4).view(N_INTENTS, 4)
    intents = torch.randint(0, N_INTENTS, (n,), generator=g)
    tokens = torch.randint(30, VOCAB, (n, MAX_LEN), generator=g)
    for i in range(n):
        where = torch.randint(0, MAX_LEN, (2,), generator=g)
        tokens[i, where] = keywords[intents[i], torch.randint(0, 4, (2,), generator=g)]
    return tokens, intents


class IntentClassifier(nn.Module):
    def __init__(self, emb_dim=32, hidden=64):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, emb_dim, padding_idx=0)
        self.rnn = nn.GRU(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hidden, N_INTENTS)

    def forward(self, tokens):
        out, _ = self.rnn(self.embedding(tokens))
        logits = self.proj(out.max(dim=1).values)
        return F.softmax(logits, dim=-1)


def main():
    train_tokens, train_intents = make_utterances(3000, seed=1)
    test_tokens, test_intents = make_utterances(400, seed=2)
    model = IntentClassifier()
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    history = []

    for step in range(150):
        idx = torch.randint(0, len(train_tokens), (32,))
        probs = model(train_tokens[idx])
        loss = criterion(probs, train_intents[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 30 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    with torch.no_grad():
        acc = (model(test_tokens).argmax(-1) == test_intents).float().mean().item()
    print(f"test accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

"""A word-level LSTM language model trained without an optimizer, in the idiom of
pytorch/examples word_language_model: model.zero_grad() before each backward, the hidden
state detached between batches (truncated BPTT), clip_grad_norm_, and the update by hand,
p.data.add_(p.grad, alpha=-lr).

    python manual_sgd_lstm.py [--steps N] [--lr LR]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--lr", type=float, default=5.0)
args = parser.parse_args()
torch.manual_seed(1111)

ntokens, bptt, batch_size = 50, 20, 10
# a corpus from a random Markov chain over the vocabulary, batchified column by column
chain = torch.softmax(torch.randn(ntokens, ntokens) * 3.0, dim=1)
tokens = [0]
for _ in range(bptt * batch_size * (args.steps + 2)):
    tokens.append(int(torch.multinomial(chain[tokens[-1]], 1)))
data = torch.tensor(tokens[: len(tokens) // batch_size * batch_size]).view(batch_size, -1).t().contiguous()


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=64, nhid=64, nlayers=2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


model = RNNModel(ntokens)
hidden = model.init_hidden(batch_size)
for step, i in enumerate(range(0, args.steps * bptt, bptt)):
    x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt].reshape(-1)
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(x, hidden)
    loss = F.cross_entropy(output, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-args.lr)
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.3f}")

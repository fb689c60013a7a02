"""A GRU encoder and an attention decoder trained one sentence pair at a time, in the idiom of the classic
PyTorch seq2seq translation tutorial: every tensor is shaped (1, 1, hidden) with
`.view(1, 1, -1)`, the encoder is run one token at a time into a (max_length, hidden) buffer of its outputs,
the attention decoder with teacher forcing, and each model has its own optimizer.

The "language" is made here: a sentence is 3 to 7 tokens of a 24-word vocabulary, and its
translation is the sentence reversed, each word shifted by one.

    python seq2seq_one_pair.py [--pairs N] [--hidden H]
"""
import argparse
import random

import torch
import torch.nn.functional as F
from torch import nn, optim

parser = argparse.ArgumentParser()
parser.add_argument("--pairs", type=int, default=60)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--lr", type=float, default=0.01)
args = parser.parse_args()
random.seed(1)
torch.manual_seed(1)
SOS, EOS, WORDS, MAX_LENGTH = 0, 1, 24, 10


class EncoderRNN(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.hidden_size = hidden
        self.embedding = nn.Embedding(vocab, hidden)
        self.gru = nn.GRU(hidden, hidden)

    def forward(self, token, hidden):
        embedded = self.embedding(token).view(1, 1, -1)
        return self.gru(embedded, hidden)

    def init_hidden(self):
        return torch.zeros(1, 1, self.hidden_size)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden, vocab, max_length=MAX_LENGTH):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.attn = nn.Linear(hidden * 2, max_length)
        self.attn_combine = nn.Linear(hidden * 2, hidden)
        self.dropout = nn.Dropout(0.1)
        self.gru = nn.GRU(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, token, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(token).view(1, 1, -1))
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = F.relu(self.attn_combine(output).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        return F.log_softmax(self.out(output[0]), dim=1), hidden, attn_weights


def random_pair():
    words = [random.randrange(2, WORDS) for _ in range(random.randint(3, 7))]
    target = [2 + (w - 1) % (WORDS - 2) for w in reversed(words)]
    return torch.tensor(words + [EOS]).view(-1, 1), torch.tensor(target + [EOS]).view(-1, 1)


encoder = EncoderRNN(WORDS, args.hidden)
decoder = AttnDecoderRNN(args.hidden, WORDS)
encoder_optimizer = optim.SGD(encoder.parameters(), lr=args.lr)
decoder_optimizer = optim.SGD(decoder.parameters(), lr=args.lr)
criterion = nn.NLLLoss()
total = 0.0
for it in range(1, args.pairs + 1):
    source, target = random_pair()
    encoder_hidden = encoder.init_hidden()
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    encoder_outputs = torch.zeros(MAX_LENGTH, encoder.hidden_size)
    for ei in range(source.size(0)):
        encoder_output, encoder_hidden = encoder(source[ei], encoder_hidden)
        encoder_outputs[ei] = encoder_output[0, 0]
    decoder_input, decoder_hidden, loss = torch.tensor([[SOS]]), encoder_hidden, 0
    for di in range(target.size(0)):
        decoder_output, decoder_hidden, _ = decoder(decoder_input, decoder_hidden, encoder_outputs)
        loss += criterion(decoder_output, target[di])
        decoder_input = target[di]   # teacher forcing
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    total += loss.item() / target.size(0)
    if it % 20 == 0:
        print(f"pair {it}: loss {total / 20:.3f}")
        total = 0.0

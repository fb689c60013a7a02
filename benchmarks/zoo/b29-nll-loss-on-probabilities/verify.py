"""Softmax probabilities into NLLLoss: the loss is -p_y, its gradient on the target logit is -p_y(1-p_y) instead of p_y - 1, so learning is several times slower. Fix: log_softmax."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


import torch.nn.functional as F

short = patch(SRC, "range(150)", "range(40)")
fix_src = patch(short, "return F.softmax(logits, dim=-1)", "return F.log_softmax(logits, dim=-1)")

# gradient that reaches the target logit at initialisation, same model and batch for both losses
ns = run(patch(short, "range(40)", "range(0)"))
torch.manual_seed(0)
model = ns["IntentClassifier"]()
tokens, intents = ns["make_utterances"](256, seed=3)
out = model.rnn(model.embedding(tokens))[0]
logits = model.proj(out.max(dim=1).values).detach().requires_grad_()
g_bug = torch.autograd.grad(F.nll_loss(F.softmax(logits, -1), intents), logits)[0]
g_fix = torch.autograd.grad(F.nll_loss(F.log_softmax(logits, -1), intents), logits)[0]
pick = torch.arange(len(intents)), intents
grad_ratio = (g_bug[pick].abs().mean() / g_fix[pick].abs().mean()).item()


def test_accuracy(ns):
    x, y = ns["make_utterances"](400, seed=2)
    with torch.no_grad():
        return (ns["model"](x).argmax(-1) == y).float().mean().item()


bug, fix = run(short), run(fix_src)
bug_acc, fix_acc = test_accuracy(bug), test_accuracy(fix)
verdict(max(bug["history"]) < 0 and grad_ratio < 0.3 and bug_acc < fix_acc,
        min(fix["history"]) > 0 and fix_acc > bug_acc + 0.1,
        [f"training loss range: bug [{min(bug['history']):.3f}, {max(bug['history']):.3f}] (negative: -p_y), "
         f"fix [{min(fix['history']):.3f}, {max(fix['history']):.3f}]",
         f"|dL/d logit_target| at init, NLL(softmax) / cross-entropy: {grad_ratio:.3f}",
         f"test accuracy after 40 steps: bug {bug_acc:.3f}, fix {fix_acc:.3f}"])

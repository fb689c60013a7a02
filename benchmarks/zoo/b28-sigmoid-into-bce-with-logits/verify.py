"""torch.sigmoid output fed to BCEWithLogitsLoss: a second sigmoid squeezes predictions into [0.5, 0.731] and F1 collapses. Fix: return logits."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "return torch.sigmoid(self.out(x))", "return self.out(x)"))


def evaluate(ns, logits_model):
    x, y = ns["make_tagging_data"](4000)
    model = ns["model"].eval()
    with torch.no_grad():
        out = model(x[3500:])
        probs = torch.sigmoid(out) if logits_model else out
        # what BCEWithLogitsLoss really scores: sigmoid of the model output
        seen = torch.sigmoid(out)
    return ns["f1_score"](probs, y[3500:]), seen.min().item(), seen.max().item()


bug_f1, lo, hi = evaluate(bug, False)
fix_f1, _, _ = evaluate(fix, True)
verdict(lo >= 0.5 and hi <= 0.7311 and bug_f1 < 0.2,
        fix_f1 > bug_f1 + 0.3,
        [f"probabilities the loss compares with the tags (bug): [{lo:.3f}, {hi:.3f}], never below 0.5",
         f"validation F1 after 200 steps: bug {bug_f1:.3f}, fix {fix_f1:.3f}"])

"""The encoder runs under torch.no_grad() inside forward(): its weights never change. Fix: call it outside no_grad."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


def encoder_params(model):
    return list(model.embed.parameters()) + list(model.encoder.parameters()) + [model.pos_embed]


bug = run(SRC)
fix = run(patch(SRC, "        with torch.no_grad():\n            hidden = self.encoder(",
                "        if True:\n            hidden = self.encoder("))

bug_change = change(bug, encoder_params(bug["model"]))
fix_change = change(fix, encoder_params(fix["model"]))
bug_tail, fix_tail = mean(bug["history"][-30:]), mean(fix["history"][-30:])
verdict(bug_change == 0.0 and bug["model"].embed.weight.grad is None,
        fix_change > 1e-3 and fix_tail < bug_tail,
        [f"embed+encoder max |dw| after 150 steps: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"embed.weight.grad after the last backward: bug {bug['model'].embed.weight.grad}",
         f"mean loss of the last 30 steps: bug {bug_tail:.4f}, fix {fix_tail:.4f}"])

"""model.fc is replaced after the optimizer was built, so the new head is in no param group and never trains. Fix: replace it first."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC,
                "    optimizer = build_optimizer(model)\n    if num_classes != model.fc.out_features:\n"
                "        model.fc = nn.Linear(model.fc.in_features, num_classes)\n",
                "    if num_classes != model.fc.out_features:\n"
                "        model.fc = nn.Linear(model.fc.in_features, num_classes)\n    optimizer = build_optimizer(model)\n"))

bug_fc = change(bug, bug["model"].fc.parameters())
fix_fc = change(fix, fix["model"].fc.parameters())
bug_tail, fix_tail = mean(bug["history"][-20:]), mean(fix["history"][-20:])
verdict(bug_fc == 0.0 and bug["model"].fc.weight.grad is not None,
        fix_fc > 1e-3 and fix_tail < bug_tail,
        [f"fc max |dw| after 100 steps: bug {bug_fc:.3g} (it does get a gradient), fix {fix_fc:.3g}",
         f"mean loss of the last 20 steps: bug {bug_tail:.4f}, fix {fix_tail:.4f}"])

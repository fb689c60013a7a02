"""optimizer.step without parentheses never updates anything: parameters stay at their init, the loss stays at ln 2. Fix: optimizer.step()."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


bug = run(SRC)
fix = run(patch(SRC, "            optimizer.step\n", "            optimizer.step()\n"))
bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
bug_tail, fix_tail = mean(bug["history"][-32:]), mean(fix["history"][-32:])
verdict(bug_change == 0.0 and abs(bug_tail - 0.6931) < 0.02,
        fix_change > 1e-3 and fix_tail < 0.4,
        [f"max |dw| after 3 epochs: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"mean loss of the last epoch: bug {bug_tail:.4f} (ln 2 = 0.6931), fix {fix_tail:.4f}"])

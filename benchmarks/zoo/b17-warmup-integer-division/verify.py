"""step // WARMUP_STEPS is 0 for every warmup step, so the LR is 0 and AdamW changes nothing. Fix: true division."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import change, mean, patch, run, verdict  # noqa: E402


# only the warmup phase matters: run the first 100 steps
short = patch(SRC, "TOTAL_STEPS = 160", "TOTAL_STEPS = 100")
bug = run(short)
fix = run(patch(short, "return min(1.0, step // WARMUP_STEPS)", "return min(1.0, (step + 1) / WARMUP_STEPS)"))

bug_change = change(bug, bug["model"].parameters())
fix_change = change(fix, fix["model"].parameters())
b, f = bug["history"], fix["history"]
bug_drop = (mean(b[:10]) - mean(b[-10:])) / mean(b[:10])
fix_drop = (mean(f[:10]) - mean(f[-10:])) / mean(f[:10])
verdict(bug_change == 0.0 and abs(bug_drop) < 0.02,
        fix_change > 1e-3 and fix_drop > 0.1,
        [f"max |dw| over the 100 warmup steps: bug {bug_change:.3g}, fix {fix_change:.3g}",
         f"loss drop first 10 -> last 10 steps: bug {bug_drop:.1%}, fix {fix_drop:.1%}"])

"""After the clamp every sample is all ones: the classifier ends at the label prior (ln 4),
exactly what it reaches on all-zero inputs. Scaling the readings to [0, 1] first fixes it."""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402

bug = run(SRC)
zeros = run(patch(SRC, "return readings.clamp(0.0, 1.0)", "return readings.clamp(0.0, 1.0) * 0"))
fix = run(patch(SRC, "return readings.clamp(0.0, 1.0)",
                "return ((readings - 100.0) / 400.0).clamp(0.0, 1.0)"))
constant = (bug["preprocess"](bug["readings"]).std(0).max().item() == 0.0)
last = {name: mean(ns["history"][-20:]) for name, ns in (("bug", bug), ("zeros", zeros), ("fix", fix))}
verdict(constant and abs(last["bug"] - last["zeros"]) < 0.05, last["fix"] < 0.5 * last["bug"],
        [f"every preprocessed sample the same: {constant}",
         f"last 20 losses: bug {last['bug']:.3f}, zeroed {last['zeros']:.3f}, fix {last['fix']:.3f}"])

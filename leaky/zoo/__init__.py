"""leaky.zoo: small, deterministic, synthetic training runs with a known verdict.

The demo, the tests and the benchmarks use them. Every example builds its model, optimizer
and data in code (seeded; nothing is downloaded) and runs the usual loop
``opt.zero_grad(); loss = ...; loss.backward(); opt.step()`` for ``steps`` steps, returning
one float loss per step. Twenty steps take a few hundredths of a second on one CPU thread.

Run one::

    python -c "from leaky.zoo import get; print(get('relu-mlp').run(5))"

List them::

    python -c "from leaky.zoo import EXAMPLES; [print(n, '-', e.title) for n, e in EXAMPLES.items()]"

Broken examples list in ``expect`` the findings they must produce: the code, the module
path (from the model's ``named_modules()``; None when the finding is not tied to a
module) and a marker: the finding's source line is the line of ``example.file`` that
carries the comment ``# <marker>`` (see ``marker_line``). Healthy examples expect nothing
and must produce no warning or error.

Themes, one module each:

- ``karpathy``: saturated sigmoids, dead ReLUs, an exploding RNN, the clamped DQN loss
- ``traps``: zero-gradient ops (round, size-1 softmax) and NaN/Inf origins
- ``paths``: cut gradient paths (detach, .data, no_grad, unused branch, NumPy)
- ``depth``: deep MLPs whose per-layer gain explodes or vanishes
- ``wiring``: wrong from step zero: loss/output mismatches, initialisation, raw inputs
- ``dynamics``: wrong over the steps: stale parameters, learning rates, no zero_grad, loss curves
- ``healthy``: well set-up models, including the fixes of broken examples
- ``sequences``: healthy recurrences and attention (LSTM, a clipped orthogonal RNN, a Transformer)
- ``recipe``: Karpathy's recipe checks: a batch that leaks into every prediction
"""
from __future__ import annotations

from leaky.zoo import depth, dynamics, healthy, karpathy, paths, recipe, sequences, traps, wiring
from leaky.zoo._base import Example, Expect

__all__ = ["EXAMPLES", "Example", "Expect", "get", "marker_line"]

_THEMES = (karpathy, traps, paths, depth, wiring, dynamics, healthy, sequences, recipe)


def _collect() -> dict[str, Example]:
    found: dict[str, Example] = {}
    for theme in _THEMES:
        for example in theme.EXAMPLES:
            if example.name in found:
                raise ValueError(f"duplicate zoo example name {example.name!r}")
            found[example.name] = example
    for example in found.values():
        if example.fixed_by is not None and example.fixed_by not in found:
            raise ValueError(f"{example.name!r} is fixed_by unknown example {example.fixed_by!r}")
    return found


EXAMPLES: dict[str, Example] = _collect()


def get(name: str) -> Example:
    """The example called ``name``; KeyError listing the known names otherwise."""
    try:
        return EXAMPLES[name]
    except KeyError:
        known = ", ".join(sorted(EXAMPLES))
        raise KeyError(f"no zoo example named {name!r}; known examples: {known}") from None


def marker_line(example: Example, marker: str) -> int:
    """1-based line number of the line in ``example.file`` holding the comment ``# <marker>``.

    The marker must be the whole comment (``# LK106-clamp``, not ``# LK106-clamp2``) and
    appear exactly once.
    """
    needle = f"# {marker}"
    hits = []
    with open(example.file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            index = line.find(needle)
            if index < 0:
                continue
            rest = line[index + len(needle):]
            if rest.strip() == "":
                hits.append(number)
    if len(hits) != 1:
        where = "not found" if not hits else f"found on lines {hits}"
        raise ValueError(f"marker {needle!r} {where} in {example.file} (example {example.name!r})")
    return hits[0]

"""Which root a saturated first layer is told under: its weights' scale (LK302) or its inputs'
scale (LK303). A sigmoid layer z = W x has pre-activations of scale sqrt(n)·std(W)·rms(x);
each check claims the saturation only when its own factor, the other at its healthy value,
puts it in the flat region. Raw torch is the oracle: the same layer, re-initialised at the
fan-based std or fed standardised inputs, measured directly."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.demo import audit_example
from leaky.story import stories
from leaky.zoo import get
from leaky.zoo._base import data_generator
from leaky.zoo.karpathy import SigmoidMLP, raw_features

FLAT = 0.0025   # sigmoid's flat region: s(1-s) below 1% of its maximum 1/4


def flat_share(layer: nn.Linear, x: torch.Tensor) -> float:
    """Raw torch: the share of sigmoid(layer(x))'s unit-samples in the flat region."""
    with torch.no_grad():
        s = torch.sigmoid(layer(x))
    return (s * (1 - s) < FLAT).float().mean().item()


def xavier(layer: nn.Linear) -> nn.Linear:
    healthy = nn.Linear(layer.in_features, layer.out_features)
    nn.init.xavier_normal_(healthy.weight)
    nn.init.zeros_(healthy.bias)
    return healthy


def audit_sigmoid(x: torch.Tensor, weight_std: float | None, steps: int = 10):
    """A real 3-layer sigmoid MLP trained on x; fc1 at N(0, weight_std²) or its default init."""
    torch.manual_seed(0)
    model = SigmoidMLP(d_in=x.shape[1])
    if weight_std is not None:
        nn.init.normal_(model.fc1.weight, std=weight_std)
    y = (x[:, 0] > x[:, 0].median()).long()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    with leaky.audit(steps=steps) as observed:
        for step in range(steps):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, observed.report


def story_of(report, code: str) -> tuple[str, list[str]]:
    """The root and the codes told under it, of the story the finding with `code` is in."""
    for root, rest in stories(list(report.findings)):
        if code in {root.code, *(f.code for f in rest)}:
            return root.code, [f.code for f in rest]
    raise AssertionError(f"no {code} in {[f.code for f in report.findings]}")


def test_sigmoid_big_init_is_one_story_under_the_init_with_the_inputs_a_cause_of_their_own():
    x, _ = raw_features(512, data_generator(0))
    standardised = (x - x.mean(0)) / x.std(0)
    torch.manual_seed(0)
    big = nn.Linear(20, 64)
    nn.init.normal_(big.weight, std=5.0)
    torch.manual_seed(0)
    by_init, by_inputs = flat_share(big, standardised), flat_share(xavier(big), x)
    assert by_init >= 0.5 and 0.5 <= by_inputs < 0.9     # raw torch: each alone saturates act1

    report = audit_example(get("sigmoid-big-init"), 20)
    (init,) = [f for f in report.by_code("LK302") if f.module == "fc1"]
    (inputs,) = report.by_code("LK303")
    (saturated,) = report.by_code("LK101")
    assert story_of(report, "LK101") == ("LK302", ["LK101", "LK103"])
    assert saturated.evidence["explained_by"] == ["LK302"] and "Re-initialise" in saturated.fix
    assert abs(init.evidence["saturates"]["flat_share_on_standardised_inputs"] - by_init) < 0.05
    # the inputs' own part: a warning, as the share they alone leave flat is (not the 99% both make)
    assert inputs.severity.value == "warning" and abs(inputs.evidence["flat_share_alone"] - by_inputs) < 0.05
    assert story_of(report, "LK303") == ("LK303", []) and inputs.fix.startswith("Standardise")


def test_over_scaled_weights_on_mildly_off_inputs_are_not_blamed_on_the_inputs():
    torch.manual_seed(1)
    x = torch.randn(256, 20) * 4 + 3            # |mean| 3, std 4: past LK303's off-scale line
    model, report = audit_sigmoid(x, weight_std=5.0)
    torch.manual_seed(0)
    assert flat_share(xavier(model.fc1), x) < 0.5   # raw torch: a fan-based init keeps them out of it
    assert report.by_code("LK303") == []
    assert story_of(report, "LK101")[0] == "LK302"


def test_inputs_at_std_100_into_a_healthy_init_are_their_own_root():
    torch.manual_seed(1)
    x = torch.randn(256, 20) * 100
    model, report = audit_sigmoid(x, weight_std=None)
    assert flat_share(model.fc1, x) >= 0.9       # raw torch, fc1 as trained: saturated
    assert [f for f in report.by_code("LK302") if f.module == "fc1"] == []
    (inputs,) = report.by_code("LK303")
    assert inputs.severity.value == "error" and inputs.module == "fc1"
    root, told = story_of(report, "LK101")
    assert root == "LK303" and "LK101" in told

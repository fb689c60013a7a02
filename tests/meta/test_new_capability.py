"""A check that needs data no instrument records is an addition: an instrument, its derive
function (a statistic by name) and a check, each registered by one decorator, and no edit
to the recorder, the record, AuditStats, the assembly or the catalog (docs/design.md).

Here, at test time: an instrument that keeps each layer's largest output magnitude on the
device, the statistic that reads it once per snapshot, and a check that fires when a layer's
output grows past 1e4. A model whose first layer was initialised 1e5 times too large must
trigger it at that layer; the same model at its default init must not.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import leaky
from leaky import checks
from leaky.checks import headline, register
from leaky.config import AuditConfig
from leaky.derive import fields
from leaky.derive.fields import derived
from leaky.explain import page_text
from leaky.finding import Finding, Severity
from leaky.record import instruments
from leaky.record.instruments import InstrumentHost, instrument
from leaky.stats import AuditStats

PAGE = "# LK990 output-peak\n\nA layer's output grew past {{config.steps}}-step limits: its next layer's gradient scales with it.\n"
LIMIT = 1e4


def _register_the_capability(page: str) -> None:
    """What a newcomer writes: three files' worth, each registered by its decorator."""

    @instrument("output_peaks")
    class OutputPeaks:   # record/instruments/output_peaks.py
        def __init__(self, host: InstrumentHost) -> None:
            self.host = host
            self.peaks: dict[int, torch.Tensor] = {}   # module key -> largest |output| seen, on the device
            self.handle = None

        def __enter__(self):
            self.handle = nn.modules.module.register_module_forward_hook(self._after_forward)
            return self

        def __exit__(self, *exc) -> None:
            self.handle.remove()

        def _after_forward(self, module, args, output) -> None:
            if self.host.observing and isinstance(module, nn.Linear) and isinstance(output, torch.Tensor):
                key = self.host.modules.key_of(module)
                peak = output.detach().abs().amax()
                self.peaks[key] = peak if key not in self.peaks else torch.maximum(self.peaks[key], peak)

        def part(self) -> dict[int, torch.Tensor]:
            return dict(self.peaks)

    @derived("output_peaks")
    def output_peaks(run, sums) -> dict[str, float]:   # derive/fields/output_peaks.py
        peaks = run.parts["output_peaks"]
        values = torch.stack(list(peaks.values())).tolist() if peaks else []   # one copy to the host
        return {run.modules.name(key): value for key, value in zip(peaks, values)}

    @register("LK990", "output-peak", "a layer's output grows past 1e4", page=page)
    def check(stats: AuditStats, config: AuditConfig) -> list[Finding]:   # checks/output_peak.py
        return [Finding("output-peak", "LK990", Severity.WARNING, f"{module}'s output reached {peak:.3g}.",
                        "Initialise it smaller.", module, None, None, None, {"peak": peak})
                for module, peak in stats.derived["output_peaks"].items() if peak > LIMIT]

    @headline("LK990", "largest output")
    def peak_of(finding: Finding, stats: AuditStats) -> str | None:
        peak = stats.derived.get("output_peaks", {}).get(finding.module)
        return None if peak is None else f"{peak:.3g}"


def _train(scale: float, steps: int = 6, audited: bool = True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        model[0].weight.mul_(scale)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    losses = []
    with leaky.audit(steps=None) if audited else contextlib.nullcontext() as audit:
        for _ in range(steps):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return audit, losses


@pytest.fixture
def capability(tmp_path):
    page = tmp_path / "LK990-output-peak.md"
    page.write_text(PAGE)
    hooks_before = len(nn.modules.module._global_forward_hooks)
    with instruments.restored(), fields.restored(), checks.restored():
        _register_the_capability(str(page))
        yield
    assert len(nn.modules.module._global_forward_hooks) == hooks_before
    assert "output_peaks" not in instruments.INSTRUMENTS and "output_peaks" not in fields.DERIVED
    assert "LK990" not in checks.CHECKS and "LK990" not in checks.HEADLINES


def test_a_check_on_new_data_fires_at_the_layer_from_new_files_alone(capability):
    audit, _ = _train(scale=1e5)
    (finding,) = audit.report.by_code("LK990")
    assert finding.module == "0" and finding.evidence["peak"] > LIMIT
    assert audit.stats.derived["output_peaks"]["2"] < finding.evidence["peak"]   # the layer after it too, but smaller
    assert "LK990" in audit.report.to_json()
    assert "LK990 output-peak" in page_text("LK990") and "{{" not in page_text("LK990")
    label, read = checks.HEADLINES["LK990"]
    assert label == "largest output" and read(finding, audit.stats) == f"{finding.evidence['peak']:.3g}"


def test_the_new_check_is_quiet_on_a_healthy_init_and_observing_changes_nothing(capability):
    audit, losses = _train(scale=1.0)
    assert not audit.report.by_code("LK990")
    peaks = audit.stats.derived["output_peaks"]
    assert set(peaks) == {"0", "2"} and all(0 < p < LIMIT for p in peaks.values())
    _, plain = _train(scale=1.0, audited=False)
    assert losses == plain   # observed with the added instrument, the losses are bit for bit the same


def test_an_audit_without_the_capability_has_no_trace_of_it():
    audit, _ = _train(scale=1e5)
    assert "output_peaks" not in audit.stats.derived and not audit.report.by_code("LK990")


def test_an_added_instrument_is_left_when_the_script_raises(capability):
    hooks = len(nn.modules.module._global_forward_hooks)
    model = nn.Linear(4, 1)
    with pytest.raises(RuntimeError, match="the user's bug"):
        with leaky.audit():
            model(torch.randn(2, 4)).sum().backward()
            raise RuntimeError("the user's bug")
    assert len(nn.modules.module._global_forward_hooks) == hooks

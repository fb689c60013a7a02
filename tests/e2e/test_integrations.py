"""Integrations: TensorBoard events, a real Lightning Trainer, a real Hugging Face Trainer.

Each needs its optional extra (CI installs them all); without one, its tests skip.
"""
from __future__ import annotations

import csv
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import leaky
from leaky.integrations import require
from leaky.report.announce import headline
from leaky.report.format import module_label, short_path
from leaky.zoo import get
from tests.conftest import no_leaky_left


def test_a_missing_extra_names_the_pip_command():
    with pytest.raises(ImportError, match=r"pip install 'leaky\[lightning\]'"):
        require("no_such_package_for_leaky", "lightning")


def _events(logdir):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    return events


def test_watch_writes_tensorboard_events_that_tensorboard_reads(tmp_path):
    pytest.importorskip("tensorboard")
    with leaky.watch(every=5, tensorboard=tmp_path / "tb"):
        get("relu-high-lr").run(steps=30)
    events = _events(tmp_path / "tb")
    scalars = events.Tags()["scalars"]
    for tag in ("leaky/gradient_norm/fc1", "leaky/dead_share/act1", "leaky/update_ratio/fc1.weight", "leaky/loss"):
        assert tag in scalars, scalars
    dead = [e.value for e in events.Scalars("leaky/dead_share/act1")]
    assert dead[-1] > 0.5
    assert any(tag.startswith("leaky/findings/LK102") for tag in events.Tags()["tensors"])


def test_leaky_watch_cli_takes_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from leaky.cli import main

    script = tmp_path / "train.py"
    script.write_text("from leaky.zoo import get\nget('relu-mlp').run(steps=12)\n")
    assert main(["watch", "--every", "4", "--store", str(tmp_path / "r.db"), "--tensorboard",
                 str(tmp_path / "tb"), str(script)]) == 0
    assert "leaky/gradient_norm/fc1" in _events(tmp_path / "tb").Tags()["scalars"]




def _lightning_module(clamp: bool):
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))

        def training_step(self, batch, index):
            x, y = batch
            error = self.net(x) - F.one_hot(y, 3).float() * 20
            if clamp:
                error = torch.clamp(error, -1, 1)   # LIGHTNING-CLAMP
            return error.pow(2).mean() if clamp else F.smooth_l1_loss(self.net(x), F.one_hot(y, 3).float() * 20)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    return lightning, Module()


LIVE = re.compile(r"leaky: step (\d+): (WARNING|ERROR)\s+(LK\d{3}) (\S+)  (.+) — (.+)")


def assert_announced_like_watch(said: list[str], findings) -> None:
    """What a callback said: one line per warning and error as it appeared (code, name, the
    place the report gives it, one statement of the message, never the fix), no line for an
    info, then every finding told in full once, in the closing text."""
    live = [line for line in said if line.startswith("leaky: step ")]
    assert all("\n" not in line and LIVE.fullmatch(line) for line in live), live
    assert all(headline(LIVE.fullmatch(line).group(6)) == LIVE.fullmatch(line).group(6) for line in live), live
    closing = [text for text in said if text.startswith("leaky: ") and " steps observed, " in text]
    assert len(closing) == 1, said
    for finding in findings:
        lines = [line for line in live if LIVE.fullmatch(line).group(3, 4) == (finding.code, finding.name)]
        assert len(lines) == (finding.severity.value != "info"), (finding.code, live)
        for line in lines:
            place = LIVE.fullmatch(line).group(5)
            if finding.module is not None:
                assert module_label(finding.module) in place
            if finding.source is not None:
                assert f"{short_path(finding.source.file)}:{finding.source.line}" in place
            assert finding.fix not in line
        assert closing[0].count(finding.fix.split("\n")[0][:60]) >= 1


class Said(logging.Handler):
    """What Lightning's rank_zero_info said, one message each."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("clamp", [True, False])
def test_lightning_callback_audits_a_real_trainer(tmp_path, clamp):
    lightning, module = _lightning_module(clamp)
    from lightning.pytorch.loggers import CSVLogger

    from leaky.integrations.lightning import LeakyCallback

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,)))
    callback = LeakyCallback(audit_steps=8, every=10, store=tmp_path / "runs.db")
    trainer = lightning.Trainer(max_epochs=2, callbacks=[callback], accelerator="cpu", enable_progress_bar=False,
                                enable_checkpointing=False, enable_model_summary=False,
                                logger=CSVLogger(tmp_path, name="logs"))
    said = Said()
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addHandler(said)
    try:
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=32))
    finally:
        logging.getLogger("lightning.pytorch.utilities.rank_zero").removeHandler(said)
    assert_announced_like_watch(said.messages, callback.findings)
    assert callback.report.run["steps"] == 16 and callback.report.run["sampled_steps"] == 9
    zone = [f for f in callback.findings if f.code == "LK106"]
    if clamp:
        with open(__file__, encoding="utf-8") as handle:
            line = next(i for i, text in enumerate(handle, 1) if "# LIGHTNING-CLAMP" in text)
        assert zone and zone[0].source.line == line
        assert sum(f"LK106 dead-zone  clamp · {short_path(__file__)}:{line} — clamp sets" in text
                   for text in said.messages) == 1
        with open(trainer.logger.log_dir + "/metrics.csv", encoding="utf-8") as handle:
            metrics = list(csv.DictReader(handle))
        assert any(row.get("leaky/findings") not in (None, "") for row in metrics)
    else:
        assert [f for f in callback.findings if f.severity.value != "info"] == []
    assert no_leaky_left() == []


def test_transformers_callback_audits_a_real_trainer(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from leaky.integrations.transformers import LeakyCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    callback = LeakyCallback(audit_steps=4, every=5)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=10, per_device_train_batch_size=8,
                                          logging_steps=5, report_to=[], use_cpu=True, save_strategy="no",
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])
    trainer.train()
    assert callback.report.run["steps"] == 10
    assert len(callback.report.ops) > 50                     # the whole GPT-2 graph was observed
    assert [f for f in callback.findings if f.severity.value == "error"] == []
    assert any("leaky/findings" in entry for entry in trainer.state.log_history)
    assert no_leaky_left() == []


def test_transformers_callback_announces_each_finding_in_one_line(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from leaky.integrations.transformers import LeakyCallback

    class Clamped(nn.Module):
        """The prediction's error clamped to [-1, 1]: LK106 at the clamp (an error)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))

        def forward(self, x, labels):
            error = torch.clamp(self.net(x) - F.one_hot(labels, 3).float() * 20, -1, 1)   # HF-CLAMP
            return {"loss": error.pow(2).mean()}

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            generator = torch.Generator().manual_seed(index)
            return {"x": torch.randn(8, generator=generator), "labels": torch.randint(0, 3, (), generator=generator)}

    torch.manual_seed(0)
    callback = LeakyCallback(audit_steps=4, every=5)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=10, per_device_train_batch_size=8,
                                          logging_steps=5, report_to=[], use_cpu=True, save_strategy="no",
                                          disable_tqdm=True, learning_rate=1e-3)
    transformers.Trainer(model=Clamped(), args=args, train_dataset=Rows(), callbacks=[callback]).train()
    out = capsys.readouterr().out
    said = [chunk for chunk in re.split(r"\n(?=leaky: |\{)", out) if chunk.startswith("leaky: ")]
    assert_announced_like_watch(said, callback.findings)
    with open(__file__, encoding="utf-8") as handle:
        line = next(i for i, text in enumerate(handle, 1) if "# HF-CLAMP" in text)
    assert sum(text.startswith("leaky: step 0: ERROR   LK106 dead-zone  Clamped · ")
               and f"clamp · {short_path(__file__)}:{line} — clamp sets" in text for text in said) == 1, out
    assert no_leaky_left() == []

"""A LightningModule trained by a Lightning Trainer, in the idiom of the Lightning examples:
training_step / validation_step / configure_optimizers with a scheduler, DataLoaders with
workers; the data (ten clusters in 32 dimensions) is made here.

    python lightning_classifier.py [--max-epochs N]
"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
        return [optimizer], [scheduler]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=2)
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    centres = torch.randn(10, 32)
    y = torch.randint(0, 10, (4096,))
    x = centres[y] + 0.8 * torch.randn(4096, 32)
    train = DataLoader(TensorDataset(x[:3584], y[:3584]), batch_size=64, shuffle=True, num_workers=2)
    val = DataLoader(TensorDataset(x[3584:], y[3584:]), batch_size=256, num_workers=2)
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitClassifier(), train, val)

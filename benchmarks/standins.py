"""Stand-ins for public training programs, written here in their idioms, for the overhead tables.

    python benchmarks/overhead.py --models nanogpt,mingpt,dcgan,hf-gpt2 --modes audit,watch-default,watch-every-1,plain-b

Each builder returns a workload whose `step()` is one training iteration as the program
writes it (none of their code is copied; the data is synthetic, made in code):

  nanogpt   a nanoGPT-like character transformer: token and position embeddings, pre-norm
            blocks with F.scaled_dot_product_attention(is_causal=True), GELU MLP, tied LM
            head, AdamW with decay and no-decay groups, a cosine learning rate set by hand
            each iteration, random batches cut from one long token array (get_batch), a
            disabled GradScaler around backward as on a CPU, gradient clipping
  mingpt    a minGPT-like model: hand-written causal attention (a registered tril mask,
            masked_fill, softmax, attention dropout), a tanh GELU written out, a
            torch.utils.data.DataLoader with 2 worker processes over a Dataset of random
            windows (a RandomSampler with replacement), model.zero_grad, clipping, AdamW
  dcgan     a DCGAN as in pytorch/examples: ConvTranspose2d/BatchNorm/ReLU generator, a
            Conv2d/BatchNorm/LeakyReLU/Sigmoid discriminator, BCELoss, two Adam optimizers
            (betas 0.5): a discriminator step on real and detached fake images, then a
            generator step, each with its own zero_grad and backward
  hf-gpt2   a tiny GPT2LMHeadModel driven by a Hugging Face Trainer: each step is the
            Trainer's own training_step (model.train(), its input preparation, compute_loss,
            and backward through accelerate) on a batch of the Trainer's own DataLoader, then
            clipping, the optimizer and the scheduler the Trainer created, as its loop steps
            them. Trainer.train() itself is one long call, not a step this harness can time;
            the one attribute train() sets first (current_gradient_accumulation_steps = 1)
            is set by hand. Needs `transformers` and `accelerate`; skipped with a message
            without them.

Sizes are small (a plain step of 10-60 ms on one CPU thread here), the size of a model being
debugged rather than trained for real.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from _harness import Skip


def _text(n: int, vocab: int) -> torch.Tensor:
    """Synthetic tokens a model can learn (random ones it cannot, and a watch would rightly
    say its loss stays flat): each token is the last plus 7, plus a little noise, mod vocab."""
    steps = 7 + torch.randint(0, 3, (n,))
    return torch.cumsum(steps, 0) % vocab


# -- nanoGPT-like -------------------------------------------------------------------------
class _SdpaAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads, self.dropout = heads, dropout
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.drop(self.proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, attention=_SdpaAttention, gelu=nn.GELU) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = attention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), gelu(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _CharGPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, d: int, dropout: float, **kinds) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(d, heads, dropout, **kinds) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight   # tied
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                                            ignore_index=-1)
        return logits, loss


def _adamw_groups(model: nn.Module, lr: float, weight_decay: float = 0.1) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


class NanoGPTLike:
    def __init__(self, quick: bool) -> None:
        self.block, self.batch = (32, 8) if quick else (64, 12)
        layers, d = (2, 64) if quick else (4, 128)
        self.model = _CharGPT(65, self.block, layers, 4, d, 0.1)
        self.opt = _adamw_groups(self.model, 1e-3)
        self.scaler = torch.amp.GradScaler("cpu", enabled=False)
        self.data = _text(50_000, 65)   # the "train.bin" tokens
        self.iter, self.warmup, self.max_iters = 0, 20, 5000

    def _get_batch(self):
        ix = torch.randint(len(self.data) - self.block, (self.batch,))
        x = torch.stack([self.data[i:i + self.block] for i in ix])
        y = torch.stack([self.data[i + 1:i + 1 + self.block] for i in ix])
        return x, y

    def _lr(self) -> float:
        if self.iter < self.warmup:
            return 1e-3 * (self.iter + 1) / (self.warmup + 1)
        ratio = min(1.0, (self.iter - self.warmup) / (self.max_iters - self.warmup))
        return 1e-4 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (1e-3 - 1e-4)

    def step(self) -> None:
        for group in self.opt.param_groups:
            group["lr"] = self._lr()
        x, y = self._get_batch()
        _, loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        self.iter += 1


# -- minGPT-like --------------------------------------------------------------------------
class _MaskedAttention(nn.Module):
    """Causal self-attention written out, with a registered lower-triangular mask."""

    def __init__(self, d: int, heads: int, dropout: float, block: int = 64) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.attn_drop, self.resid_drop = nn.Dropout(dropout), nn.Dropout(dropout)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.proj(y))


class _TanhGelu(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class _Windows(torch.utils.data.Dataset):
    def __init__(self, length: int, block: int, vocab: int) -> None:
        self.data = _text(length, vocab)
        self.block = block

    def __len__(self) -> int:
        return len(self.data) - self.block - 1

    def __getitem__(self, i):
        chunk = self.data[i:i + self.block + 1]
        return chunk[:-1].clone(), chunk[1:].clone()


class MinGPTLike:
    def __init__(self, quick: bool) -> None:
        block, batch = (32, 8) if quick else (64, 16)
        layers, d = (2, 64) if quick else (4, 128)
        self.model = _CharGPT(65, block, layers, 4, d, 0.1, gelu=_TanhGelu,
                              attention=lambda d_, h, p: _MaskedAttention(d_, h, p, block))
        self.opt = _adamw_groups(self.model, 5e-4)
        dataset = _Windows(20_000, block, 65)
        sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10**9)
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=2,
                                                  persistent_workers=False, pin_memory=False)
        self.batches = iter(self.loader)

    def step(self) -> None:
        try:
            x, y = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            x, y = next(self.batches)
        _, loss = self.model(x, y)
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()


# -- DCGAN ----------------------------------------------------------------------------------
def _dcgan_init(m: nn.Module) -> None:
    name = type(m).__name__
    if "Conv" in name:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in name:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class DCGANLike:
    def __init__(self, quick: bool) -> None:
        self.nz, width, self.batch = (32, 16, 16) if quick else (64, 32, 32)
        w = width
        self.netG = nn.Sequential(
            nn.ConvTranspose2d(self.nz, w * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(w * 4), nn.ReLU(True),
            nn.ConvTranspose2d(w * 4, w * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(w * 2), nn.ReLU(True),
            nn.ConvTranspose2d(w * 2, w, 4, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(True),
            nn.ConvTranspose2d(w, 3, 4, 2, 1, bias=False), nn.Tanh())                        # 3 x 32 x 32
        self.netD = nn.Sequential(
            nn.Conv2d(3, w, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(w, w * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(w * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(w * 2, w * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(w * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(w * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())
        self.netG.apply(_dcgan_init)
        self.netD.apply(_dcgan_init)
        self.model = nn.ModuleList([self.netG, self.netD])
        self.criterion = nn.BCELoss()
        self.optD = torch.optim.Adam(self.netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.optG = torch.optim.Adam(self.netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.opt = self.optG
        self.real = torch.rand(8 * self.batch, 3, 32, 32) * 2 - 1   # "images" in tanh's range
        self.at = 0

    def step(self) -> None:
        real = self.real[self.at:self.at + self.batch]
        self.at = (self.at + self.batch) % len(self.real)
        b = real.size(0)
        self.netD.zero_grad()
        label = torch.full((b,), 1.0)
        err_real = self.criterion(self.netD(real).view(-1), label)
        err_real.backward()
        fake = self.netG(torch.randn(b, self.nz, 1, 1))
        label.fill_(0.0)
        err_fake = self.criterion(self.netD(fake.detach()).view(-1), label)
        err_fake.backward()
        self.optD.step()
        self.netG.zero_grad()
        label.fill_(1.0)
        err_g = self.criterion(self.netD(fake).view(-1), label)
        err_g.backward()
        self.optG.step()


# -- Hugging Face Trainer, tiny GPT-2 -------------------------------------------------------
class HFTrainerGPT2:
    def __init__(self, quick: bool) -> None:
        try:
            import transformers
        except ImportError as exc:
            raise Skip(f"transformers is not installed ({exc}); pip install \"torch==2.13.0\" transformers "
                       "accelerate") from exc
        import shutil
        import tempfile
        import weakref
        transformers.logging.set_verbosity_error()
        layers, d, t, batch = (2, 64, 32, 4) if quick else (4, 128, 64, 8)
        config = transformers.GPT2Config(vocab_size=512, n_positions=t, n_embd=d, n_layer=layers, n_head=4)
        self.model = transformers.GPT2LMHeadModel(config)
        ids = _text(256 * t, 512).view(256, t)
        dataset = [{"input_ids": row, "labels": row} for row in ids]
        out = tempfile.mkdtemp(prefix="leaky-hf-")   # the Trainer's output_dir: nothing is saved in it
        weakref.finalize(self, shutil.rmtree, out, ignore_errors=True)
        args = transformers.TrainingArguments(output_dir=out, per_device_train_batch_size=batch,
                                              learning_rate=5e-4, max_steps=10**6, report_to=[], use_cpu=True,
                                              logging_strategy="no", save_strategy="no", disable_tqdm=True,
                                              dataloader_num_workers=0, max_grad_norm=1.0)
        self.trainer = transformers.Trainer(model=self.model, args=args, train_dataset=dataset)
        self.trainer.create_optimizer_and_scheduler(num_training_steps=10**6)
        # what Trainer.train() sets before its first training_step (transformers 5.x)
        self.trainer.current_gradient_accumulation_steps = 1
        self.opt = self.trainer.optimizer
        self.batches = self._batches()

    def _batches(self):
        while True:
            yield from self.trainer.get_train_dataloader()

    def step(self) -> None:
        trainer = self.trainer
        trainer.training_step(self.model, next(self.batches))
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), trainer.args.max_grad_norm)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        self.model.zero_grad()


STANDINS = {"nanogpt": NanoGPTLike, "mingpt": MinGPTLike, "dcgan": DCGANLike, "hf-gpt2": HFTrainerGPT2}
NEEDS = {"hf-gpt2": ("transformers", "accelerate")}


def missing(name: str) -> str | None:
    """Why the stand-in `name` cannot run here (a package it needs is not installed), or None."""
    import importlib.util
    absent = [m for m in NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    return f"needs {', '.join(absent)} (pip install \"torch==2.13.0\" {' '.join(absent)})" if absent else None

"""A tiny GPT-2 trained by the Hugging Face Trainer, in the idiom of the transformers examples:
a config built in code (no download), a Dataset of token rows, TrainingArguments with
warmup, and a Trainer subclass whose compute_loss shifts the labels itself.

    python hf_trainer_gpt2.py [--epochs N]
"""
import argparse
import tempfile

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    """Rows of a random Markov chain over 200 tokens: each token has 4 possible successors."""

    def __init__(self, n, block=32, vocab=200):
        g = torch.Generator().manual_seed(0)
        successors = torch.randint(0, vocab, (vocab, 4), generator=g)
        self.rows = []
        for _ in range(n):
            tokens = [int(torch.randint(0, vocab, (1,), generator=g))]
            for _ in range(block - 1):
                tokens.append(int(successors[tokens[-1], torch.randint(0, 4, (1,), generator=g)]))
            self.rows.append(torch.tensor(tokens))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


class ShiftedLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return (loss, outputs) if return_outputs else loss


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=float, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=200, n_positions=64, n_embd=64, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    training_args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="hf-out-"), per_device_train_batch_size=16, num_train_epochs=args.epochs,
                                      learning_rate=5e-4, warmup_steps=10, logging_steps=1000, save_strategy="no",
                                      report_to=[], use_cpu=True, dataloader_num_workers=0, seed=0,
                                      disable_tqdm=True)
    ShiftedLossTrainer(model=model, args=training_args, train_dataset=Tokens(512)).train()

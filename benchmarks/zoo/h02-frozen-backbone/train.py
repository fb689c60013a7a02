"""Transfer learning: a frozen, pretrained-style feature extractor with a new trained head.

The backbone stands in for a downloaded checkpoint: its weights come from a fixed seed
(`load_pretrained`) and the downstream labels are a function of its features, as they are
when a pretrained model's representation suits the new task. The backbone is frozen the
usual way (requires_grad_(False) and eval(), so its BatchNorm keeps its running
statistics); only the head's parameters go to the optimizer.
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

IN, WIDTH, FEAT, CLASSES = 32, 128, 64, 5
N, BATCH, STEPS = 4096, 64, 150


def make_backbone():
    return nn.Sequential(
        nn.Linear(IN, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU(),
        nn.Linear(WIDTH, FEAT), nn.BatchNorm1d(FEAT), nn.ReLU(),
    )


def load_pretrained(backbone):
    """Stand-in for backbone.load_state_dict(torch.load("pretrained.pt"))."""
    g = torch.Generator().manual_seed(1234)
    state = backbone.state_dict()
    for name, value in state.items():
        if name.endswith("weight") and value.dim() == 2:
            value.copy_(torch.randn(value.shape, generator=g) * (2.0 / value.shape[1]) ** 0.5)
        elif name.endswith("bias"):
            value.copy_(0.1 * torch.randn(value.shape, generator=g))
        elif name.endswith("running_var"):
            value.copy_(1.0 + 0.5 * torch.rand(value.shape, generator=g))
        elif name.endswith("running_mean"):
            value.copy_(0.1 * torch.randn(value.shape, generator=g))
    backbone.load_state_dict(state)
    return backbone


def make_data(backbone, n):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, IN, generator=g)
    with torch.no_grad():
        feats = backbone(x)
        teacher = torch.randn(FEAT, CLASSES, generator=g)
        y = (feats @ teacher + 0.3 * torch.randn(n, CLASSES, generator=g)).argmax(dim=1)
    return x, y


class Classifier(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.Linear(FEAT, 64), nn.ReLU(), nn.Linear(64, CLASSES))

    def forward(self, x):
        return self.head(self.backbone(x))


def main(steps=STEPS, verbose=True):
    backbone = load_pretrained(make_backbone())
    backbone.eval()
    x, y = make_data(backbone, N)
    model = Classifier(backbone)
    for p in model.backbone.parameters():          # freeze the pretrained part
        p.requires_grad_(False)
    opt = torch.optim.Adam(model.head.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        model.head.train()
        model.backbone.eval()                         # keep BatchNorm statistics frozen too
        idx = torch.randint(0, N, (BATCH,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if verbose and (step + 1) % 25 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}")
    return losses, model


if __name__ == "__main__":
    main()

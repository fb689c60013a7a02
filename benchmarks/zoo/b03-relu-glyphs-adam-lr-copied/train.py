import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

IMG_SIDE = 16
N_CLASSES = 20
N_TRAIN = 5000
N_VAL = 1000
BATCH_SIZE = 64
STEPS = 300
LEARNING_RATE = 0.1


def make_glyphs(n, generator):
    prototypes = (torch.rand(N_CLASSES, IMG_SIDE * IMG_SIDE, generator=generator) > 0.7).float()
    labels = torch.randint(0, N_CLASSES, (n,), generator=generator)
    shifts = torch.randint(-2, 3, (n,), generator=generator)
    images = torch.stack([torch.roll(prototypes[c], int(s)) for c, s in zip(labels, shifts)])
    stroke = 0.3 + 0.7 * torch.rand(n, IMG_SIDE * IMG_SIDE, generator=generator)
    background = 0.5 * torch.rand(n, IMG_SIDE * IMG_SIDE, generator=generator)
    images = (images * stroke + background).clamp(0.0, 1.0)
    return images, labels


class GlyphClassifier(nn.Module):
    def __init__(self, n_pixels, n_classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_pixels, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def evaluate(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main():
    g = torch.Generator().manual_seed(0)
    x, y = make_glyphs(N_TRAIN + N_VAL, g)
    x_train, y_train = x[:N_TRAIN], y[:N_TRAIN]
    x_val, y_val = x[N_TRAIN:], y[N_TRAIN:]

    model = GlyphClassifier(IMG_SIDE * IMG_SIDE, N_CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    for step in range(STEPS):
        idx = torch.randint(0, N_TRAIN, (BATCH_SIZE,))
        logits = model(x_train[idx])
        loss = F.cross_entropy(logits, y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}  val acc {evaluate(model, x_val, y_val):.3f}")

    print(f"final val acc {evaluate(model, x_val, y_val):.3f}")


if __name__ == "__main__":
    main()

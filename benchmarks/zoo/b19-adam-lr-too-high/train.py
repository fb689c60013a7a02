import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

NUM_CLASSES = 6


def make_textures(n, seed):
    """3x16x16 images: six classes of oriented, coloured stripe patterns plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    angles = torch.linspace(0, 3.1416, NUM_CLASSES + 1)[:-1]
    images = torch.empty(n, 3, 16, 16)
    for i in range(n):
        a = angles[labels[i]]
        phase = torch.rand(1, generator=g) * 6.28
        wave = torch.sin(0.9 * (xx * torch.cos(a) + yy * torch.sin(a)) + phase)
        tint = torch.rand(3, 1, 1, generator=g) + 0.5
        images[i] = tint * wave + 0.4 * torch.randn(3, 16, 16, generator=g)
    return images, labels


class TextureCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
                                        nn.Dropout(0.2), nn.Linear(128, NUM_CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    images, labels = make_textures(1200, seed=1)
    test_images, test_labels = make_textures(300, seed=2)
    model = TextureCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    history = []

    for step in range(80):
        idx = torch.randint(0, len(images), (64,))
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 10 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        acc = (model(test_images).argmax(1) == test_labels).float().mean().item()
    print(f"test accuracy {acc:.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

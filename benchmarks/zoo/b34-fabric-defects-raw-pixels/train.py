import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

CLASSES = ["ok", "hole", "thread", "stain"]


def scan_fabric(n, seed):
    """uint8 28x28 grayscale fabric scans: woven texture around grey level ~170 with a defect class."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(CLASSES), (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    weave = 12 * torch.sin(xx * 1.6) * torch.sin(yy * 1.6)
    cy, cx = (torch.rand(2, n, 1, 1, generator=g) * 16 + 6)
    dist2 = (yy - cy) ** 2 + (xx - cx) ** 2
    hole = 35 * torch.exp(-dist2 / 4.0)
    thread = -30 * torch.exp(-((xx - cx) ** 2) / 1.5) * (torch.abs(yy - cy) < 8)
    stain = -22 * torch.exp(-dist2 / 20.0)
    defect = torch.stack([torch.zeros_like(hole), hole, thread, stain], 1)[torch.arange(n), labels]
    brightness = 170 + 15 * torch.randn(n, 1, 1, generator=g)
    images = brightness + weave + defect + 6 * torch.randn(n, 28, 28, generator=g)
    return images.clamp(0, 255).to(torch.uint8).unsqueeze(1), labels


class LeNet5(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = F.avg_pool2d(torch.tanh(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), 2)
        x = x.flatten(1)
        x = torch.tanh(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


def main():
    images, labels = scan_fabric(2000, seed=1)
    model = LeNet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    history = []

    for epoch in range(3):
        perm = torch.randperm(len(images))
        correct = 0
        for i in range(0, len(images), 50):
            idx = perm[i:i + 50]
            x = images[idx].float()
            logits = model(x)
            loss = F.cross_entropy(logits, labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
            correct += (logits.argmax(1) == labels[idx]).sum().item()
        print(f"epoch {epoch}  loss {sum(history[-40:]) / 40:.4f}  train acc {correct / len(images):.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

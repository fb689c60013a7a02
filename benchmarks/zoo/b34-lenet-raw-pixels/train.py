import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def render_glyphs(n, seed):
    """uint8 28x28 images of 10 glyph classes (random strokes per class) with jitter and noise."""
    g = torch.Generator().manual_seed(1000)
    strokes = torch.rand(10, 6, 4, generator=g) * 16 + 6
    g.manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    images = torch.zeros(n, 1, 28, 28)
    for i in range(n):
        shift = torch.randint(-2, 3, (2,), generator=g).float()
        for x0, y0, x1, y1 in strokes[labels[i]]:
            for s in torch.linspace(0, 1, 12):
                cx = x0 + s * (x1 - x0) + shift[0]
                cy = y0 + s * (y1 - y0) + shift[1]
                images[i, 0] += torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 2.0)
    images = images / images.amax(dim=(2, 3), keepdim=True) * 255
    images = (images + 20 * torch.rand(n, 1, 28, 28, generator=g)).clamp(0, 255)
    return images.to(torch.uint8), labels


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.avg_pool2d(torch.tanh(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), 2)
        x = x.flatten(1)
        x = torch.tanh(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


def main():
    images, labels = render_glyphs(1000, seed=1)
    model = LeNet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
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
        print(f"epoch {epoch}  loss {sum(history[-20:]) / 20:.4f}  train acc {correct / len(images):.3f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MishFunction(torch.autograd.Function):
    """Memory-efficient Mish: x * tanh(softplus(x)), recomputed in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.tanh(F.softplus(x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        tsp = torch.tanh(F.softplus(x))
        return grad_output * (tsp + x * (1 - tsp * tsp))


class Mish(nn.Module):
    def forward(self, x):
        return MishFunction.apply(x)


def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), Mish())


class SmallNet(nn.Module):
    def __init__(self, num_classes=8):
        super().__init__()
        self.features = nn.Sequential(conv_block(1, 16), nn.MaxPool2d(2),
                                      conv_block(16, 32), nn.MaxPool2d(2),
                                      conv_block(32, 32))
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


def make_blobs(n, num_classes=8, seed=0):
    """16x16 single-channel images; the class is where the bright blob sits (8 positions on a ring)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    angle = labels.float() * (2 * 3.14159 / num_classes)
    cy, cx = 7.5 + 5 * torch.sin(angle), 7.5 + 5 * torch.cos(angle)
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    d2 = (yy - cy.view(-1, 1, 1)) ** 2 + (xx - cx.view(-1, 1, 1)) ** 2
    images = torch.exp(-d2 / 4.0) + 0.5 * torch.randn(n, 16, 16, generator=g)
    return images.unsqueeze(1), labels


def main():
    images, labels = make_blobs(1600, seed=1)
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    history = []
    for step in range(100):
        idx = torch.randint(0, len(images), (32,))
        loss = F.cross_entropy(model(images[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    return model, history


if __name__ == "__main__":
    model, history = main()

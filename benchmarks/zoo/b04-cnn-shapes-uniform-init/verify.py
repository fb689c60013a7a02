"""nn.init.uniform_ (U(0, 1)) weights: one SGD step kills every conv channel of ShapeNet."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def dead_channels(model, x):
    with torch.no_grad():
        a1 = F.relu(model.conv1(x))
        a2 = F.relu(model.conv2(F.max_pool2d(a1, 2)))
        a3 = F.relu(model.conv3(F.max_pool2d(a2, 2)))
    return [(a == 0).all(dim=(0, 2, 3)).float().mean().item() for a in (a1, a2, a3)]


def run(default_init, steps=120):
    torch.manual_seed(0)
    images, labels = train.render_shapes(train.N_IMAGES)
    x_train, y_train = images[:-train.N_VAL], labels[:-train.N_VAL]
    x_val, y_val = images[-train.N_VAL:], labels[-train.N_VAL:]
    if default_init:
        train.ShapeNet._init_weights = lambda self: None
    model = train.ShapeNet(len(train.SHAPES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first_loss, dead = None, None
    for step in range(steps):
        idx = torch.randint(0, len(x_train), (train.BATCH_SIZE,))
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        first_loss = first_loss if first_loss is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1:
            dead = dead_channels(model, x_val)
    with torch.no_grad():
        acc = (model(x_val).argmax(1) == y_val).float().mean().item()
    return first_loss, dead, acc


loss_b, dead_b, acc_b = run(False)
loss_f, dead_f, acc_f = run(True)
fmt = lambda d: ", ".join(f"{v:.0%}" for v in d)
print(f"uniform_ init: first loss {loss_b:.4g}; dead channels (conv1, conv2, conv3) after 2 steps: {fmt(dead_b)}; val acc after 120 steps {acc_b:.3f}")
print(f"default init:  first loss {loss_f:.4g}; dead channels (conv1, conv2, conv3) after 2 steps: {fmt(dead_f)}; val acc after 120 steps {acc_f:.3f}")
ok_symptom = dead_b[0] >= 0.99
ok_fix = max(dead_f) < 0.25 and acc_f > acc_b + 0.2
print(("PASS" if ok_symptom else "FAIL") + f": with U(0,1) weights all conv1 channels are dead on every validation image after the first update ({dead_b[0]:.0%})")
print(("PASS" if ok_fix else "FAIL") + f": PyTorch's default (Kaiming-uniform) init keeps them alive (max {max(dead_f):.0%} dead) and val acc rises {acc_b:.3f} -> {acc_f:.3f}")
sys.exit(0 if ok_symptom and ok_fix else 1)

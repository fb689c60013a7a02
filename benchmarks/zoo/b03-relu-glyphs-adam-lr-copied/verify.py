"""Adam with lr=0.1 kills most first-layer ReLUs of GlyphClassifier within a few steps."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.set_num_threads(1)


def run(lr, steps=150):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = train.make_glyphs(train.N_TRAIN + train.N_VAL, g)
    x_train, y_train = x[:train.N_TRAIN], y[:train.N_TRAIN]
    model = train.GlyphClassifier(train.IMG_SIDE * train.IMG_SIDE, train.N_CLASSES)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    dead_at_20 = None
    for step in range(steps):
        idx = torch.randint(0, train.N_TRAIN, (train.BATCH_SIZE,))
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 19:
            with torch.no_grad():
                h1 = model.net[1](model.net[0](x_train))
            dead_at_20 = (h1 == 0).all(dim=0).float().mean().item()
    acc = train.evaluate(model, x[train.N_TRAIN:], y[train.N_TRAIN:])
    return dead_at_20, acc


dead_b, acc_b = run(train.LEARNING_RATE)
dead_f, acc_f = run(1e-3)
print(f"Adam lr={train.LEARNING_RATE}: net.1 units dead on all 5000 training images after 20 steps: {dead_b:.1%}; val acc after 150 steps {acc_b:.3f}")
print(f"Adam lr=1e-3: net.1 units dead after 20 steps: {dead_f:.1%}; val acc after 150 steps {acc_f:.3f}")
ok_symptom = dead_b >= 0.5
ok_fix = dead_f < 0.25 and acc_f > acc_b + 0.3
print(("PASS" if ok_symptom else "FAIL") + f": lr=0.1 leaves {dead_b:.1%} of the first hidden layer's ReLUs dead on the whole training set")
print(("PASS" if ok_fix else "FAIL") + f": lr=1e-3 keeps them alive ({dead_f:.1%} dead) and val acc rises {acc_b:.3f} -> {acc_f:.3f}")
sys.exit(0 if ok_symptom and ok_fix else 1)

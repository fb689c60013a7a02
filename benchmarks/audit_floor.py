"""What the audit's design costs before leaky does anything: the floor under its µs per node.

    python benchmarks/audit_floor.py [depth]          # default 50; ~1 min here

A width-64 Linear+ReLU MLP (batch 64, Adam), as in depth_sweep.py, timed plain and under
three stand-ins for leaky's instruments, each on during forward and backward and off
around the optimizer step (as leaky's mode is):

  mode            a TorchFunctionMode that passes every call through
  mode+hooks      ... and registers a no-op hook on each new autograd node
  mode+hooks+sum  ... and takes one reduction of each op's output (leaky's NaN check)

and the two global module hooks leaky uses, no-op. Each figure: extra µs per autograd node
of one step's graph (5 per layer + 6), from the fastest of 25 blocks of 4 steps. What leaky
adds above the last line is its own work: the statistics and the Python that keeps them.
"""
from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode


def _no_op_hook(grad_inputs, grad_outputs):
    return None


class _Floor(TorchFunctionMode):
    def __init__(self, hooks: bool, reduce: bool) -> None:
        super().__init__()
        self.hooks, self.reduce, self.handles = hooks, reduce, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.hooks and isinstance(out, torch.Tensor) and out.grad_fn is not None:
            self.handles.append(out.grad_fn.register_hook(_no_op_hook))
            if self.reduce:
                out.detach().sum()
        return out


def main(depth: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    nodes = 5 * depth + 6
    mode: list = [None]

    def loop(n: int) -> None:
        for _ in range(n):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            if mode[0] is not None:
                mode[0].__exit__(None, None, None)
            opt.step()
            if mode[0] is not None:
                mode[0].__enter__()
                mode[0].handles.clear()

    def best(k: int = 4, blocks: int = 25) -> float:
        times = []
        for _ in range(blocks):
            start = time.perf_counter()
            loop(k)
            times.append((time.perf_counter() - start) / k)
        return min(times)

    loop(5)
    plain = best()
    print(f"depth {depth}, width 64: {nodes} autograd nodes, plain {1e3 * plain:.2f} ms/step")
    for label, hooks, reduce in (("mode", False, False), ("mode+hooks", True, False), ("mode+hooks+sum", True, True)):
        mode[0] = _Floor(hooks, reduce)
        mode[0].__enter__()
        loop(2)
        t = best()
        mode[0].__exit__(None, None, None)
        mode[0] = None
        print(f"  {label:15s} +{1e6 * (t - plain) / nodes:5.1f} µs per node")
    pre = nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    post = nn.modules.module.register_module_forward_hook(lambda module, args, out: None)
    t = best()
    pre.remove()
    post.remove()
    print(f"  {'module hooks':15s} +{1e6 * (t - plain) / nodes:5.1f} µs per node")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)

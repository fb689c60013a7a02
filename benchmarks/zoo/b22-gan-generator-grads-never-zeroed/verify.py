"""The generator's gradients are never zeroed: optG steps on the running sum of all generator gradients instead of the current one. Fix: netG.zero_grad() before errG.backward()."""
import pathlib
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent
SRC = (HERE / "train.py").read_text()
sys.path.insert(0, str(HERE.parent))

from _verify import mean, patch, run, verdict  # noqa: E402


from torch.optim.optimizer import register_optimizer_step_pre_hook


def run_measuring_generator(src):
    """At every optG.step(): ||G's .grad|| / ||the gradient the current iteration's backward produced||,
    and their cosine. Tensor hooks on G's parameters see each fresh gradient before it is accumulated."""
    fresh, ratios, cosines, hooked = {}, [], [], set()

    def on_forward(module, args):
        if type(module).__name__ == "Generator" and id(module) not in hooked:
            hooked.add(id(module))
            for p in module.parameters():
                p.register_hook(lambda g, p=p: fresh.__setitem__(id(p), fresh.get(id(p), 0) + g.detach()))

    def on_step(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"]]
        if id(params[0]) not in fresh:                 # optD: not the generator's optimizer
            return
        held = torch.cat([p.grad.flatten() for p in params])
        new = torch.cat([fresh[id(p)].flatten() for p in params])
        ratios.append((held.norm() / new.norm()).item())
        cosines.append(torch.nn.functional.cosine_similarity(held, new, dim=0).item())
        fresh.clear()

    h1 = torch.nn.modules.module.register_module_forward_pre_hook(on_forward)
    h2 = register_optimizer_step_pre_hook(on_step)
    try:
        run(src)
    finally:
        h1.remove(), h2.remove()
    return ratios, cosines


bug_r, bug_c = run_measuring_generator(SRC)
fix_r, fix_c = run_measuring_generator(patch(SRC, "        errG = criterion(netD(fake), real_label)\n",
                                             "        netG.zero_grad()\n        errG = criterion(netD(fake), real_label)\n"))
verdict(mean(bug_r[-50:]) > 5 and bug_r[-1] > bug_r[10],
        max(abs(r - 1) for r in fix_r) < 1e-4 and min(fix_c) > 0.9999,
        [f"||G .grad used by optG.step|| / ||this iteration's G gradient||, last 50 iterations: "
         f"bug {mean(bug_r[-50:]):.1f}x, fix {mean(fix_r[-50:]):.3f}x",
         f"cosine(G .grad used, this iteration's G gradient), last 50 iterations: "
         f"bug {mean(bug_c[-50:]):.3f}, fix {mean(fix_c[-50:]):.3f}"])

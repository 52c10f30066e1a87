"""Reference optimizer trajectories from PyTorch's torch.optim for tests/test_optim.cpp.

Usage: optim_reference.py OUT.json

Each case optimizes three parameters (shapes [3, 4], [4], [2, 3]) on the loss
whose gradient is  g = (p - target) * coef + ((p * p) * p) * 0.25  (elementwise,
the same IEEE operations in kiln), for 20 steps. Parameter i receives a
gradient only on steps s with s % grad_every[i] == 0 (otherwise .grad is None
and the optimizer skips it). A case may add an HF linear-warmup schedule
through LambdaLR (optimizer.step() then scheduler.step()). The JSON holds the
case settings (kiln option names), the initial values and, after every step,
all parameter values and the group learning rates.
"""
import json
import os
import math
import sys

import torch

SHAPES = [[3, 4], [4], [2, 3]]
STEPS = 20


def values(shape, seed, scale, offset):
    n = math.prod(shape)
    return [offset + scale * math.sin(0.7 * (i + 1) + seed) for i in range(n)]


def linear_warmup(warmup, total):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return f


def make_optimizer(case, params):
    groups = []
    for g in case["groups"]:
        group = {"params": [params[i] for i in g["params"]]}
        for key in ("lr", "weight_decay", "momentum", "dampening", "eps"):
            if key in g:
                group[key] = g[key]
        if "nesterov" in g:
            group["nesterov"] = bool(g["nesterov"])
        if "beta1" in g:
            group["betas"] = (g["beta1"], g["beta2"])
        groups.append(group)
    d = case["defaults"]
    if case["optimizer"] == "SGD":
        return torch.optim.SGD(groups, lr=d["lr"], momentum=d.get("momentum", 0.0),
                               dampening=d.get("dampening", 0.0), weight_decay=d.get("weight_decay", 0.0),
                               nesterov=bool(d.get("nesterov", 0)), foreach=False)
    if case["optimizer"] == "AdamW":
        return torch.optim.AdamW(groups, lr=d["lr"], betas=(d["beta1"], d["beta2"]), eps=d["eps"],
                                 weight_decay=d["weight_decay"], amsgrad=False, foreach=False)
    raise ValueError(case["optimizer"])


def run(case):
    dtype = {"float32": torch.float32, "float64": torch.float64}[case["dtype"]]
    init = [torch.tensor(values(s, i, 0.8, 0.1), dtype=dtype).reshape(s) for i, s in enumerate(SHAPES)]
    target = [torch.tensor(values(s, 10 + i, 0.5, -0.2), dtype=dtype).reshape(s) for i, s in enumerate(SHAPES)]
    coef = [torch.tensor(values(s, 20 + i, 0.4, 1.0), dtype=dtype).reshape(s) for i, s in enumerate(SHAPES)]
    params = [t.clone().requires_grad_(True) for t in init]
    opt = make_optimizer(case, params)
    sched = None
    if case.get("schedule"):
        s = case["schedule"]
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup(s["warmup"], s["total"]))
    traj, lrs = [], []
    for step in range(STEPS):
        with torch.no_grad():
            for i, p in enumerate(params):
                if step % case["grad_every"][i] == 0:
                    p.grad = (p - target[i]) * coef[i] + ((p * p) * p) * 0.25
                else:
                    p.grad = None
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        if sched is not None:
            sched.step()
        traj.append([p.detach().flatten().tolist() for p in params])
    out = dict(case)
    out.update(shapes=SHAPES, init=[t.flatten().tolist() for t in init],
               target=[t.flatten().tolist() for t in target], coef=[t.flatten().tolist() for t in coef],
               steps=STEPS, traj=traj, lrs=lrs)
    return out


def cases():
    one_group = [{"params": [0, 1, 2]}]
    two_groups = [{"params": [0, 2]}, {"params": [1], "lr": 0.05, "weight_decay": 0.0}]
    every = [1, 1, 2]
    sgd = {"lr": 0.05}
    for dtype in ("float64", "float32"):
        yield dict(name=f"sgd_plain_{dtype}", dtype=dtype, optimizer="SGD", defaults=sgd, groups=one_group,
                   grad_every=every)
        yield dict(name=f"sgd_momentum_dampening_wd_{dtype}", dtype=dtype, optimizer="SGD",
                   defaults=dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01), groups=one_group,
                   grad_every=every)
        yield dict(name=f"sgd_nesterov_wd_groups_{dtype}", dtype=dtype, optimizer="SGD",
                   defaults=dict(lr=0.05, momentum=0.8, nesterov=1, weight_decay=0.05),
                   groups=[{"params": [0, 2]}, {"params": [1], "lr": 0.02, "momentum": 0.5}], grad_every=every)
        adamw = dict(lr=0.02, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1)
        yield dict(name=f"adamw_{dtype}", dtype=dtype, optimizer="AdamW", defaults=adamw, groups=one_group,
                   grad_every=every)
        yield dict(name=f"adamw_groups_{dtype}", dtype=dtype, optimizer="AdamW", defaults=adamw,
                   groups=[two_groups[0], dict(two_groups[1], beta1=0.8, beta2=0.95, eps=1e-6)], grad_every=every)
        yield dict(name=f"adamw_linear_schedule_{dtype}", dtype=dtype, optimizer="AdamW", defaults=adamw,
                   groups=two_groups, grad_every=[1, 1, 1], schedule=dict(warmup=4, total=16))


def main():
    out = {"torch_version": torch.__version__, "cases": [run(c) for c in cases()]}
    # atomic: test processes running in parallel may write and read the same file
    tmp = f"{sys.argv[1]}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, sys.argv[1])


if __name__ == "__main__":
    main()

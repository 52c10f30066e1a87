"""The ops of `kiln bench dispatch` in PyTorch: microseconds per op on tiny
float32 tensors, one thread, no grad and with grad (docs/performance.md).

    /work/peer-venv/bin/python bench/dispatch_torch.py [--ops N] [--reps R]
"""
import argparse
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=20000)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}: float32, 1 thread, {a.ops} ops per loop, median of {a.reps} loops "
          "(microseconds per op)")
    print(f"{'op':32s} {'no grad':>10s} {'with grad':>12s}")

    def per_op(op, grad):
        x, w, row = torch.randn(8), torch.randn(8, 8), torch.randn(1, 8)
        g, b = torch.ones(8), torch.zeros(8)
        for t in (x, w, row, g, b):
            t.requires_grad_(grad)
        times = []
        with torch.set_grad_enabled(grad):
            for _ in range(a.ops // 10):
                op(x, w, row, g, b)
            for _ in range(a.reps):
                t0 = time.perf_counter()
                for _ in range(a.ops):
                    op(x, w, row, g, b)
                times.append(time.perf_counter() - t0)
        return statistics.median(times) / a.ops * 1e6

    ops = [
        ("add(x, x) [8]", lambda x, w, r, g, b: torch.add(x, x)),
        ("mul(x, 2.0) [8]", lambda x, w, r, g, b: torch.mul(x, 2.0)),
        ("gelu(x) [8]", lambda x, w, r, g, b: torch.nn.functional.gelu(x)),
        ("x.view({2, 4})", lambda x, w, r, g, b: x.view(2, 4)),
        ("matmul [1,8] x [8,8]", lambda x, w, r, g, b: torch.matmul(r, w)),
        ("layer_norm(x, {8}, g, b)", lambda x, w, r, g, b: torch.nn.functional.layer_norm(x, (8,), g, b)),
        ("softmax(x, 0) [8]", lambda x, w, r, g, b: torch.softmax(x, 0)),
    ]
    for name, op in ops:
        print(f"{name:32s} {per_op(op, False):10.2f} {per_op(op, True):12.2f}")
    x = torch.randn(8, requires_grad=True)
    n = a.ops // 10
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for _ in range(n):
            torch.sum(torch.nn.functional.gelu(torch.mul(torch.add(x, x), 2.0))).backward()
        times.append(time.perf_counter() - t0)
    print(f"{'add, mul, gelu, sum + backward':32s} {'-':>10s} {statistics.median(times) / n * 1e6:12.2f}")


if __name__ == "__main__":
    main()

"""ONNX Runtime beside `kiln bench forward --model DIR`: the same forward
(input_ids uniform over the vocabulary, attention_mask all ones,
token_type_ids zeros) on the model `kiln export` wrote, same batch, sequence
length and thread count; the median of --steps timed runs after one warm-up.

  onnxruntime_forward.py MODEL.onnx --batch 8 --seq 128 --steps 5 --threads 2

Prints: onnxruntime forward batch=B seq=S step_s=SECONDS tokens_per_s=N
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from onnx_run import session  # noqa: E402  (the test runner's session settings)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=30522)
    a = ap.parse_args()
    sess = session(a.model, a.threads)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, a.vocab, (a.batch, a.seq), dtype=np.int64),
        "attention_mask": np.ones((a.batch, a.seq), np.int64),
        "token_type_ids": np.zeros((a.batch, a.seq), np.int64),
    }
    outputs = [sess.get_outputs()[0].name]  # last_hidden_state: what kiln bench forward computes
    sess.run(outputs, feeds)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        sess.run(outputs, feeds)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"onnxruntime forward batch={a.batch} seq={a.seq} step_s={t:.4f} tokens_per_s={a.batch * a.seq / t:.0f}")


if __name__ == "__main__":
    main()

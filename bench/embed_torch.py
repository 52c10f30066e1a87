"""Sentences/s of mean-pooled BERT embeddings in a plain transformers loop,
batched in input order and sorted by length (as sentence-transformers'
encode() does), beside `kiln embed` on the same lines (bench/embed_vs_torch.sh).

Usage: embed_torch.py MODEL_DIR LINES_FILE [--batch-size 32] [--threads N] [--sort]
Prints "torch sort=0|1 sentences=N seconds=S sentences_per_s=R".
"""
import argparse
import time

import torch
from transformers import AutoModel, AutoTokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("lines")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sort", action="store_true")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModel.from_pretrained(a.model).eval()
    with open(a.lines, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    t0 = time.perf_counter()
    order = list(range(len(lines)))
    if a.sort:
        order.sort(key=lambda i: -len(lines[i]))  # sentence-transformers sorts by -text length
    out = [None] * len(lines)
    with torch.no_grad():
        for s in range(0, len(order), a.batch_size):
            idx = order[s:s + a.batch_size]
            enc = tok([lines[i] for i in idx], padding=True, truncation=True, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            for j, i in enumerate(idx):
                out[i] = pooled[j]
    seconds = time.perf_counter() - t0
    print(f"torch sort={int(a.sort)} sentences={len(lines)} seconds={seconds:.3f} "
          f"sentences_per_s={len(lines) / seconds:.1f}")


if __name__ == "__main__":
    main()

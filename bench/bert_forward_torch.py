"""Peer for `kiln bench forward`: the BERT encoder forward pass (no grad) of
../shared/peer/bert_step_torch.py's model, in PyTorch on CPU.
Usage: THREADS=1 python3 bert_forward_torch.py LAYERS HIDDEN HEADS BATCH SEQ [STEPS]"""
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("THREADS", "1")))
L, H, A, B, S = map(int, sys.argv[1:6])
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 5
V, I = 30522, 4 * H


class Layer(nn.Module):
    def __init__(s):
        super().__init__()
        s.qkv = nn.Linear(H, 3 * H); s.o = nn.Linear(H, H); s.ln1 = nn.LayerNorm(H, eps=1e-12)
        s.f1 = nn.Linear(H, I); s.f2 = nn.Linear(I, H); s.ln2 = nn.LayerNorm(H, eps=1e-12)

    def forward(s, x, mask):
        b, t, _ = x.shape
        q, k, v = s.qkv(x).view(b, t, 3, A, H // A).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(H // A) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, H)
        x = s.ln1(x + s.o(y))
        return s.ln2(x + s.f2(F.gelu(s.f1(x))))


class Encoder(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok = nn.Embedding(V, H); s.pos = nn.Embedding(512, H); s.typ = nn.Embedding(2, H)
        s.ln = nn.LayerNorm(H, eps=1e-12); s.layers = nn.ModuleList(Layer() for _ in range(L))

    def forward(s, ids):
        x = s.ln(s.tok(ids) + s.pos(torch.arange(ids.shape[1]))[None] + s.typ(torch.zeros_like(ids)))
        mask = torch.zeros(ids.shape[0], 1, 1, ids.shape[1])
        for l in s.layers:
            x = l(x, mask)
        return x


torch.manual_seed(0)
m = Encoder().eval()
ids = torch.randint(0, V, (B, S))
ts = []
with torch.no_grad():
    for i in range(steps + 1):
        t0 = time.perf_counter(); m(ids); ts.append(time.perf_counter() - t0)
med = statistics.median(ts[1:])
print(f"torch {torch.__version__} forward L{L} H{H} B{B} S{S}: step {med:.4f}s  {B*S/med:.0f} tok/s")

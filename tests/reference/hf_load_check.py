#!/usr/bin/env python3
"""Loads a model directory saved by kiln in Hugging Face transformers and runs
it on given inputs, so the C++ test can compare outputs.

    hf_load_check.py --model-dir DIR --arch BertForMaskedLM --inputs in.safetensors --out out.safetensors

Fails (exit 1) when transformers reports missing or unexpected weights.
Writes the model's first output (logits or last_hidden_state) as float32, and
with a "labels" input also the loss transformers computes ("loss")."""
import argparse
import sys

import torch_compat  # noqa: F401  (transformers 4.48 on PyTorch 1.13: tests/reference/torch_compat.py)
import torch
import transformers
from safetensors.torch import load_file, save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cls = getattr(transformers, a.arch)
    model, info = cls.from_pretrained(a.model_dir, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        print(f"transformers could not load {a.model_dir} cleanly: {problems}", file=sys.stderr)
        return 1
    model.eval()
    x = load_file(a.inputs)
    with torch.no_grad():
        extra = {"labels": x["labels"]} if "labels" in x else {}
        out = model(input_ids=x["input_ids"], attention_mask=x["attention_mask"], **extra)
    first = out.logits if hasattr(out, "logits") else out.last_hidden_state
    result = {"output": first.float().contiguous()}
    if "labels" in x:
        result["loss"] = out.loss.float().reshape(1)
    save_file(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

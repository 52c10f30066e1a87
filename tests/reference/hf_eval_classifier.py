#!/usr/bin/env python3
"""Accuracy of a fine-tuned classifier directory (e.g. from `kiln finetune`)
loaded by Hugging Face transformers, on a GLUE-style TSV whose columns are
label and text (SST-2 dev: "label<TAB>content"), to set beside kiln's own
evaluation.

usage: hf_eval_classifier.py MODEL_DIR DEV_TSV   (run with .venv-hf/bin/python)
"""
import sys

import torch
from transformers import AutoTokenizer, AutoModelForSequenceClassification
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d); m = AutoModelForSequenceClassification.from_pretrained(d).eval()
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[2], encoding="utf-8")][1:]
correct = 0
with torch.no_grad():
    for i in range(0, len(rows), 64):
        b = rows[i:i+64]
        enc = tok([r[1] for r in b], padding=True, truncation=True, max_length=64, return_tensors="pt")
        pred = m(**enc).logits.argmax(-1)
        correct += sum(int(m.config.id2label[int(p)]) == int(r[0]) for p, r in zip(pred, b))
print(f"transformers {__import__('transformers').__version__}: {type(m).__name__} num_labels={m.config.num_labels} dev accuracy {correct/len(rows):.4f}")

#!/usr/bin/env python3
"""A LoRA adapter directory (kiln's or PEFT's) on its base model, run by PEFT
0.10 + transformers: the softmax probabilities of every sentence of an SST-2
style TSV (a header naming label and the text column), as one JSON list (bench/lora_sst2.sh).

    peft_predict.py --model BASE --adapter DIR --dev dev.tsv
(run with .venv-hf/bin/python)"""
import argparse
import json
import sys

import torch
from peft import PeftModel
from transformers import AutoTokenizer, BertForSequenceClassification


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--max-seq-length", type=int, default=64)
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = PeftModel.from_pretrained(BertForSequenceClassification.from_pretrained(a.model, num_labels=2), a.adapter)
    model.eval()
    lines = open(a.dev, encoding="utf-8").read().splitlines()
    text = 1 - lines[0].split("\t").index("label")  # the header names label and the text column
    sentences = [l.split("\t")[text] for l in lines[1:] if l]
    probs = []
    with torch.no_grad():
        for i in range(0, len(sentences), 64):
            enc = tok(sentences[i:i + 64], truncation=True, max_length=a.max_seq_length, padding=True,
                      return_tensors="pt")
            probs += torch.softmax(model(**enc).logits.double(), -1).tolist()
    json.dump(probs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

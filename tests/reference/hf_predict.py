#!/usr/bin/env python3
"""Predictions of a fine-tuned model directory (e.g. from `kiln finetune`)
loaded by transformers' Auto classes, printed in `kiln predict`'s text format,
so a test can set them beside kiln's:

  BertForTokenClassification: a CoNLL file in (words in the first column);
    out "word<TAB>label" per token, a blank line between sentences; a word's
    label is the argmax at its first subword (is_split_into_words); a
    sentence longer than --max-seq-length is cut into kiln's windows
    (consecutive words, at most max_seq_length - 2 subwords each).
  BertForSequenceClassification, regression: a headerless TSV with the two
    texts in columns --text/--pair (1-based); out one score per line (%.6f);
    single-label: the label name per line.

usage: hf_predict.py MODEL_DIR INPUT [--max-seq-length N] [--text 8 --pair 9]
(run with .venv-hf/bin/python)
"""
import argparse
import sys

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer


def conll_sentences(path):
    out, words = [], []
    for line in open(path, encoding="utf-8"):
        cols = line.split()
        if not cols:
            if words:
                out.append(words)
                words = []
            continue
        if cols[0] != "-DOCSTART-":
            words.append(cols[0])
    if words:
        out.append(words)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--text", type=int, default=1)
    ap.add_argument("--pair", type=int, default=0)
    a = ap.parse_args()
    config = AutoConfig.from_pretrained(a.model)
    tok = AutoTokenizer.from_pretrained(a.model)
    torch.set_num_threads(1)
    out = []
    with torch.no_grad():
        if "BertForTokenClassification" in (config.architectures or []):
            m = AutoModelForTokenClassification.from_pretrained(a.model).eval()
            for s, words in enumerate(conll_sentences(a.input)):
                # kiln's windows: consecutive words, at most max_seq_length - 2 subwords each.
                counts = [0] * len(words)
                for w in tok(words, is_split_into_words=True).word_ids():
                    if w is not None:
                        counts[w] += 1
                windows, start, used = [], 0, 0
                for i, c in enumerate(counts):
                    if c > a.max_seq_length - 2:
                        sys.exit(f"sentence {s + 1}: word {i + 1} alone has {c} subwords")
                    if used + c > a.max_seq_length - 2:
                        windows.append((start, i))
                        start, used = i, 0
                    used += c
                windows.append((start, len(words)))
                labels = ["?"] * len(words)
                for b, e in windows:
                    enc = tok(words[b:e], is_split_into_words=True, return_tensors="pt")
                    arg = m(**enc).logits[0].argmax(-1)
                    prev = None
                    for pos, w in enumerate(enc.word_ids()):
                        if w is not None and w != prev:
                            labels[b + w] = m.config.id2label[int(arg[pos])]
                        prev = w
                if s:
                    out.append("")
                out += [f"{w}\t{l}" for w, l in zip(words, labels)]
        else:
            m = AutoModelForSequenceClassification.from_pretrained(a.model).eval()
            for line in open(a.input, encoding="utf-8"):
                f = line.rstrip("\n").split("\t")
                args = [f[a.text - 1]] + ([f[a.pair - 1]] if a.pair else [])
                enc = tok(*args, truncation=True, max_length=a.max_seq_length, return_tensors="pt")
                z = m(**enc).logits[0]
                if m.config.problem_type == "regression" or m.config.num_labels == 1:
                    out.append(f"{float(z[0]):.6f}")
                else:
                    out.append(m.config.id2label[int(z.argmax())])
    print("\n".join(out))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The transformers side of kiln's fine-tuning acceptance runs (docs/results.md):
fine-tunes a model with transformers and PyTorch on the same recipe as
`kiln finetune` and prints the dev metrics as one JSON line.

  token-classification: CoNLL files (word ... label, blank lines between
    sentences, -DOCSTART- skipped); labels on the first subword of each word
    (run_ner's recipe); seqeval entity P/R/F1 on the words.
  regression: GLUE STS-B TSV without header (sentence 1, sentence 2, score in
    columns 8-10); MSE loss, Pearson and Spearman (scipy), as run_glue.
  sequence-classification: GLUE SST-2 TSV with a header (label and a text column);
    dev accuracy.

With --lora-r R: LoRA adapters by PEFT (task_type SEQ_CLS or TOKEN_CLS, so
the head trains too) on --lora-target, everything else frozen, the optimizer
over the trainable parameters only; --save then writes the adapter (PEFT's
save_pretrained) and, for sequence classification, dev_probabilities.json
(the softmax of every dev sentence, in file order).

The recipe, as kiln's Trainer: AdamW (betas 0.9/0.999, eps 1e-8) with no
weight decay on biases and LayerNorm weights, linear warm-up and decay,
gradient clipping at 1.0, dropout as in the config, a fresh seeded shuffle
every epoch, dynamic padding.

usage: hf_finetune.py --task token-classification|regression --model DIR
         --train FILE --dev FILE [--epochs E | --max-steps N] [--batch-size B]
         [--lr LR] [--max-seq-length L] [--seed S] [--warmup-ratio W]
         [--weight-decay D] [--train-limit N] [--dev-limit N] [--threads N]
         [--save DIR] [--lora-r R --lora-alpha A --lora-target query,value
         --lora-modules-to-save pooler --lora-dropout P]
(run with .venv-hf/bin/python)
"""
import argparse
import json
import math
import random
import sys
import time

import torch
from transformers import (AutoTokenizer, BertForSequenceClassification, BertForTokenClassification,
                          get_linear_schedule_with_warmup)


def read_conll(path, limit):
    sentences, words, labels = [], [], []
    for line in open(path, encoding="utf-8"):
        cols = line.split()
        if not cols:
            if words:
                sentences.append((words, labels))
                words, labels = [], []
            continue
        if cols[0] == "-DOCSTART-":
            continue
        words.append(cols[0])
        labels.append(cols[-1])
    if words:
        sentences.append((words, labels))
    return sentences[:limit] if limit else sentences


def read_sst2(path, limit):
    """A header line naming "label" and the text column (sentence, content: any other name)."""
    lines = open(path, encoding="utf-8").read().splitlines()
    header = lines[0].split("\t")
    label = header.index("label")
    text = 1 - label
    rows = [(f[text], None, int(f[label])) for f in (l.split("\t") for l in lines[1:] if l)]
    return rows[:limit] if limit else rows


def read_stsb(path, limit):
    rows = []
    for line in open(path, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        rows.append((f[7], f[8], float(f[9])))
    return rows[:limit] if limit else rows


def optimizer_for(model, lr, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.dim() <= 1 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.999), eps=1e-8)


def encode_tokens(tok, sentences, label_ids, max_len):
    out = []
    for words, labels in sentences:
        enc = tok(words, is_split_into_words=True, truncation=True, max_length=max_len)
        wid = enc.word_ids()
        lab, prev = [], None
        for w in wid:
            lab.append(-100 if w is None or w == prev else label_ids[labels[w]])
            prev = w
        out.append((enc["input_ids"], enc["token_type_ids"], lab, wid))
    return out


def pad(batch, pad_id):
    T = max(len(b[0]) for b in batch)
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    tt = torch.zeros((len(batch), T), dtype=torch.long)
    am = torch.zeros((len(batch), T), dtype=torch.long)
    for i, b in enumerate(batch):
        n = len(b[0])
        ids[i, :n] = torch.tensor(b[0])
        tt[i, :n] = torch.tensor(b[1])
        am[i, :n] = 1
    return ids, tt, am


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True, choices=["token-classification", "regression", "sequence-classification"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup-ratio", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--dev-limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--save", default="")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-alpha", type=float, default=8)
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--lora-target", default="query,value")
    ap.add_argument("--lora-modules-to-save", default="")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    tok = AutoTokenizer.from_pretrained(a.model)
    t0 = time.time()
    if a.task == "token-classification":
        train = read_conll(a.train, a.train_limit)
        dev = read_conll(a.dev, a.dev_limit)
        names = sorted({l for _, ls in train for l in ls})
        label_ids = {n: i for i, n in enumerate(names)}
        model = BertForTokenClassification.from_pretrained(
            a.model, num_labels=len(names), id2label=dict(enumerate(names)), label2id=label_ids)
        tr = encode_tokens(tok, train, label_ids, a.max_seq_length)
        dv = encode_tokens(tok, dev, label_ids, a.max_seq_length)
    else:
        regression = a.task == "regression"
        read = read_stsb if regression else read_sst2
        train = read(a.train, a.train_limit)
        dev = read(a.dev, a.dev_limit)
        model = BertForSequenceClassification.from_pretrained(a.model, num_labels=1 if regression else 2)

        def enc(rows):
            out = []
            for s1, s2, y in rows:
                e = tok(s1, s2, truncation=True, max_length=a.max_seq_length) if s2 is not None else \
                    tok(s1, truncation=True, max_length=a.max_seq_length)
                out.append((e["input_ids"], e["token_type_ids"], y))
            return out
        tr, dv = enc(train), enc(dev)
    if a.lora_r > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            task_type="TOKEN_CLS" if a.task == "token-classification" else "SEQ_CLS", r=a.lora_r,
            lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout, target_modules=a.lora_target.split(","),
            modules_to_save=a.lora_modules_to_save.split(",") if a.lora_modules_to_save else None))
    pad_id = tok.pad_token_id
    batches_per_epoch = math.ceil(len(tr) / a.batch_size)
    total = a.max_steps if a.max_steps > 0 else math.ceil(a.epochs * batches_per_epoch)
    opt = optimizer_for(model, a.lr, a.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, int(math.ceil(a.warmup_ratio * total)), total)
    g = torch.Generator().manual_seed(a.seed)
    step = 0
    model.train()
    while step < total:
        order = torch.randperm(len(tr), generator=g).tolist()
        for i in range(0, len(order), a.batch_size):
            if step >= total:
                break
            b = [tr[j] for j in order[i:i + a.batch_size]]
            ids, tt, am = pad(b, pad_id)
            if a.task == "token-classification":
                lab = torch.full(ids.shape, -100, dtype=torch.long)
                for k, e in enumerate(b):
                    lab[k, :len(e[2])] = torch.tensor(e[2])
            else:
                lab = torch.tensor([e[2] for e in b], dtype=torch.float32 if a.task == "regression" else torch.long)
            loss = model(input_ids=ids, token_type_ids=tt, attention_mask=am, labels=lab).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
    train_s = time.time() - t0
    model.eval()
    result = {"steps": step, "train_seconds": round(train_s, 1), "transformers": __import__("transformers").__version__,
              "torch": torch.__version__}
    with torch.no_grad():
        if a.task == "token-classification":
            from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
            truth, pred = [], []
            for i in range(0, len(dv), 64):
                b = dv[i:i + 64]
                ids, tt, am = pad(b, pad_id)
                arg = model(input_ids=ids, token_type_ids=tt, attention_mask=am).logits.argmax(-1)
                for k, e in enumerate(b):
                    words, labels = dev[i + k]
                    p, prev = ["O"] * len(words), None
                    for pos, w in enumerate(e[3]):
                        if w is not None and w != prev:
                            p[w] = names[int(arg[k, pos])]
                        prev = w
                    truth.append(labels)
                    pred.append(p)
            result.update(precision=precision_score(truth, pred), recall=recall_score(truth, pred),
                          f1=f1_score(truth, pred), accuracy=accuracy_score(truth, pred))
        elif a.task == "sequence-classification":
            probs = []
            for i in range(0, len(dv), 64):
                b = dv[i:i + 64]
                ids, tt, am = pad(b, pad_id)
                probs += torch.softmax(model(input_ids=ids, token_type_ids=tt, attention_mask=am).logits.double(),
                                       -1).tolist()
            correct = sum(int(max(range(2), key=lambda j: p[j]) == e[2]) for p, e in zip(probs, dv))
            result.update(accuracy=correct / len(dv))
        else:
            from scipy.stats import pearsonr, spearmanr
            ys, ps = [], []
            for i in range(0, len(dv), 64):
                b = dv[i:i + 64]
                ids, tt, am = pad(b, pad_id)
                ps += model(input_ids=ids, token_type_ids=tt, attention_mask=am).logits[:, 0].tolist()
                ys += [e[2] for e in b]
            result.update(pearson=float(pearsonr(ps, ys)[0]), spearmanr=float(spearmanr(ps, ys)[0]))
    if a.save:
        model.save_pretrained(a.save)  # a PeftModel writes only its adapter
        tok.save_pretrained(a.save)
        if a.task == "sequence-classification":
            with open(a.save + "/dev_probabilities.json", "w") as f:
                json.dump(probs, f)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())

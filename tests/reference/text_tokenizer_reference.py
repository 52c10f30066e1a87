#!/usr/bin/env python3
"""Golden results from transformers for tests/test_text_tokenizer.cpp: what a
training script sees from AutoTokenizer on a model directory.

    text_tokenizer_reference.py --model DIR --data KILN_DATA --output out.json
        [--from-xlmr tokenizer.json | --from-gpt2 DIR]

With --from-*, first builds XLMRobertaTokenizerFast from XLM-R's
tokenizer.json (or GPT2TokenizerFast with add_prefix_space=True, as run_ner
makes it, from vocab.json + merges.txt) and saves it into --model with
save_pretrained, as a model directory on the hub holds it. This venv's
`tokenizers` (0.15) predates the Metaspace fields "prepend_scheme" and
"split" of the shared tokenizer.json; --from-xlmr writes the older
spelling of the same pre-tokenizer ("add_prefix_space": true) first.

Writes {"roles": {unk, cls, sep, pad, mask: id or -1}, "vocab_size":
len(tokenizer), "single": [ids of tokenizer(line, truncation=True,
max_length=24)], "pairs": [the same for (line, next line)], "words":
[{"ids", "first"}] for CoNLL-2003 sentences with is_split_into_words=True,
"first" being the word index on each word's first token and -1 elsewhere}.
"""
import argparse
import json
import os

from transformers import AutoTokenizer, GPT2TokenizerFast, XLMRobertaTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--from-xlmr")
    ap.add_argument("--from-gpt2")
    args = ap.parse_args()
    if args.from_xlmr:
        with open(args.from_xlmr, encoding="utf-8") as f:
            j = json.load(f)
        for part in ("pre_tokenizer", "decoder"):
            m = j[part]
            assert m["type"] == "Metaspace" and m.get("prepend_scheme") == "always" and m.get("split", True), m
            j[part] = {"type": "Metaspace", "replacement": m["replacement"], "add_prefix_space": True}
        os.makedirs(args.model, exist_ok=True)
        old = os.path.join(args.model, "source_tokenizer.json")
        with open(old, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        XLMRobertaTokenizerFast(tokenizer_file=old).save_pretrained(args.model)
        os.remove(old)
    if args.from_gpt2:
        GPT2TokenizerFast(vocab_file=f"{args.from_gpt2}/vocab.json", merges_file=f"{args.from_gpt2}/merges.txt",
                          add_prefix_space=True).save_pretrained(args.model)
    tok = AutoTokenizer.from_pretrained(args.model)
    with open(f"{args.data}/wikitext-2/valid.txt", encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip()][:60]
    sentences, words = [], []
    with open(f"{args.data}/conll2003/dev.txt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("-DOCSTART-"):
                if words:
                    sentences.append(words)
                    words = []
                if len(sentences) == 40:
                    break
                continue
            words.append(line.split()[0])

    def role(name):
        i = getattr(tok, name + "_token_id")
        return -1 if i is None else i

    out = {
        "roles": {r: role(r) for r in ("unk", "cls", "sep", "pad", "mask")},
        "vocab_size": len(tok),
        "single": [tok(l, truncation=True, max_length=24)["input_ids"] for l in lines],
        "pairs": [tok(a, b, truncation=True, max_length=24)["input_ids"] for a, b in zip(lines, lines[1:])],
        "lines": lines,
        "sentences": sentences,
        "words": [],
    }
    for s in sentences:
        e = tok(s, is_split_into_words=True)
        first, seen = [], set()
        for w in e.word_ids():
            first.append(-1 if w is None or w in seen else w)
            if w is not None:
                seen.add(w)
        out["words"].append({"ids": e["input_ids"], "first": first})
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()

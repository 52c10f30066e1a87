#!/usr/bin/env python3
"""Golden encodings from Hugging Face `tokenizers` for tests/test_tok_hf.cpp.

Loads --tokenizer (a tokenizer.json), reads --input as bytes split on b"\\n"
(each line decoded as UTF-8 with U+FFFD replacement; with --pairs each line
is "A<TAB>B"), and writes one JSON object per line to --output: the
Encoding's ids, type_ids, tokens, offsets (characters), special_tokens_mask,
attention_mask, word_ids and sequence_ids (null -> -1), the number of
overflowing windows and their ids, and decode(ids) with and without
skip_special_tokens. An input HF refuses gives {"error": message}.
"""
import argparse
import json

from tokenizers import Tokenizer


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [line.decode("utf-8", errors="replace") for line in lines]


def none_to(v):
    return [-1 if x is None else x for x in v]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--pairs", action="store_true")
    ap.add_argument("--no-special", action="store_true")
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    lines = read_lines(args.input)
    with open(args.output, "w", encoding="utf-8") as out:
        for line in lines:
            try:
                if args.pairs:
                    a, b = line.split("\t", 1)
                    e = tok.encode(a, b, add_special_tokens=not args.no_special)
                else:
                    e = tok.encode(line, add_special_tokens=not args.no_special)
            except Exception as err:  # HF refuses this input (e.g. truncation)
                out.write(json.dumps({"error": str(err)}) + "\n")
                continue
            rec = {
                "ids": e.ids,
                "type_ids": e.type_ids,
                "tokens": e.tokens,
                "offsets": [list(o) for o in e.offsets],
                "special_tokens_mask": e.special_tokens_mask,
                "attention_mask": e.attention_mask,
                "word_ids": none_to(e.word_ids),
                "sequence_ids": none_to(e.sequence_ids),
                "overflowing": [o.ids for o in e.overflowing],
                "decoded": tok.decode(e.ids, skip_special_tokens=True),
                "decoded_all": tok.decode(e.ids, skip_special_tokens=False),
            }
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

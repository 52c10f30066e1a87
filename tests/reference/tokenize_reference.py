#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers` for kiln's tokenizer tests.

Builds BertWordPieceTokenizer(vocab, lowercase=not --cased) (the same pipeline
as transformers' BertTokenizerFast on a vocab.txt) and writes a golden file
that tests/test_tokenizer*.cpp compare against, line for line.

Input files are read as bytes, split on b"\\n" (a final newline does not start
another line) and each line is decoded as UTF-8 with U+FFFD replacement.

Modes (output: one line per input item):
  lines   ids of each line (or of tab-separated --column K), with [CLS]/[SEP]
  pairs   pair i = (text[i], text[i+1]) for i in 0..--count-1, encoded with
          --max-length (longest_first) and --pad-to; prints
          "ids|type_ids|attention_mask", each space-separated
  decode  each input line holds space-separated ids; prints
          tokenizer.decode(ids, skip_special_tokens=--skip-special)
  sweep   every Unicode scalar value, 256 per line as "x{c}y x{c}y ...";
          prints the normalized pre-tokenized words, each as UTF-8 hex,
          space-separated (no input file)
"""
import argparse
import os
import sys

from tokenizers import BertWordPieceTokenizer


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [line.decode("utf-8", errors="replace") for line in lines]


def column(lines, k):
    if k is None:
        return lines
    out = []
    for line in lines:
        fields = line.split("\t")
        out.append(fields[k] if k < len(fields) else "")
    return out


def join(ids):
    return " ".join(str(i) for i in ids)


def sweep_blocks():
    for start in range(0, 0x110000, 256):
        chars = [chr(c) for c in range(start, start + 256) if not 0xD800 <= c < 0xE000]
        if chars:
            yield " ".join("x" + c + "y" for c in chars)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", required=True)
    p.add_argument("--mode", choices=["lines", "pairs", "decode", "sweep"], required=True)
    p.add_argument("--input")
    p.add_argument("--output", required=True)
    p.add_argument("--cased", action="store_true")
    p.add_argument("--column", type=int)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--max-length", type=int, default=0)
    p.add_argument("--pad-to", type=int, default=0)
    p.add_argument("--skip-special", type=int, default=1)
    args = p.parse_args()

    tok = BertWordPieceTokenizer(args.vocab, lowercase=not args.cased)
    out = []
    if args.mode == "lines":
        texts = column(read_lines(args.input), args.column)
        out = [join(e.ids) for e in tok.encode_batch(texts)]
    elif args.mode == "pairs":
        texts = column(read_lines(args.input), args.column)
        count = min(args.count, len(texts) - 1)
        if args.max_length > 0:
            tok.enable_truncation(max_length=args.max_length, strategy="longest_first")
        if args.pad_to > 0:
            tok.enable_padding(length=args.pad_to, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
        pairs = [(texts[i], texts[i + 1]) for i in range(count)]
        for e in tok.encode_batch(pairs):
            out.append("|".join([join(e.ids), join(e.type_ids), join(e.attention_mask)]))
    elif args.mode == "decode":
        for line in read_lines(args.input):
            ids = [int(x) for x in line.split()]
            out.append(tok.decode(ids, skip_special_tokens=bool(args.skip_special)))
    else:
        normalizer = tok.normalizer
        pre = tok.pre_tokenizer
        for text in sweep_blocks():
            words = pre.pre_tokenize_str(normalizer.normalize_str(text))
            out.append(" ".join(w.encode("utf-8").hex() for w, _ in words))

    tmp = f"{args.output}.tmp-{os.getpid()}"  # atomic for parallel test processes
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in out:
            f.write(line + "\n")
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

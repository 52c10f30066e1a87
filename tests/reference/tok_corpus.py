#!/usr/bin/env python3
"""The texts kiln's tokenizer differential tests encode (tests/test_tok_hf.cpp).

Writes one text per line (UTF-8) to --output: real lines from WikiText-2
valid, SST-2 dev, CoNLL-2003 dev sentences (tokens joined by spaces) and the
STS-B dev sentence pairs, then adversarial strings (emoji and ZWJ
sequences, combining marks, zero-width and control characters, CJK, Arabic,
Devanagari, runs of spaces, added-token look-alikes) and one 1 MB line.
With --pairs, writes "A<TAB>B" lines instead (STS-B pairs, then adjacent
WikiText-2 lines).
"""
import argparse
import os


def lines_of(path, limit):
    out = []
    with open(path, "rb") as f:
        for raw in f:
            line = raw.rstrip(b"\n").decode("utf-8", errors="replace")
            if line.strip():
                out.append(line)
            if len(out) >= limit:
                break
    return out


def conll(path, limit):
    out, words = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                if words:
                    out.append(" ".join(words))
                    words = []
                if len(out) >= limit:
                    break
                continue
            if not line.startswith("-DOCSTART-"):
                words.append(line.split(" ")[0])
    return out


def tsv_column(path, col, limit, skip_header=True):
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if skip_header and i == 0:
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) > col:
                out.append(parts[col])
            if len(out) >= limit:
                break
    return out


ADVERSARIAL = [
    "",
    " ",
    "   leading and trailing   ",
    "tabs\tand\u000bvertical\u000cfeeds\rcarriage",
    "emoji 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 keycap 1️⃣ heart ❤️",
    "combining e\u0301 a\u0300\u0316 stacked z\u0361\u035c\u0353\u0334 o\u0308\u0304",
    "zero\u200bwidth\u200cjoin\u200dmarks\ufeffbom\u2060wj",
    "controls \u0000 \u0001 \u001f \u007f \u0085 \u00ad soft hyphen",
    "中文字符测试，标点符号。日本語のテキスト、カタカナ。한국어 텍스트",
    "العربية نص مع أرقام ١٢٣ وتشكيل مُشَكَّل",
    "हिन्दी पाठ देवनागरी में क्षत्रिय",
    "fullwidth ＡＢＣ１２３ ｶﾀｶﾅ ligature ﬁ ﬂ ℌ ① ㎏",
    "          many spaces          between          words          ",
    "new\n\nlines are not here but\u2028line\u2029para separators",
    "can't won't it's I'm you're they've we'd she'll 's 'S 'LL",
    "numbers 1234567890 3.14159 1,000,000 -42 +7 1e10 ٣٤",
    "punct!!! ??? ... --- ((())) [[]] {{}} <<>> ''' \"\"\" ``` ~~~ @@@ ### $$$ %%%",
    "URLs https://example.com/path?q=1&r=2#frag and emails a.b@c.de",
    "Ǆ ǅ ǆ İstanbul ΣΑΣ σας ß ẞ ŉ Å Å Ω Ω",
    "[CLS] [SEP] [MASK] <s> </s> <pad> <unk> <mask> <|endoftext|> lookalikes",
    "a<|endoftext|>b <|endoftext|><|endoftext|> [MASK][MASK]x",
    "surrogate-ish \ufffd replacement \ufffd\ufffd",
    "▁metaspace▁chars ▁ ▁▁ Ġbyte Ċlevel",
    "mixed Café naïve résumé coöperate Zürich Ångström",
    "\U0001F600\U0001F4A9\U00010348\U0002070E astral",
    "x" * 300,
    "supercalifragilisticexpialidocious" * 5,
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--pairs", action="store_true")
    ap.add_argument("--no-long", action="store_true", help="omit the 1 MB line")
    args = ap.parse_args()
    d = args.data
    if args.pairs:
        a = tsv_column(os.path.join(d, "stsb/dev.tsv"), 7, args.limit)
        b = tsv_column(os.path.join(d, "stsb/dev.tsv"), 8, args.limit)
        texts = [x + "\t" + y for x, y in zip(a, b)]
        wiki = lines_of(os.path.join(d, "wikitext-2/valid.txt"), args.limit + 1)
        texts += [wiki[i] + "\t" + wiki[i + 1] for i in range(len(wiki) - 1)]
    else:
        texts = lines_of(os.path.join(d, "wikitext-2/valid.txt"), args.limit)
        texts += tsv_column(os.path.join(d, "sst2/dev.tsv"), 0, args.limit)
        texts += conll(os.path.join(d, "conll2003/dev.txt"), args.limit)
        texts += tsv_column(os.path.join(d, "stsb/dev.tsv"), 7, args.limit)
        texts += ADVERSARIAL
        if not args.no_long:
            texts.append(("The quick brown fox jumps over the lazy dog. 日本語 👍 " * 20000)[:1 << 20])
    texts = [t.replace("\n", " ") for t in texts]
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        for t in texts:
            f.write(t + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden pre-tokenizations from HF `tokenizers` (tests/test_tok_pre_tokenizers.cpp).

Writes JSON lines to --output:
  {"texts": [...]}                                     the inputs, first line
  {"config": C, "texts": [i...], "results": [R...]}    one per pre-tokenizer
  {"config": C, "load_error": "..."}                   configs HF rejects
where C is the "pre_tokenizer" object of a tokenizer.json, each R is either
[[piece, start, end], ...] (HF's pre_tokenize_str: the normalized piece and
its *character* offsets in the input) or {"error": "..."} when HF fails
(a Rust panic, as on Oniguruma's retry limit, included).

Texts: real lines (WikiText-2 valid, SST-2 dev, CoNLL-2003 dev, STS-B dev,
through tok_corpus.py) and adversarial strings (tok_corpus.ADVERSARIAL plus
newline and contraction cases below), a 1 MB line for a few configs.
"""
import argparse
import json
import os
import sys

os.environ["RUST_BACKTRACE"] = "0"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

EXTRA = [
    "Hello there\nHello there",
    "line one\n\nline two\r\n\r\nthree \n four\n",
    "\n\n\n",
    "  \n  \n  x",
    "trailing spaces     ",
    " " * 50 + "x" + "\n" * 30 + "y" + "\t" * 10,
    "'s 's's ''s 'S 'll'll x'd 're've'm 't't",
    "don't I'll you've they're he's we'd I'm it'll  's",
    "'",
    "''",
    "a'",
    "'x",
    "’s curly ’ll apostrophes",
    "12345 1 22 333 4444 ²³ ½ Ⅻ ٣٤٥ ५६ 一二三",
    "x1y2z3 a12b 3.5e-7 0x1F",
    "\u200b\u200b\u200d\u200c",
    "e\u0301\u0301\u0301 \u0301 \u0301x",
    "\u0085next line\u00a0nbsp\u2007figure\u3000ideo\u1680ogham",
    "▁▁leading▁metaspace ▁ x▁",
    "_under_score_ __dunder__",
    "a.b.c a..b ... .",
    "(x) [y] {z} a|b ^$ #& -~ \\",
    "aaaaab aab ab b",
    "👨‍👩‍👧‍👦👍🏽🇫🇷",
    "日本語のテキストと漢字カタカナー",
    "ab",
    "a",
    " ",
    "\t",
]


def pre_tokenizer(cfg):
    j = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": cfg, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"},
    }
    return Tokenizer.from_str(json.dumps(j)).pre_tokenizer


def bl(apz, trim=True, use_regex=None):
    c = {"type": "ByteLevel", "add_prefix_space": apz, "trim_offsets": trim}
    if use_regex is not None:
        c["use_regex"] = use_regex
    return c


def ms(scheme=None, split=None, replacement="\u2581", apz=None):
    c = {"type": "Metaspace", "replacement": replacement}
    if scheme is not None:
        c["prepend_scheme"] = scheme
    if split is not None:
        c["split"] = split
    if apz is not None:
        c["add_prefix_space"] = apz
    return c


def split(pattern, behavior, invert=False, kind="Regex"):
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": invert}


GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]

CONFIGS = [
    {"type": "BertPreTokenizer"},
    bl(False), bl(True, False), bl(True, True, False), bl(False, True, False), bl(False, False, True),
    ms(), ms("first"), ms("never"), ms("always", False), ms("first", False), ms("never", False),
    ms(replacement="_", apz=True), ms(replacement=" "), ms("first", True, apz=True),
    {"type": "Whitespace"}, {"type": "WhitespaceSplit"},
    {"type": "Punctuation"},
] + [{"type": "Punctuation", "behavior": b} for b in BEHAVIORS] + [
    {"type": "Digits", "individual_digits": True}, {"type": "Digits", "individual_digits": False},
    split(GPT2, "Isolated"), split(LLAMA3, "Isolated"), split(LLAMA3, "Removed", True),
    split(r"\s+", "Removed"), split(r"\s+", "MergedWithPrevious", True),
    split(r"\s+", "MergedWithNext"), split(r"\d", "Contiguous"), split(r"\p{P}", "Isolated", True),
    split("", "Isolated"), split("", "Removed"), split("", "MergedWithNext", True),
    split(r"(?=a)", "Isolated"), split(r"\b", "Isolated"), split(r"a*", "Isolated"),
    split(r"a*?", "MergedWithPrevious"), split(r"$", "Isolated"), split(r"^|$", "MergedWithNext"),
    split(r"(?<=\s)", "Isolated"), split(r"\X", "Isolated"), split(r"[[:alpha:]]+", "Contiguous"),
    split(" ", "MergedWithNext", kind="String"), split("", "Isolated", kind="String"),
    split(".", "Removed", kind="String"), split("a.b", "Isolated", kind="String"),
    split("(x) [y] {z} a|b ^$ #& -~ \\", "Isolated", kind="String"),
    split("'s", "MergedWithPrevious", kind="String"), split("▁", "Removed", True, kind="String"),
    {"type": "CharDelimiterSplit", "delimiter": " "}, {"type": "CharDelimiterSplit", "delimiter": "e"},
    {"type": "CharDelimiterSplit", "delimiter": "\u2581"},
    {"type": "FixedLength", "length": 3}, {"type": "FixedLength"}, {"type": "FixedLength", "length": 1},
    {"type": "Sequence", "pretokenizers": []},
    {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, ms("first")]},
    {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, ms("always")]},
    {"type": "Sequence", "pretokenizers": [split(LLAMA3, "Isolated"), bl(False, True, False)]},
    {"type": "Sequence", "pretokenizers": [{"type": "Punctuation"}, {"type": "Digits", "individual_digits": True},
                                           {"type": "Sequence", "pretokenizers": [ms("first", True)]}]},
    {"type": "Sequence", "pretokenizers": [bl(True), {"type": "Whitespace"}]},
]

# Configs also run on the 1 MB line.
LONG = [bl(True), ms(), {"type": "Whitespace"}, split(LLAMA3, "Isolated")]

# Oniguruma's per-match retry limit: HF panics.
CATASTROPHIC = [(split(r"(a+)+$", "Isolated"), "a" * 30 + "b"), (split(r"(x+x+)+y", "Removed"), "x" * 26)]

LOAD_ERRORS = [
    {"type": "Bogus"}, {"type": "Digits"}, {"type": "ByteLevel"}, {"type": "ByteLevel", "add_prefix_space": True},
    {"type": "ByteLevel", "add_prefix_space": 1, "trim_offsets": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": None},
    ms(apz=False), ms("First"), ms(replacement=""), ms(replacement="ab"), {"type": "Metaspace"},
    {"type": "Punctuation", "behavior": "isolated"}, {"type": "Punctuation", "behavior": None},
    {"type": "Split", "pattern": {"String": "a"}, "behavior": "Isolated"},
    {"type": "Split", "pattern": "a", "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"String": "a", "Regex": "b"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Glob": "a"}, "behavior": "Isolated", "invert": False},
    split("(", "Isolated"), split(r"\p{Foo}", "Isolated"), split("a", "Sideways"),
    {"type": "CharDelimiterSplit", "delimiter": "ab"}, {"type": "CharDelimiterSplit"},
    {"type": "Sequence"}, {"type": "Sequence", "pretokenizers": [{"type": "Foo"}]},
    {"type": "Sequence", "pretokenizers": {"type": "Whitespace"}},
    {"type": "FixedLength", "length": -1}, {"type": "FixedLength", "length": 2.5}, {"type": 3}, {},
]


def run(pt, text):
    try:
        return [[p, s, e] for p, (s, e) in pt.pre_tokenize_str(text)]
    except BaseException as ex:  # a Rust panic is a BaseException
        return {"error": str(ex)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--limit", type=int, default=100)
    args = ap.parse_args()
    d, n = args.data, args.limit
    texts = tok_corpus.lines_of(os.path.join(d, "wikitext-2/valid.txt"), n)
    texts += tok_corpus.tsv_column(os.path.join(d, "sst2/dev.tsv"), 0, n)
    texts += tok_corpus.conll(os.path.join(d, "conll2003/dev.txt"), n)
    texts += tok_corpus.tsv_column(os.path.join(d, "stsb/dev.tsv"), 7, n)
    texts += tok_corpus.ADVERSARIAL + EXTRA
    normal = list(range(len(texts)))
    texts.append(("The quick brown fox's jumps 'll over\n the lazy dog. 日本語 👍  1234 \u0301 " * 20000)[:1 << 20])
    long_index = len(texts) - 1
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        def emit(obj):
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")

        emit({"texts": texts + [t for _, t in CATASTROPHIC]})
        for cfg in CONFIGS:
            pt = pre_tokenizer(cfg)
            idx = normal + ([long_index] if cfg in LONG else [])
            emit({"config": cfg, "texts": idx, "results": [run(pt, texts[i]) for i in idx]})
        for k, (cfg, text) in enumerate(CATASTROPHIC):
            r = run(pre_tokenizer(cfg), text)
            assert isinstance(r, dict), "HF no longer fails on %r" % cfg
            emit({"config": cfg, "texts": [len(texts) + k], "results": [r]})
        for cfg in LOAD_ERRORS:
            try:
                pre_tokenizer(cfg)
            except BaseException as ex:
                emit({"config": cfg, "load_error": str(ex)})
                continue
            raise SystemExit("HF accepts %r" % (cfg,))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden normalizer outputs from Hugging Face `tokenizers` for
tests/test_tok_normalizers.cpp.

--mode texts (default): writes JSON lines to --output:
  {"config": i, "json": <the "normalizer" object>}   for every config below
  {"text": k, "value": "..."}                         for every input text
  {"c": i, "t": k, "norm": "...", "al": [b0, e0, b1, e1, ...]}
where "al" holds, for each code point of the normalized text, the byte span
of the input it comes from (HF's alignments, read back through
PreTokenizedString.get_splits(offset_type="byte") after splitting the
normalized text into single code points), or {"c": i, "t": k, "error": "..."}
when HF fails. Texts: real lines of WikiText-2, SST-2, CoNLL-2003 and STS-B
(tok_corpus.py, --limit each) and adversarial strings.
--mode codepoints: writes "C<TAB>i<TAB><json>" for each of a few configs,
then for each config and every checked code point (checked() below),
"i<TAB>first<TAB>last<TAB>hex hex ..." lines for the
code points whose normalize_str(chr(c)) differs from chr(c), runs of
consecutive code points that all normalize to "" merged into one line.
"""
import argparse
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_corpus  # noqa: E402

from tokenizers import PreTokenizedString, Regex, Tokenizer, pre_tokenizers  # noqa: E402

EXTRA = [
    "Ｆｕｌｌ－ｗｉｄｔｈ　ｆｏｒｍｓ：ＡＢＣ ａｂｃ ０１２３ ！？ ｡｢｣､ ﾊﾝｶｸ ｶﾞｷﾞ",
    "ZWJ 👩‍❤️‍💋‍👨 👨🏿‍🦲 🏳️‍🌈 🧑🏽‍🤝‍🧑🏻 skin 👋🏻👋🏼👋🏽👋🏾👋🏿 tags 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "marks out of order a\u0301\u0316 a\u0316\u0301 o\u0328\u0304 q\u0307\u0323 \u1e0b\u0323 \u0301\u0301lead",
    "precomposed \u00e1\u0316 \u1e69 \u01d5 \u1fb3\u0301 \u0390 \u1e9b\u0323 \ufb01\u0301 \uff21\u0301",
    "hangul 한국어 \u1100\u1161\u11a8 \uac00\u11a7 \u1100\u1161 \u3131\u314f",
    "ligatures ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ Ĳ ĳ ǅ ǈ ǋ ㍱ ㎒ ㏒ ℡ ™ ℻ ½ ⅞ ² ₃ ⁱ",
    "controls\u0000\u0001\u0002\u0007\u0008\u000b\u000c\u000e\u001b\u007f\u0080\u008f\u009f\u00ad\u200b\u200e\u202e\u2066\ufeff\ufffd",
    "zero width \u200b\u200c\u200d\u2060\u180e\u00ad ends\u200b",
    "spaces\u00a0\u1680\u2000\u2001\u2002\u2003\u2007\u200a\u202f\u205f\u3000\u0085\u2028\u2029|",
    "     ",
    "\t\n\r\u000b\u000c  \n\n\n lines  \n",
    "\n\n\n\n\n\n\n\n",
    " " * 40 + "runs" + " " * 33 + "\u3000" * 5,
    "Arabic ﻻ ﷺ ﷽ ٠١٢ ـــ ة ى ۰۱ ﭐ ﹰ مُحَمَّد",
    "Devanagari क्ष त्र ज्ञ श्र क़ ख़ ड़ ँ ं ः ऽ ॐ ॰ १२३ ि ी",
    "Thai ำน\u0e49ำ3ลำ Lao ຳ Tibetan ཱི ཱུ ྲཱྀ Khmer ្ក",
    "CJK 中文 日本語 汉字 㐀 𠀀 𪜀 豈 丽 ⺀ ⼀ 〇 ㊀ ㍻",
    "Greek ΐ ΰ ά έ ή ί ό ύ ώ Ά ᾼ ῼ ϐ ϑ ϒ ϕ ϖ ϰ ϱ ϲ ϴ ϵ ς Σ",
    "İIıi ẞß Ǳǲǳ ǅ ᾈ ᾉ ῼ Ω K Å ℵ ℏ Ⅻ ⅻ Ⓐ ⓐ 𝔄 𝔞 𝐀 𝟎",
    "replace me: aaa bab abba   baaab  a",
    "a",
    "ab",
    "\u0301",
    "\u0301a",
    "\u00e9",
    "e\u0301",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\U00010000\U0010FFFD\U000E0001\U000F0000 planes",
    "\u0378\u0379\u05ff\U0001FFFF\U000EFFFF unassigned",
]
# Code points added to Unicode after HF's tables (or, for lowercase, after
# utf8proc's) are left out here: the codepoints mode covers them one by one.


def configs(charsmap_b64):
    pc = {"type": "Precompiled", "precompiled_charsmap": charsmap_b64}
    xlmr = {"type": "Sequence", "normalizers": [
        pc, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    return [
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": None, "lowercase": True},
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": None, "lowercase": False},
        {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False,
         "strip_accents": True, "lowercase": False},
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False,
         "strip_accents": False, "lowercase": True},
        {"type": "NFD"},
        {"type": "NFKD"},
        {"type": "NFC"},
        {"type": "NFKC"},
        {"type": "Lowercase"},
        {"type": "StripAccents"},
        {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"}]},
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Strip", "strip_left": True, "strip_right": False},
        {"type": "Strip", "strip_left": False, "strip_right": True},
        {"type": "Nmt"},
        {"type": "Replace", "pattern": {"String": "  "}, "content": " "},
        {"type": "Replace", "pattern": {"String": ""}, "content": "_"},
        {"type": "Replace", "pattern": {"String": "a"}, "content": ""},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"},
        {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": "(?<=a)b|b*"}, "content": "XYZ"},
        {"type": "Replace", "pattern": {"Regex": "[aeioué]"}, "content": ""},
        {"type": "Prepend", "prepend": "▁"},
        {"type": "ByteLevel"},
        pc,
        xlmr,
        {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
            {"type": "Replace", "pattern": {"String": "''"}, "content": "\""},
            {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            {"type": "Prepend", "prepend": "▁"}]},
        {"type": "Sequence", "normalizers": [
            {"type": "Strip", "strip_left": True, "strip_right": True}, {"type": "NFC"},
            {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "ByteLevel"}]}]},
        {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, {"type": "NFKC"}]},
    ]


CODEPOINT_CONFIGS = [
    {"type": "NFD"}, {"type": "NFKD"}, {"type": "NFC"}, {"type": "NFKC"},
    {"type": "Lowercase"}, {"type": "StripAccents"},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False,
     "strip_accents": False, "lowercase": False},
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": False,
     "strip_accents": True, "lowercase": False},
]


def load_normalizer(cfg):
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": cfg, "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}
    return Tokenizer.from_str(json.dumps(j)).normalizer


SPLIT_ALL = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")


def aligned(norm, text):
    p = PreTokenizedString(text)
    p.normalize(lambda ns: norm.normalize(ns))
    normalized = "".join(s for s, _, _ in p.get_splits())
    SPLIT_ALL.pre_tokenize(p)
    al = []
    for _, (b, e), _ in p.get_splits(offset_referential="original", offset_type="byte"):
        al += [b, e]
    return normalized, al


def charsmap(data):
    path = os.path.join(data, "tokenizers/xlm-roberta/tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    for n in j["normalizer"]["normalizers"]:
        if n["type"] == "Precompiled":
            base64.b64decode(n["precompiled_charsmap"], validate=True)
            return n["precompiled_charsmap"]
    raise SystemExit("no Precompiled normalizer in " + path)


def texts(data, limit):
    d = data
    out = tok_corpus.lines_of(os.path.join(d, "wikitext-2/valid.txt"), limit)
    out += tok_corpus.tsv_column(os.path.join(d, "sst2/dev.tsv"), 0, limit)
    out += tok_corpus.conll(os.path.join(d, "conll2003/dev.txt"), limit)
    out += tok_corpus.tsv_column(os.path.join(d, "stsb/dev.tsv"), 7, limit)
    return out + tok_corpus.ADVERSARIAL + EXTRA


def mode_texts(args):
    cfgs = configs(charsmap(args.data))
    ts = texts(args.data, args.limit)
    with open(args.output, "w", encoding="utf-8") as out:
        for i, c in enumerate(cfgs):
            out.write(json.dumps({"config": i, "json": c}) + "\n")
        for k, t in enumerate(ts):
            out.write(json.dumps({"text": k, "value": t}) + "\n")
        for i, c in enumerate(cfgs):
            norm = load_normalizer(c)
            for k, t in enumerate(ts):
                try:
                    n, al = aligned(norm, t)
                    rec = {"c": i, "t": k, "norm": n, "al": al}
                except BaseException as e:  # pyo3 panics are BaseException
                    rec = {"c": i, "t": k, "error": str(e)}
                out.write(json.dumps(rec) + "\n")


def checked(c):
    """The code points compared (as checked() in the C++ test): planes 0-3
    and 14 whole, every 61st elsewhere; no surrogates."""
    if 0xD800 <= c < 0xE000:
        return False
    return c < 0x40000 or 0xE0000 <= c < 0xF0000 or c % 61 == 0 or c == 0x10FFFF


def mode_codepoints(args):
    cps = [c for c in range(0x110000) if checked(c)]
    with open(args.output, "w", encoding="utf-8") as out:
        for i, c in enumerate(CODEPOINT_CONFIGS):
            out.write("C\t%d\t%s\n" % (i, json.dumps(c)))
        for i, c in enumerate(CODEPOINT_CONFIGS):
            norm = load_normalizer(c)
            run = None  # [first, last] of removed code points
            for cp in cps:
                r = norm.normalize_str(chr(cp))
                if r == "" and run and run[1] == cp - 1:
                    run[1] = cp
                    continue
                if run:
                    out.write("%d\t%d\t%d\t\n" % (i, run[0], run[1]))
                    run = None
                if r == "":
                    run = [cp, cp]
                elif r != chr(cp):
                    out.write("%d\t%d\t%d\t%s\n" % (i, cp, cp, " ".join("%x" % ord(x) for x in r)))
            if run:
                out.write("%d\t%d\t%d\t\n" % (i, run[0], run[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--mode", choices=["texts", "codepoints"], default="texts")
    ap.add_argument("--limit", type=int, default=60)
    args = ap.parse_args()
    if args.mode == "texts":
        mode_texts(args)
    else:
        mode_codepoints(args)


if __name__ == "__main__":
    main()

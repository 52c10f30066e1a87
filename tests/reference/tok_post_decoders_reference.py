#!/usr/bin/env python3
"""Golden post-processing and decoding from HF `tokenizers` (tests/test_tok_post_decoders.cpp).

Writes JSON lines to --output:
  {"encodings": [E...]}                      inputs of the post-processors, first line
  {"token_lists": [[str...]...]}             inputs of the decoders, second line
  {"processor": C, "added": [n1, n2], "cases": [{"a": i, "b": j|null, "add": bool, "out": E|ERR}]}
  {"processor": C, "load_error": "..."}
  {"decoder": C, "results": [str|ERR...]}    one result per token list
  {"decoder": C, "load_error": "..."}
where C is the "post_processor" / "decoder" object of a tokenizer.json, E an
Encoding as {ids, type_ids, tokens, offsets, special_tokens_mask,
attention_mask, word_ids, sequence_ids, overflowing: [E...]} (None as -1,
offsets in characters as HF's Python API gives them) and ERR {"error": "..."}
where HF fails (a Rust panic included). Results are PostProcessor.process(a, b,
add_special_tokens) and Decoder.decode(tokens).

Encodings come from two tokenizers without a post-processor: BERT's WordPiece
(bert-base-uncased vocab, BertNormalizer, BertPreTokenizer) and GPT-2's
byte-level BPE, over real lines (WikiText-2 valid, SST-2 dev) and adversarial
strings, untruncated and truncated with a stride (so with overflowing windows).
Token lists are GPT-2's, XLM-R's and BERT's tokens of real and adversarial
lines, byte-fallback rewrites of them, cuts inside UTF-8 sequences, and
hand-made adversarial lists.
"""
import argparse
import contextlib
import json
import os
import sys

os.environ["RUST_BACKTRACE"] = "0"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_corpus  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers  # noqa: E402

BASE = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}


@contextlib.contextmanager
def quiet_stderr():
    """Rust panics print a message on fd 2; keep the test output clean."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def stage(key, cfg):
    j = dict(BASE)
    j[key] = cfg
    t = Tokenizer.from_str(json.dumps(j))
    return t.post_processor if key == "post_processor" else t.decoder


def enc_json(e):
    return {
        "ids": e.ids, "type_ids": e.type_ids, "tokens": e.tokens,
        "offsets": [list(o) for o in e.offsets],
        "special_tokens_mask": e.special_tokens_mask, "attention_mask": e.attention_mask,
        "word_ids": [-1 if w is None else w for w in e.word_ids],
        "sequence_ids": [-1 if s is None else s for s in e.sequence_ids],
        "overflowing": [enc_json(o) for o in e.overflowing],
    }


# ---- encodings -----------------------------------------------------------------------

def bert_tokenizer(vocab_path):
    vocab = {}
    with open(vocab_path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            vocab[line.rstrip("\n")] = i
    t = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return t


def gpt2_tokenizer(path):
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["post_processor"] = None
    return Tokenizer.from_str(json.dumps(j))


BYTE_LEVEL_TEXTS = ["  hello   world  ", "a   b", " x", "x ", "   ", "\u3000wide\u3000space", "tab\there",
                    "emoji 👍🏽 end", "日本語 テキスト"]


def make_encodings(data):
    wiki = tok_corpus.lines_of(os.path.join(data, "wikitext-2/valid.txt"), 6)
    sst = tok_corpus.tsv_column(os.path.join(data, "sst2/dev.tsv"), 0, 4)
    adv = ["", " ", "Hello, world!", "can't won't", "emoji 👍🏽 family 👨‍👩‍👧‍👦", "中文字符测试，标点符号。"]
    texts = [t.replace("\n", " ") for t in wiki + sst + adv]
    bert = bert_tokenizer(os.path.join(data, "vocab/bert-base-uncased-vocab.txt"))
    gpt2 = gpt2_tokenizer(os.path.join(data, "tokenizers/gpt2/tokenizer.json"))
    encodings, short, long_ = [], [], []  # short: few windows, for pairs
    for tok, extra in ((bert, []), (gpt2, BYTE_LEVEL_TEXTS)):
        for text in texts + extra:
            tok.no_truncation()
            e = tok.encode(text)
            encodings.append(e)
            if len(e.ids) <= 12:
                short.append(len(encodings) - 1)
            for max_length, stride in ((10, 3), (6, 0)):
                if len(e.ids) > 60 and max_length < 10:
                    continue
                tok.enable_truncation(max_length, stride=stride)
                t = tok.encode(text)
                if len(t.overflowing) == 0:
                    continue
                encodings.append(t)
                (short if len(t.overflowing) <= 3 else long_).append(len(encodings) - 1)
    return encodings, short, long_


# ---- post-processors --------------------------------------------------------------------

def seq(which, type_id=0):
    return {"Sequence": {"id": which, "type_id": type_id}}


def sp(name, type_id=0):
    return {"SpecialToken": {"id": name, "type_id": type_id}}


def specials(*entries):
    return {name: {"id": name, "ids": ids, "tokens": toks} for name, ids, toks in entries}


BERT_SPECIALS = specials(("[CLS]", [101], ["[CLS]"]), ("[SEP]", [102], ["[SEP]"]))
BERT_TEMPLATE = {"type": "TemplateProcessing",
                 "single": [sp("[CLS]"), seq("A"), sp("[SEP]")],
                 "pair": [sp("[CLS]"), seq("A"), sp("[SEP]"), seq("B", 1), sp("[SEP]", 1)],
                 "special_tokens": BERT_SPECIALS}
BERT = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}


def roberta(trim, apz):
    return {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
            "trim_offsets": trim, "add_prefix_space": apz}


def byte_level(trim, apz):
    return {"type": "ByteLevel", "add_prefix_space": apz, "trim_offsets": trim, "use_regex": True}


def template(single, pair, sp_):
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": sp_}


def sequence(*ps):
    return {"type": "Sequence", "processors": list(ps)}


LLAMA = template([sp("<|begin_of_text|>"), seq("A")],
                 [sp("<|begin_of_text|>"), seq("A"), sp("<|begin_of_text|>", 1), seq("B", 1)],
                 specials(("<|begin_of_text|>", [128000], ["<|begin_of_text|>"])))
MULTI = template([sp("[X]"), seq("A", 3), sp("[X]", 2)], [seq("B", 1), sp("[X]"), seq("A", 0), sp("[Y]", 5)],
                 specials(("[X]", [7, 8], ["x1", "x2"]), ("[Y]", [], [])))

PROCESSORS = [
    BERT, roberta(True, True), roberta(True, False), roberta(False, True), roberta(False, False),
    byte_level(True, True), byte_level(True, False), byte_level(False, True), byte_level(False, False),
    BERT_TEMPLATE, LLAMA, MULTI,
    template([seq("A"), seq("A", 1)], [seq("A"), sp("[SEP]"), seq("B", 1), seq("A", 2)], BERT_SPECIALS),
    template([sp("[CLS]")], [sp("[CLS]"), seq("B", 1)], BERT_SPECIALS),
    template([seq("B")], [seq("B"), seq("A")], {}),
    template([], [], {}),
    sequence(byte_level(True, True), BERT_TEMPLATE),
    sequence(byte_level(True, False), LLAMA),
    sequence(BERT_TEMPLATE, byte_level(True, True)),
    sequence(BERT, BERT),
    sequence(roberta(True, True), BERT_TEMPLATE),
    sequence(BERT_TEMPLATE, BERT_TEMPLATE),
    sequence(template([], [], {}), BERT),
    sequence(),
    sequence(sequence(byte_level(True, True)), BERT),
    # HF's untagged reading (Note [Post-processor JSON]).
    {"sep": ["[SEP]", 102], "cls": ["[CLS]", 101]},
    {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
    {"type": "Foo", "sep": ["a", 5], "cls": ["b", 6], "trim_offsets": False, "add_prefix_space": True},
    {"type": "BertProcessing", "sep": ["a", 5], "cls": ["b", 6], "trim_offsets": True, "add_prefix_space": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
    {"single": [seq("A")], "pair": [seq("A"), seq("B")], "special_tokens": {}},
]

PROCESSOR_LOAD_ERRORS = [
    {"type": "Foo"}, {}, {"type": "ByteLevel", "add_prefix_space": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": None},
    {"type": "ByteLevel", "add_prefix_space": "yes", "trim_offsets": True},
    {"type": "BertProcessing", "sep": ["[SEP]", 5.0], "cls": ["[CLS]", 4]},
    {"type": "BertProcessing", "sep": ["[SEP]", 5, 3], "cls": ["[CLS]", 4]},
    {"type": "BertProcessing", "sep": ["[SEP]", -1], "cls": ["[CLS]", 4]},
    {"type": "BertProcessing", "sep": [5, "[SEP]"], "cls": ["[CLS]", 4]},
    {"type": "BertProcessing", "sep": ["[SEP]", 102]},
    {"type": "TemplateProcessing", "single": ["$A"], "pair": [seq("A")], "special_tokens": {}},
    {"type": "TemplateProcessing", "single": [seq("A")], "pair": [seq("A")]},
    {"type": "TemplateProcessing", "single": [seq("C")], "pair": [seq("A")], "special_tokens": {}},
    {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}], "pair": [], "special_tokens": {}},
    {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}, "SpecialToken": {}}],
     "pair": [], "special_tokens": {}},
    {"type": "TemplateProcessing", "single": [], "pair": [], "special_tokens": {"X": {"id": "X", "ids": [1]}}},
    {"type": "TemplateProcessing", "single": [], "pair": [],
     "special_tokens": {"X": {"id": "X", "ids": [-1], "tokens": ["x"]}}},
    {"type": "TemplateProcessing", "single": [], "pair": [], "special_tokens": []},
    {"type": "Sequence"}, {"type": "Sequence", "processors": [{"type": "Foo"}]},
    {"type": "Sequence", "processors": {}},
]


def run_processor(cfg, encodings, single_idx, pair_idx):
    rec = {"processor": cfg}
    try:
        p = stage("post_processor", cfg)
    except BaseException as ex:  # a Rust panic is a BaseException
        rec["load_error"] = str(ex)[:300]
        return rec
    rec["added"] = [p.num_special_tokens_to_add(False), p.num_special_tokens_to_add(True)]
    cases = []
    for a, b in [(i, None) for i in single_idx] + pair_idx:
        for add in (True, False):
            try:
                with quiet_stderr():
                    out = p.process(encodings[a], None if b is None else encodings[b], add)
                r = enc_json(out)
            except BaseException as ex:
                r = {"error": str(ex)[:300]}
            cases.append({"a": a, "b": b, "add": add, "out": r})
    rec["cases"] = cases
    return rec


# ---- decoders ---------------------------------------------------------------------------

def token_lists(data):
    wiki = tok_corpus.lines_of(os.path.join(data, "wikitext-2/valid.txt"), 25)
    sst = tok_corpus.tsv_column(os.path.join(data, "sst2/dev.tsv"), 0, 15)
    adv = [t for t in tok_corpus.ADVERSARIAL if len(t) < 400]
    texts = [t.replace("\n", " ") for t in wiki + sst + adv]
    gpt2 = Tokenizer.from_file(os.path.join(data, "tokenizers/gpt2/tokenizer.json"))
    xlmr = Tokenizer.from_file(os.path.join(data, "tokenizers/xlm-roberta/tokenizer.json"))
    bert = bert_tokenizer(os.path.join(data, "vocab/bert-base-uncased-vocab.txt"))
    lists = []
    for tok in (gpt2, xlmr, bert):
        for t in texts:
            lists.append(tok.encode(t, add_special_tokens=False).tokens)
    # GPT-2 tokens cut inside UTF-8 sequences: drop the first / last token of
    # lines whose tokens carry multi-byte characters.
    for t in adv:
        toks = gpt2.encode(t).tokens
        if len(toks) > 1:
            lists += [toks[1:], toks[:-1], toks[::2]]
    # Byte fallback: XLM-R tokens with every third one spelled as <0xHH> tokens,
    # and with the bytes of each multi-byte token interleaved with a plain one.
    for t in texts[::3]:
        toks = xlmr.encode(t, add_special_tokens=False).tokens
        fb, broken = [], []
        for k, tk in enumerate(toks):
            bs = tk.encode("utf-8")
            if k % 3 == 0:
                fb += ["<0x%02X>" % b for b in bs]
            else:
                fb.append(tk)
            if len(bs) > len(tk):
                broken += ["<0x%02X>" % bs[0], "x"] + ["<0x%02x>" % b for b in bs[1:]]
            else:
                broken.append(tk)
        lists += [fb, broken]
    lists += [
        [], [""], ["", ""], ["", "a", ""], ["Ġ"], ["ĠĠ", "Ġ"], ["Ġhello", "Ġ", "world", "Ġ"],
        ["▁"], ["▁▁a▁", "▁b▁▁"], ["a▁b", "▁"], ["▁Hello", "▁", "world"],
        ["ä", "¸", "Ń"], ["ä¸"], ["Ġ", "ä¸", "x", "Ń"], ["ä¸Ń", "中", "Ġ"], ["hello world", "Ġx"],
        ["ðŁ", "ĳ", "į"], ["ðŁĳį"], ["Ā", "ā", "Ċ", "ĉ", "Ġ", "ÿ", "Ń", "ł"],
        ["<0xE4>", "<0xB8>", "<0xAD>"], ["<0xE4>", "<0xB8>"], ["<0xE4>", "<0xB8>", "a", "<0xAD>"],
        ["<0xFF>"], ["<0x80>", "<0x41>"], ["<0x41>", "<0x42>", "▁c", "<0x0A>"], ["<0x+A>", "<0x+a>"],
        ["<0xg1>", "<0x4>", "<0x041>", "<0x-1>", "<0XAB>", "<0x é>", "<0x41"], ["<0xe4>", "<0xb8>", "<0xad>"],
        ["<0xF0>", "<0x9F>", "<0x91>", "<0x8D>", "<0xF0>", "<0x9F>"], ["<0xC0>", "<0x80>", "<0xED>", "<0xA0>", "<0x80>"],
        ["<pad>", "h", "h", "<pad>", "e", "l", "l", "<pad>", "l", "o", "|", "w", "o", "|", "|", "d"],
        ["<pad>", "<pad>"], ["a<pad>b", "a<pad>b", "|"],
        ["hello", "##world", "##", "#", "##x", " .", "do", "not", "##n't", "'", "s", "?", "!", ","],
        ["i", "do not", "know", "'", "m", " 's", " 've", " 're", " n't", " ' "],
        ["word</w>", "piece</w>", "end</w>"], ["a</w>b</w>", "</w>"], ["ĠaĠ", "ĠbĠ"],
        ["  a", " b ", "", "   "], ["aa", "a", "b"], ["xxaxx", "x", "xxx"],
        ["tab\tsep", "new\nline", "\u3000wide"], ["a  b", "c   d"],
    ]
    return lists


def metaspace(scheme=None, apz=None, replacement="\u2581"):
    c = {"type": "Metaspace", "replacement": replacement, "split": True}
    if scheme is not None:
        c["prepend_scheme"] = scheme
    if apz is not None:
        c["add_prefix_space"] = apz
    return c


def strip(content, start, stop):
    return {"type": "Strip", "content": content, "start": start, "stop": stop}


def replace(kind, pattern, content):
    return {"type": "Replace", "pattern": {kind: pattern}, "content": content}


BYTE_LEVEL_DEC = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
LLAMA_DEC = {"type": "Sequence", "decoders": [replace("String", "\u2581", " "), {"type": "ByteFallback"},
                                              {"type": "Fuse"}, strip(" ", 1, 0)]}

DECODERS = [
    BYTE_LEVEL_DEC, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False},
    metaspace(), metaspace("first"), metaspace("never"), metaspace("always", True), metaspace("never", False),
    metaspace(replacement="_"), metaspace("never", replacement="a"),
    {"type": "WordPiece", "prefix": "##", "cleanup": True}, {"type": "WordPiece", "prefix": "##", "cleanup": False},
    {"type": "WordPiece", "prefix": "", "cleanup": True},
    {"type": "BPEDecoder", "suffix": "</w>"}, {"type": "BPEDecoder", "suffix": ""}, {"type": "BPEDecoder", "suffix": "Ġ"},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    strip(" ", 1, 0), strip("\u2581", 1, 0), strip("a", 2, 2), strip(" ", 0, 1), strip("x", 0, 100),
    strip("x", 100, 0), strip("a", 1, 1),
    replace("String", "\u2581", " "), replace("Regex", "\\s+", " "), replace("Regex", "a*", "-"),
    replace("String", "", "-"), replace("String", "a.b", "X"), replace("Regex", "(?<=a)b", "B"),
    {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
    {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": False},
    {"type": "CTC", "pad_token": "", "word_delimiter_token": "", "cleanup": True},
    LLAMA_DEC,
    {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace()]},
    {"type": "Sequence", "decoders": [{"type": "WordPiece", "prefix": "##", "cleanup": True},
                                      replace("Regex", " +", "_")]},
    {"type": "Sequence", "decoders": [BYTE_LEVEL_DEC, {"type": "Sequence", "decoders": [strip(" ", 1, 1)]}]},
    {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, BYTE_LEVEL_DEC]},
    {"type": "Sequence", "decoders": []},
    # HF's legacy untagged reading (Note [Decoder JSON]).
    {"suffix": "</w>"}, {"type": "Bogus", "prefix": "##", "cleanup": True},
    {"pattern": {"String": "a"}, "content": "b"}, {"content": " ", "start": 1, "stop": 0},
    {"type": 5, "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
    {"type": "Fuse", "extra": 1}, {"type": "ByteFallback", "x": [1]},
]

DECODER_LOAD_ERRORS = [
    {"type": "Bogus"}, {}, {"type": "ByteLevel"}, {"type": "ByteLevel", "add_prefix_space": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": None},
    metaspace(apz=False), metaspace("First"), metaspace(replacement=""), metaspace(replacement="ab"),
    {"type": "Metaspace"}, {"type": "Metaspace", "replacement": "_", "prepend_scheme": None},
    {"type": "Metaspace", "replacement": "_", "str_rep": 5},
    strip("ab", 1, 0), strip(" ", -1, 0), strip(" ", 1.5, 0), {"type": "Strip", "content": " ", "start": 1},
    replace("Regex", "(", "x"), replace("Foo", "a", "x"), {"type": "Replace", "pattern": {"String": "a"}},
    {"type": "Replace", "pattern": {"String": "a", "Regex": "b"}, "content": "x"},
    {"type": "WordPiece", "prefix": "##"}, {"type": "WordPiece", "prefix": 1, "cleanup": True},
    {"type": "CTC", "pad_token": "<pad>"}, {"type": "BPEDecoder"}, {"type": "BPEDecoder", "suffix": None},
    {"type": "Sequence"}, {"type": "Sequence", "decoders": [{"type": "Bogus"}]},
    {"type": "Sequence", "decoders": {}},
]


def run_decoder(cfg, lists):
    rec = {"decoder": cfg}
    try:
        d = stage("decoder", cfg)
    except BaseException as ex:
        rec["load_error"] = str(ex)[:300]
        return rec
    results = []
    for toks in lists:
        try:
            with quiet_stderr():
                results.append(d.decode(toks))
        except BaseException as ex:
            results.append({"error": str(ex)[:300]})
    rec["results"] = results
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    encodings, short, long_ = make_encodings(args.data)
    single_idx = list(range(len(encodings)))
    pairs = [(short[k], short[(k * 7 + 3) % len(short)]) for k in range(0, len(short), 2)]
    pairs += [(long_[k], short[k % len(short)]) for k in range(0, len(long_), 4)]
    pairs += [(short[k % len(short)], long_[k]) for k in range(2, len(long_), 4)]
    lists = token_lists(args.data)
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps({"encodings": [enc_json(e) for e in encodings]}) + "\n")
        f.write(json.dumps({"token_lists": lists}) + "\n")
        for cfg in PROCESSORS + PROCESSOR_LOAD_ERRORS:
            # A template naming $A twice multiplies windows: a few pairs of short ones.
            twice = sum(1 for p in cfg.get("pair", []) if p.get("Sequence", {}).get("id") == "A") > 1
            f.write(json.dumps(run_processor(cfg, encodings, short[:12] if twice else single_idx,
                                             pairs[:4] if twice else pairs)) + "\n")
        for cfg in DECODERS + DECODER_LOAD_ERRORS:
            f.write(json.dumps(run_decoder(cfg, lists)) + "\n")


if __name__ == "__main__":
    main()

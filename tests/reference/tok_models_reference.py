"""References for tests/test_tok_models.cpp: HF tokenizers' BPE, WordPiece and
WordLevel models (Model.tokenize of single pre-tokens).

usage: tok_models_reference.py --data DIR --workdir DIR --output OUT.json

OUT.json is {"models": [MODEL], "hostile": [HOSTILE]}.
MODEL: {"name", "source", "vocab_size", "cases": [[text, tokens]], "ids":
[[id, token or null]]} where tokens is [[id, value, begin, end], ...] from
Model.tokenize (offsets in bytes of text), or null when tokenize raised, and
"ids" samples Model.id_to_token. "source" says how kiln loads the model:
  {"json": PATH}                        the "model" of the tokenizer.json at PATH
  {"model": {...}}                      this "model" object
  {"vocab": PATH, "merges": PATH}       BPE.from_file (vocab.json + merges.txt)
  {"vocab_txt": PATH}                   WordPiece.from_file (vocab.txt)
Models:
  gpt2-json, gpt2-files   the real GPT-2 BPE, from its tokenizer.json and from
                          vocab.json + merges.txt; texts are the ByteLevel
                          pre-tokens of every WikiText-2 valid line and of
                          adversarial strings, plus the raw adversarial
                          strings (code points outside the byte alphabet are
                          dropped); the other models get their own
                          pre-tokenizer's first 5000 distinct pre-tokens of
                          the same texts, plus the raw adversarial strings;
  bpe-*                   BPE models trained here on WikiText-2 valid with
                          BpeTrainer: continuing_subword_prefix, end_of_word
                          suffix, both, SentencePiece-style byte_fallback,
                          ignore_merges (ByteLevel), unk with and without
                          fuse_unk, plus edited variants (byte_fallback with a
                          prefix and only some byte tokens, an unk token
                          missing from the vocabulary);
  random-bpe-*            small random BPE models over a few code points:
                          merges in random order, repeated pairs, different
                          pairs merging into one token, with and without a
                          prefix / suffix / unk / fuse_unk / byte_fallback;
  wordpiece-*             WordPieceTrainer on WikiText-2 valid (and variants
                          with a short max_input_chars_per_word, an empty
                          prefix), bert-base-uncased's vocab.txt;
  wordlevel-*             WordLevelTrainer on WikiText-2 valid, with and
                          without its unk token in the vocabulary.
HOSTILE: {"name", "model", "hf_ok", "hf_error", "kiln_rejects"}: model
objects tokenizers may refuse; kiln_rejects marks those HF accepts that kiln
refuses on purpose (dropout > 0, two tokens with one id, ids >= 2^31 - 1).
Runs with the project venv's tokenizers (0.23.3).
"""

import argparse
import json
import os
import random

from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def tokens_of(model, text):
    try:
        return [[t.id, t.value, t.offsets[0], t.offsets[1]] for t in model.tokenize(text)]
    except Exception:  # tokenizers raises a plain Exception (unk missing, ...)
        return None


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def adversarial():
    rng = random.Random(11)
    out = [
        "😀😂👍🏽❤️🇺🇸👩‍👩‍👧🏳️‍🌈", "你好世界我爱北京天安门", "مرحبا بالعالم", "नमस्ते दुनिया क़ ख़",
        "e\u0301\u0302\u0303\u0304", "\u0301\u0301\u0301", "\x00\x01\x1f\x7f\u0080\u009f",
        "\u200b\u200c\u200d\ufeff\u2028\u2029", "\ue000\U000f0000\U0010fffd\ufffd\uffff",
        "a" * 300, "ab" * 200, "aaaa" * 80 + "b", "😀" * 100, "the" * 120, "<unk><s></s>",
        "<0x41><0xE2>", "##a##b", "</w></w>", "\U0001d400\U0001d4ff\U0002a6df", "ＡＢＣ①②③ﬁﬂ",
        "ǅǈǋ", "İıẞß", "Ġ", "ĠĠĠĠ", "ĊĊ", "don't", "U.S.A.", "1,234.56", "#", "##", "[UNK]",
        "hello" * 70, "x" * 255, "y" * 256, "z" * 257,
    ]
    pool = [chr(c) for c in list(range(0x20, 0x7F)) + list(range(0xA0, 0x250)) +
            list(range(0x4E00, 0x4E30)) + list(range(0x1F600, 0x1F610)) + [0x301, 0x200D, 0x2581]]
    for _ in range(150):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
    return out


def pre_tokens(tok, texts, limit):
    seen, out = set(), []
    for line in texts:
        normalized = tok.normalizer.normalize_str(line) if tok.normalizer else line
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(normalized):
            if piece and piece not in seen:
                seen.add(piece)
                out.append(piece)
                if limit and len(out) >= limit:
                    return out
    return out


def model_json_of(tok):
    return json.loads(tok.to_str())["model"]


def from_model(model_json):
    return Tokenizer.from_str(json.dumps({"version": "1.0", "model": model_json}))


def id_samples(model, vocab_size, rng):
    ids = list(range(min(vocab_size, 300))) + [rng.randrange(0, vocab_size + 10) for _ in range(200)]
    ids += [vocab_size, vocab_size + 1, 2**31 - 2]
    return [[i, model.id_to_token(i)] for i in ids]


def entry(name, source, model, texts, rng, vocab_size):
    return {"name": name, "source": source, "vocab_size": vocab_size,
            "cases": [[t, tokens_of(model, t)] for t in texts if t],
            "ids": id_samples(model, vocab_size, rng)}


def train_bpe(lines, pre, model_kw, trainer_kw):
    tok = Tokenizer(models.BPE(**model_kw))
    tok.pre_tokenizer = pre
    tok.train_from_iterator(lines, trainers.BpeTrainer(show_progress=False, **trainer_kw))
    return tok


def save(tok, workdir, name):
    path = os.path.join(workdir, f"{name}.tokenizer.json")
    tok.save(path)
    return path


def trained_bpe(lines, texts_of, workdir, rng):
    out = []
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    specs = [
        ("bpe-prefix", pre_tokenizers.Whitespace(),
         dict(unk_token="[UNK]", continuing_subword_prefix="##"),
         dict(vocab_size=3000, special_tokens=["[UNK]"], continuing_subword_prefix="##",
              limit_alphabet=100)),
        ("bpe-suffix", pre_tokenizers.Whitespace(),
         dict(unk_token="<unk>", end_of_word_suffix="</w>", fuse_unk=True),
         dict(vocab_size=3000, special_tokens=["<unk>"], end_of_word_suffix="</w>",
              limit_alphabet=100)),
        ("bpe-prefix-suffix", pre_tokenizers.Whitespace(),
         dict(unk_token="<unk>", continuing_subword_prefix="@@", end_of_word_suffix="</w>"),
         dict(vocab_size=2000, special_tokens=["<unk>"], continuing_subword_prefix="@@",
              end_of_word_suffix="</w>", limit_alphabet=120)),
        ("bpe-byte-fallback", pre_tokenizers.Metaspace(),
         dict(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
         dict(vocab_size=1500, special_tokens=["<unk>"] + byte_tokens, limit_alphabet=150)),
        ("bpe-ignore-merges", pre_tokenizers.ByteLevel(add_prefix_space=False),
         dict(ignore_merges=True),
         dict(vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())),
        ("bpe-unk-fuse", pre_tokenizers.Whitespace(), dict(unk_token="[UNK]", fuse_unk=True),
         dict(vocab_size=1000, special_tokens=["[UNK]"], limit_alphabet=40)),
        ("bpe-unk", pre_tokenizers.Whitespace(), dict(unk_token="[UNK]"),
         dict(vocab_size=1000, special_tokens=["[UNK]"], limit_alphabet=40)),
    ]
    trained = {}
    for name, pre, model_kw, trainer_kw in specs:
        tok = train_bpe(lines, pre, model_kw, trainer_kw)
        trained[name] = tok
        texts = texts_of(tok)
        out.append(entry(name, {"json": save(tok, workdir, name)}, tok.model, texts, rng,
                         tok.get_vocab_size(with_added_tokens=False)))

    # ignore_merges off on the same vocabulary and merges (the ids differ).
    m = model_json_of(trained["bpe-ignore-merges"])
    m["ignore_merges"] = False
    out.append(entry("bpe-ignore-merges-off", {"model": m}, from_model(m).model,
                     texts_of(trained["bpe-ignore-merges"]), rng, len(m["vocab"])))

    # byte_fallback with a prefix and a suffix, only some byte tokens: the
    # prefix's bytes fall back too (offsets run past the code point), and an
    # unk waits behind byte tokens.
    m = model_json_of(trained["bpe-prefix-suffix"])
    next_id = max(m["vocab"].values()) + 1
    for b in list(range(0x00, 0x80)) + list(range(0xE4, 0xEA)) + [0x80, 0x81, 0xA0, 0xB8, 0xBD]:
        if f"<0x{b:02X}>" not in m["vocab"]:
            m["vocab"][f"<0x{b:02X}>"] = next_id
            next_id += 1
    m["byte_fallback"] = True
    for fuse in (False, True):
        m["fuse_unk"] = fuse
        out.append(entry(f"bpe-byte-fallback-prefix-fuse{int(fuse)}", {"model": dict(m)},
                         from_model(m).model, texts_of(trained["bpe-prefix-suffix"]), rng,
                         len(m["vocab"])))

    # An unk token that is not in the vocabulary: unknown code points raise.
    m = model_json_of(trained["bpe-unk"])
    m["unk_token"] = "<missing>"
    out.append(entry("bpe-unk-missing", {"model": m}, from_model(m).model,
                     texts_of(trained["bpe-unk"]), rng, len(m["vocab"])))
    return out


def random_bpe(rng, k):
    use_prefix = k % 4 == 1
    use_suffix = k % 4 == 2
    prefix = "##" if use_prefix else None
    suffix = "</w>" if use_suffix else None
    alphabet = rng.sample(["a", "b", "c", "d", "é", "東", "😀", "\u0301"], rng.randint(2, 5))
    vocab = {}

    def add(t):
        if t not in vocab:
            vocab[t] = len(vocab)

    for c in alphabet:
        add(c)
        if use_prefix:
            add("##" + c)
        if use_suffix:
            add(c + "</w>")
    merges = []
    for _ in range(rng.randint(5, 60)):
        tokens = list(vocab)
        a, b = rng.choice(tokens), rng.choice(tokens)
        if use_prefix:
            if not b.startswith("##"):
                continue
            new = a + b[2:]
        else:
            if use_suffix and a.endswith("</w>"):
                continue
            new = a + b
        if len(new) > 12:
            continue
        add(new)
        merges.append([a, b])
        if rng.random() < 0.15 and merges:
            merges.append(rng.choice(merges))  # a repeated pair
    rng.shuffle(merges)
    unk = None
    if k % 3 != 0:
        unk = "<unk>"
        add(unk)
    byte_fallback = k % 5 == 0
    if byte_fallback:
        for b in rng.sample(range(256), 180):
            add(f"<0x{b:02X}>")
    model = {"type": "BPE", "dropout": None, "unk_token": unk,
             "continuing_subword_prefix": prefix, "end_of_word_suffix": suffix,
             "fuse_unk": k % 2 == 0, "byte_fallback": byte_fallback,
             "ignore_merges": k % 7 == 3, "vocab": vocab,
             "merges": merges if k % 2 else [f"{a} {b}" for a, b in merges]}
    texts = ["".join(rng.choice(alphabet + ["x", "ü"]) for _ in range(rng.randint(1, 14)))
             for _ in range(60)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(20, 80))) for _ in range(5)]
    tok = from_model(model)
    return entry(f"random-bpe-{k}", {"model": model}, tok.model, texts, rng, len(vocab))


def wordpiece_models(lines, texts_of, data, workdir, rng):
    out = []
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(
        vocab_size=3000, special_tokens=["[UNK]"], limit_alphabet=80, show_progress=False))
    texts = texts_of(tok)
    n = tok.get_vocab_size(with_added_tokens=False)
    out.append(entry("wordpiece-trained", {"json": save(tok, workdir, "wordpiece")}, tok.model,
                     texts, rng, n))
    m = model_json_of(tok)
    m["max_input_chars_per_word"] = 6
    out.append(entry("wordpiece-short", {"model": m}, from_model(m).model, texts, rng, n))
    m = model_json_of(tok)
    m["continuing_subword_prefix"] = ""
    out.append(entry("wordpiece-no-prefix", {"model": m}, from_model(m).model, texts, rng, n))
    m = model_json_of(tok)
    m["unk_token"] = "<missing>"
    out.append(entry("wordpiece-unk-missing", {"model": m}, from_model(m).model, texts, rng, n))

    vocab_txt = f"{data}/vocab/bert-base-uncased-vocab.txt"
    bert = Tokenizer(models.WordPiece.from_file(vocab_txt, unk_token="[UNK]"))
    bert.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    texts = texts_of(bert, lower=True)
    out.append(entry("wordpiece-bert-file", {"vocab_txt": vocab_txt}, bert.model, texts, rng,
                     bert.get_vocab_size(with_added_tokens=False)))
    return out


def wordlevel_models(lines, texts_of, workdir, rng):
    out = []
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(lines, trainers.WordLevelTrainer(
        vocab_size=5000, special_tokens=["[UNK]"], show_progress=False))
    texts = texts_of(tok)
    n = tok.get_vocab_size(with_added_tokens=False)
    out.append(entry("wordlevel-trained", {"json": save(tok, workdir, "wordlevel")}, tok.model,
                     texts, rng, n))
    m = model_json_of(tok)
    m["unk_token"] = "<missing>"
    out.append(entry("wordlevel-unk-missing", {"model": m}, from_model(m).model, texts, rng, n))
    return out


def hostile():
    bpe = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
           "ignore_merges": False, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
    wp = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
          "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}
    wl = {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1}}

    def var(base, drop=(), **kw):
        d = dict(base)
        d.update(kw)
        for k in drop:
            del d[k]
        return d

    cases = [
        ("bpe-ok", bpe, False),
        ("bpe-pairs", var(bpe, merges=[["a", "b"]]), False),
        ("bpe-no-type", var(bpe, drop=["type"]), False),
        ("bpe-nulls", var(bpe, fuse_unk=None, byte_fallback=None, ignore_merges=None,
                          dropout=None, unk_token=None), False),
        ("bpe-dropout-0", var(bpe, dropout=0.0), False),
        ("bpe-dropout-half", var(bpe, dropout=0.5), True),
        ("bpe-dropout-1", var(bpe, dropout=1.0), True),
        ("bpe-dropout-big", var(bpe, dropout=1.5), False),
        ("bpe-dropout-negative", var(bpe, dropout=-0.1), False),
        ("bpe-dropout-string", var(bpe, dropout="0"), False),
        ("bpe-vocab-null", var(bpe, vocab=None), False),
        ("bpe-vocab-array", var(bpe, vocab=[["a", 0]]), False),
        ("bpe-vocab-missing", var(bpe, drop=["vocab"]), False),
        ("bpe-merges-missing", var(bpe, drop=["merges"]), False),
        ("bpe-merges-null", var(bpe, merges=None), False),
        ("bpe-merges-object", var(bpe, merges={"a": "b"}), False),
        ("bpe-merges-mixed", var(bpe, merges=["a b", ["a", "b"]]), False),
        ("bpe-merges-triple", var(bpe, merges=[["a", "b", "c"]]), False),
        ("bpe-merges-single", var(bpe, merges=[["a"]]), False),
        ("bpe-merges-number", var(bpe, merges=[5]), False),
        ("bpe-merge-three-parts", var(bpe, merges=["a b c"]), False),
        ("bpe-merge-no-space", var(bpe, merges=["ab"]), False),
        ("bpe-merge-empty", var(bpe, merges=[""]), False),
        ("bpe-merge-version-skipped", var(bpe, merges=["#version: 0.2", "a b"]), False),
        ("bpe-merge-unknown-left", var(bpe, merges=["x b"]), False),
        ("bpe-merge-unknown-right", var(bpe, merges=[["a", "y"]]), False),
        ("bpe-merge-unknown-result", var(bpe, vocab={"a": 0, "b": 1}), False),
        ("bpe-prefix-short-right", var(bpe, continuing_subword_prefix="##"), False),
        ("bpe-id-float", var(bpe, vocab={"a": 0, "b": 1, "ab": 2.0}), False),
        ("bpe-id-negative", var(bpe, vocab={"a": 0, "b": 1, "ab": -1}), False),
        ("bpe-id-string", var(bpe, vocab={"a": 0, "b": 1, "ab": "2"}), False),
        ("bpe-id-huge", var(bpe, vocab={"a": 0, "b": 1, "ab": 2**32}), False),
        ("bpe-id-huge2", var(bpe, vocab={"a": 0, "b": 1, "ab": 10**30}), False),
        ("bpe-id-u32-max", var(bpe, vocab={"a": 0, "b": 1, "ab": 2**32 - 1}), True),
        ("bpe-id-int32-max", var(bpe, vocab={"a": 0, "b": 1, "ab": 2**31 - 1}), True),
        ("bpe-id-sparse", var(bpe, vocab={"a": 0, "b": 1, "ab": 2**31 - 2}), False),
        ("bpe-id-duplicate", var(bpe, vocab={"a": 0, "b": 0, "ab": 2}), True),
        ("bpe-unk-number", var(bpe, unk_token=5), False),
        ("bpe-prefix-number", var(bpe, continuing_subword_prefix=[]), False),
        ("bpe-fuse-string", var(bpe, fuse_unk="yes"), False),
        ("bpe-type-wrong", var(bpe, type="Foo"), False),
        ("bpe-type-number", var(bpe, type=3), False),
        ("wp-ok", wp, False),
        ("wp-no-type", var(wp, drop=["type"]), False),
        ("wp-unk-missing-field", var(wp, drop=["unk_token"]), False),
        ("wp-unk-null", var(wp, unk_token=None), False),
        ("wp-prefix-missing", var(wp, drop=["continuing_subword_prefix"]), False),
        ("wp-max-missing", var(wp, drop=["max_input_chars_per_word"]), False),
        ("wp-max-negative", var(wp, max_input_chars_per_word=-1), False),
        ("wp-max-float", var(wp, max_input_chars_per_word=1.5), False),
        ("wp-max-null", var(wp, max_input_chars_per_word=None), False),
        ("wp-vocab-missing", var(wp, drop=["vocab"]), False),
        ("wp-vocab-list", var(wp, vocab=["a"]), False),
        ("wp-id-duplicate", var(wp, vocab={"[UNK]": 0, "a": 0}), True),
        ("wl-ok", wl, False),
        ("wl-no-type", var(wl, drop=["type"]), False),
        ("wl-unk-missing-field", var(wl, drop=["unk_token"]), False),
        ("wl-unk-null", var(wl, unk_token=None), False),
        ("wl-vocab-null", var(wl, vocab=None), False),
        ("wl-id-negative", var(wl, vocab={"[UNK]": -3}), False),
        ("model-string", "BPE", False),
        ("model-array", [], False),
        ("model-empty-object", {}, False),
    ]
    out = []
    # Some of these make tokenizers panic, which prints a backtrace on stderr.
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            for name, model, kiln_rejects in cases:
                try:
                    from_model(model)
                    ok, err = True, ""
                except BaseException as e:  # a Rust panic is a PanicException
                    ok, err = False, str(e).split("\n")[0]
                out.append({"name": name, "model": model, "hf_ok": ok, "hf_error": err,
                            "kiln_rejects": kiln_rejects})
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = random.Random(5)
    wiki = [l for l in read_lines(f"{args.data}/wikitext-2/valid.txt") if l.strip()]
    adv = adversarial()

    memo = {}

    def texts_of(tok, lower=False, limit=5000):
        # The distinct pre-tokens of the adversarial strings and WikiText-2
        # lines (the first `limit` of them), and the raw adversarial strings.
        key = (tok.pre_tokenizer.__getstate__(), lower, limit)
        if key not in memo:
            src = adv + wiki[:limit // 4 if limit else None]
            if lower:
                src = [l.lower() for l in src]
            memo[key] = pre_tokens(tok, src, limit) + adv
        return memo[key]

    gpt2_json = f"{args.data}/tokenizers/gpt2/tokenizer.json"
    gpt2 = Tokenizer.from_file(gpt2_json)
    gpt2_texts = texts_of(gpt2, limit=None)  # every line
    files = models.BPE.from_file(f"{args.data}/tokenizers/gpt2/vocab.json",
                                 f"{args.data}/tokenizers/gpt2/merges.txt")
    out = [
        entry("gpt2-json", {"json": gpt2_json}, gpt2.model, gpt2_texts, rng,
              gpt2.get_vocab_size(with_added_tokens=False)),
        entry("gpt2-files", {"vocab": f"{args.data}/tokenizers/gpt2/vocab.json",
                             "merges": f"{args.data}/tokenizers/gpt2/merges.txt"},
              files, gpt2_texts, rng, gpt2.get_vocab_size(with_added_tokens=False)),
    ]
    out += trained_bpe(wiki, texts_of, args.workdir, rng)
    out += [random_bpe(rng, k) for k in range(60)]
    out += wordpiece_models(wiki, texts_of, args.data, args.workdir, rng)
    out += wordlevel_models(wiki, texts_of, args.workdir, rng)
    text = json.dumps({"models": out, "hostile": hostile()}, ensure_ascii=True)  # C encoder
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()

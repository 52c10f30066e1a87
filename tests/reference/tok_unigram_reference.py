"""References for tests/test_tok_unigram.cpp: HF tokenizers' Unigram model,
and the tokenizer.json transformers builds from a SentencePiece .model.

usage: tok_unigram_reference.py tokens --data DIR --edge-cases FILE --output OUT.json
       tok_unigram_reference.py spm-convert --data DIR --workdir DIR   (transformers venv)
       tok_unigram_reference.py canonical --workdir DIR                (tokenizers venv)

tokens writes {"models": [{"name", "model" (a tokenizer.json "model" object, or
"file:PATH" for one read from a tokenizer.json), "cases": [[text, tokens]]}]}
where tokens is [[id, value, begin, end], ...] from tokenizers' Model.tokenize
(offsets in bytes of text), or null when tokenize raised. Models:
  xlm-roberta   the real XLM-R tokenizer.json; texts are the Metaspace
                pre-tokens, after its normalizer, of WikiText-2 valid, SST-2
                dev, CoNLL-2003 dev and STS-B dev lines, plus the edge cases
                and adversarial strings (both as pre-tokens and raw);
  trained-*     Unigram models trained here with UnigramTrainer on WikiText-2
                valid (its first 2000 lines): with <unk>, with <unk> and byte_fallback (256 <0xHH>
                pieces), and without any unk (unknowns raise);
  random-*      small random vocabularies over a few code points with scores
                drawn from a handful of values (ties), duplicate pieces and
                positive scores, with and without unk / byte_fallback, on
                random strings.
Runs with the project venv's tokenizers (0.23.3).

spm-convert (KILN_HF_PYTHON: transformers 4.36 with sentencepiece and
protobuf) trains small SentencePiece models on WikiText-2 valid (unigram and
BPE, with and without byte_fallback) into WORKDIR, converts them and the real
XLM-R sentencepiece.bpe.model as transformers does (the fast tokenizer class
for a model_type, SpmConverter itself for none), and writes
WORKDIR/manifest.json: [{"model": .model path, "model_type", "json": path}].
canonical then rewrites each converted file as tokenizers 0.23.3 serializes
it (PATH.canonical.json), the form kiln's converter produces.
"""

import argparse
import json
import random

from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def tokens_of(model, text):
    try:
        return [[t.id, t.value, t.offsets[0], t.offsets[1]] for t in model.tokenize(text)]
    except Exception:  # tokenizers raises a plain Exception for MissingUnkId
        return None


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def corpus_lines(data):
    lines = read_lines(f"{data}/wikitext-2/valid.txt")
    lines += [l.split("\t")[1] for l in read_lines(f"{data}/sst2/dev.tsv")[1:] if "\t" in l]
    # CoNLL-2003: one word per line (word POS tag), sentences separated by blank lines.
    sentence = []
    for l in read_lines(f"{data}/conll2003/dev.txt"):
        if l.strip() and not l.startswith("-DOCSTART-"):
            sentence.append(l.split(" ")[0])
        elif sentence:
            lines.append(" ".join(sentence))
            sentence = []
    for l in read_lines(f"{data}/stsb/dev.tsv"):
        cols = l.split("\t")
        if len(cols) >= 9:
            lines += cols[7:9]
    return lines


def adversarial():
    rng = random.Random(7)
    out = [
        "😀😂👍🏽❤️🇺🇸👩‍👩‍👧🏳️‍🌈", "你好世界我爱北京天安门", "مرحبا بالعالم", "नमस्ते दुनिया क़ ख़",
        "e\u0301\u0302\u0303\u0304", "\u0301\u0301\u0301", "\x00\x01\x1f\x7f\u0080\u009f",
        "\u200b\u200c\u200d\ufeff\u2028\u2029", "\ue000\U000f0000\U0010fffd\ufffd\uffff",
        "a" * 3000, "▁" * 200, "😀" * 500, "abc" * 700, "<unk><s></s><unk>", "<0x41><0xE2>",
        "\U0001d400\U0001d4ff\U0002a6df", "ＡＢＣ①②③ﬁﬂ", "ǅǈǋ", "İıẞß",
    ]
    pool = [chr(c) for c in list(range(0x20, 0x7F)) + list(range(0xA0, 0x250)) +
            list(range(0x4E00, 0x4E40)) + list(range(0x1F600, 0x1F620)) + [0x301, 0x200D, 0x2581]]
    for _ in range(200):
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
    return out


def pre_tokens(tok, texts):
    seen, out = set(), []
    for line in texts:
        normalized = tok.normalizer.normalize_str(line) if tok.normalizer else line
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(normalized):
            if piece and piece not in seen:
                seen.add(piece)
                out.append(piece)
    return out


def cases(model, texts):
    return [[t, tokens_of(model, t)] for t in texts if t]


def trained(lines, **kw):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(lines, trainers.UnigramTrainer(show_progress=False, **kw))
    return tok


def from_text(model_json):
    return Tokenizer.from_str(json.dumps({"version": "1.0", "model": model_json}))


def scores_changed(model_json, tok):
    held = json.loads(tok.to_str())["model"]["vocab"]  # serialized exactly (ryu)
    return [[i, h[1]] for i, (t, h) in enumerate(zip(model_json["vocab"], held)) if t[1] != h[1]]


def random_models(rng):
    out = []
    alphabet = ["a", "b", "c", "é", "東", "😀", " ", "\u0301"]
    scores = [0.0, -1.0, -2.0, -0.5, -3.25, 1.5, 25.0]
    for k in range(40):
        with_unk = k % 4 != 3
        byte_fallback = k % 3 == 0
        vocab = [("<unk>", 0.0)] if with_unk else []
        for _ in range(rng.randint(3, 30)):
            piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
            vocab.append((piece, rng.choice(scores)))
        if byte_fallback:  # some byte pieces, not all: partial fallback goes to unk
            for b in rng.sample(range(256), 200):
                vocab.append((f"<0x{b:02X}>", rng.choice(scores)))
        if k % 5 == 0 and len(vocab) > 2:  # duplicates with other scores
            vocab.append((vocab[1][0], rng.choice(scores)))
            vocab.insert(2, (vocab[-2][0], rng.choice(scores)))
        rng.shuffle(vocab)
        unk_id = next((i for i, (p, _) in enumerate(vocab) if p == "<unk>"), None)
        model = models.Unigram(vocab, unk_id, byte_fallback)
        texts = ["".join(rng.choice(alphabet + ["x", "<unk>"]) for _ in range(rng.randint(1, 12)))
                 for _ in range(60)]
        model_json = json.loads(Tokenizer(model).to_str())["model"]
        tok = from_text(model_json)
        out.append({"name": f"random-{k}", "model": model_json, "cases": cases(tok.model, texts),
                    "scores_changed": scores_changed(model_json, tok)})
    return out


def spm_convert(args):
    import sentencepiece as spm
    from transformers import LlamaTokenizerFast, XLMRobertaTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter

    class Slow:  # what SpmConverter reads of a slow tokenizer
        def __init__(self, vocab_file):
            self.vocab_file = vocab_file

    lines = read_lines(f"{args.data}/wikitext-2/valid.txt")[:2000]
    trained = {}
    for name, model_type, byte_fallback in [("unigram", "unigram", False),
                                           ("unigram_bf", "unigram", True),
                                           ("bpe", "bpe", False), ("bpe_bf", "bpe", True)]:
        prefix = f"{args.workdir}/sp_{name}"
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix,
                                       model_type=model_type, vocab_size=1000,
                                       byte_fallback=byte_fallback, minloglevel=2)
        trained[name] = prefix + ".model"
    xlmr = f"{args.data}/tokenizers/xlm-roberta/sentencepiece.bpe.model"
    jobs = [(xlmr, "xlm-roberta"), (trained["unigram"], ""), (trained["bpe"], ""),
            (trained["unigram_bf"], "llama"), (trained["bpe_bf"], "llama"),
            (trained["unigram"], "xlm-roberta"), (trained["bpe_bf"], "")]
    manifest = []
    for i, (model, model_type) in enumerate(jobs):
        out = f"{args.workdir}/converted_{i}.json"
        if model_type == "xlm-roberta":
            XLMRobertaTokenizerFast(vocab_file=model).backend_tokenizer.save(out)
        elif model_type == "llama":
            LlamaTokenizerFast(vocab_file=model, from_slow=True, legacy=True).backend_tokenizer.save(out)
        else:
            SpmConverter(Slow(model)).converted().save(out)
        manifest.append({"model": model, "model_type": model_type, "json": out})
    with open(f"{args.workdir}/manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def canonical(args):
    with open(f"{args.workdir}/manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    for job in manifest:
        converted = json.loads(Tokenizer.from_file(job["json"]).to_str())
        # Reading the file back moves some Unigram scores by an ulp (serde_json);
        # the converted model holds the file's exact values (written with ryu).
        with open(job["json"], encoding="utf-8") as f:
            original = json.load(f)
        if converted["model"]["type"] == "Unigram":
            converted["model"]["vocab"] = original["model"]["vocab"]
        with open(job["json"] + ".canonical.json", "w", encoding="utf-8") as f:
            json.dump(converted, f, ensure_ascii=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["tokens", "spm-convert", "canonical"])
    ap.add_argument("--data")
    ap.add_argument("--edge-cases")
    ap.add_argument("--output")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    if args.mode == "spm-convert":
        return spm_convert(args)
    if args.mode == "canonical":
        return canonical(args)

    lines = corpus_lines(args.data)
    extra = read_lines(args.edge_cases) + adversarial()
    out = []

    xlmr_path = f"{args.data}/tokenizers/xlm-roberta/tokenizer.json"
    xlmr = Tokenizer.from_file(xlmr_path)
    texts = pre_tokens(xlmr, lines + extra) + extra
    with open(xlmr_path, encoding="utf-8") as f:
        xlmr_model = json.load(f)["model"]
    out.append({"name": "xlm-roberta", "model": "file:" + xlmr_path, "cases": cases(xlmr.model, texts),
                "scores_changed": scores_changed(xlmr_model, xlmr)})

    wiki = read_lines(f"{args.data}/wikitext-2/valid.txt")[:2000]
    metaspace = pre_tokenizers.Metaspace()
    # Every line's words would repeat the XLM-R pass: 8000 distinct ones
    # (most of SST-2's and CoNLL's vocabulary is outside the training text),
    # and all of the edge cases.
    words = list(dict.fromkeys(p for line in lines[len(wiki):] for p, _ in
                               metaspace.pre_tokenize_str(line)))[:8000]
    words += [p for line in extra for p, _ in metaspace.pre_tokenize_str(line)] + extra
    texts = list(dict.fromkeys(words))
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    for name, kw, byte_fallback in [
        ("trained-unk", dict(vocab_size=3000, unk_token="<unk>", special_tokens=["<unk>"]), False),
        ("trained-byte-fallback",
         dict(vocab_size=3000, unk_token="<unk>", special_tokens=["<unk>"] + bytes_), True),
        ("trained-no-unk", dict(vocab_size=2000), False),
    ]:
        tok = trained(wiki, **kw)
        model_json = json.loads(tok.to_str())["model"]
        model_json["byte_fallback"] = byte_fallback
        tok = from_text(model_json)
        out.append({"name": name, "model": model_json, "cases": cases(tok.model, texts),
                    "scores_changed": scores_changed(model_json, tok)})

    out += random_models(random.Random(1234))
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump({"models": out}, f, ensure_ascii=True)


if __name__ == "__main__":
    main()

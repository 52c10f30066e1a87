#!/usr/bin/env python3
"""Builds the tokenizer.json files kiln's differential tests load
(tests/test_tok_hf.cpp), with Hugging Face `tokenizers`, into --out.

Besides the real GPT-2 and XLM-R tokenizers (../shared/data/tokenizers),
each file here exercises other stages: models trained on WikiText-2 valid
(BPE with a continuing-subword prefix or an end-of-word suffix, byte-level
BPE, a Llama-style SentencePiece BPE with byte fallback, one with
ignore_merges, Unigram with and without byte fallback, WordPiece,
WordLevel), normalizers, pre-tokenizers, post-processors and decoders in
different combinations, added tokens with every flag, and truncation +
padding. Training is deterministic for a given tokenizers version.
"""
import argparse
import json
import os

from tokenizers import (AddedToken, BertWordPieceTokenizer, ByteLevelBPETokenizer, Regex,
                        Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def added(tok):
    tok.add_special_tokens([AddedToken("[SPECIAL]", normalized=False)])
    tok.add_tokens([
        AddedToken("hello world", single_word=True, normalized=True),
        AddedToken("<ls>", lstrip=True, normalized=False),
        AddedToken("<rs>", rstrip=True, normalized=False),
        AddedToken("Ǆé", normalized=True),
    ])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    wiki = os.path.join(args.data, "wikitext-2/valid.txt")
    files = [wiki]
    out = lambda name: os.path.join(args.out, name + ".json")

    # BERT WordPiece from the real bert-base-uncased vocab.
    bert = BertWordPieceTokenizer(os.path.join(args.data, "vocab/bert-base-uncased-vocab.txt"),
                                  lowercase=True)
    bert.save(out("bert_uncased"))

    # BPE with ## continuation, NFKC + lowercase + replace + strip, Whitespace.
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                         normalizers.Replace("``", '"'), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.train(files, trainers.BpeTrainer(vocab_size=1500, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"],
                                       continuing_subword_prefix="##", limit_alphabet=200))
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
    t.decoder = decoders.WordPiece(prefix="##")
    added(t)
    t.save(out("bpe_prefix"))

    # BPE with an end-of-word suffix; NFD + strip accents; split on
    # whitespace, punctuation and single digits; BPEDecoder.
    t = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                         normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                               pre_tokenizers.Punctuation("isolated"),
                                               pre_tokenizers.Digits(individual_digits=True)])
    t.train(files, trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>"], end_of_word_suffix="</w>",
                                       limit_alphabet=100))
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    added(t)
    t.save(out("bpe_suffix"))

    # Byte-level BPE (RoBERTa-style): add_prefix_space, RobertaProcessing.
    b = ByteLevelBPETokenizer(add_prefix_space=True, trim_offsets=True)
    b.train(files, vocab_size=2000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    b.post_processor = processors.RobertaProcessing(("</s>", b.token_to_id("</s>")),
                                                    ("<s>", b.token_to_id("<s>")),
                                                    trim_offsets=True, add_prefix_space=True)
    b.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
    b.save(out("byte_level_roberta"))

    # Llama-3 style: Split(regex) + ByteLevel(use_regex=False), ignore_merges.
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.train(files, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|begin_of_text|>"],
                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", 0)])])
    added(t)
    t.save(out("bpe_llama3"))

    # Llama-2 style SentencePiece BPE with byte fallback (small vocab, so
    # CJK, emoji and rare letters fall back to <0xXX> bytes).
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.train(files, trainers.BpeTrainer(vocab_size=1400, special_tokens=specials, limit_alphabet=120))
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1",
                                                     special_tokens=[("<s>", 1)])
    t.save(out("spm_bpe_byte_fallback"))

    # Unigram with Metaspace (prepend first), NFKC, unk.
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.NFKC()
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    t.train(files, trainers.UnigramTrainer(vocab_size=1500, special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
                                           unk_token="<unk>", shrinking_factor=0.75))
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    t.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                     special_tokens=[("</s>", 3)])
    added(t)
    t.save(out("unigram_metaspace"))

    # The same Unigram with byte fallback (pieces <0x00>..<0xFF> appended).
    j = json.loads(t.to_str())
    j["model"]["byte_fallback"] = True
    j["model"]["vocab"] += [["<0x%02X>" % i, -20.0] for i in range(256)]
    j["normalizer"] = {"type": "NFKD"}
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace",
                    "replacement": "▁", "prepend_scheme": "always", "split": False}]}
    Tokenizer.from_str(json.dumps(j)).save(out("unigram_byte_fallback"))

    # WordPiece trained with a cased BertNormalizer, truncation with stride
    # and padding to a multiple.
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.train(files, trainers.WordPieceTrainer(vocab_size=1500, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]))
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    t.decoder = decoders.WordPiece()
    t.enable_truncation(max_length=24, stride=4, strategy="longest_first")
    t.enable_padding(pad_id=3, pad_token="[PAD]", pad_to_multiple_of=8)
    added(t)
    t.save(out("wordpiece_trunc_pad"))

    # WordLevel with regex Split (inverted, merged with next), char delimiter,
    # contiguous punctuation; NFKC; left truncation, left fixed padding.
    t = Tokenizer(models.WordLevel(unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\d+"), "0")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next", invert=False),
        pre_tokenizers.Split(Regex(r"[\p{L}\p{N}]+"), behavior="isolated", invert=True),
        pre_tokenizers.CharDelimiterSplit("-"),
        pre_tokenizers.Punctuation("contiguous")])
    t.train(files, trainers.WordLevelTrainer(vocab_size=3000, special_tokens=["<unk>", "<pad>"]))
    t.enable_truncation(max_length=20, direction="left", strategy="only_first")
    t.enable_padding(length=20, direction="left", pad_id=1, pad_token="<pad>")
    added(t)
    t.save(out("wordlevel_split"))

    with open(os.path.join(args.out, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()

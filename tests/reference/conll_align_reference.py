#!/usr/bin/env python3
"""Reference word-to-subword alignment from Hugging Face `tokenizers` for
tests/test_token_data.cpp.

Reads a CoNLL file on its own (one token per line, columns split on runs of
whitespace, the word first and the label last; blank lines between sentences;
-DOCSTART- lines skipped), encodes each sentence's words with
BertWordPieceTokenizer(vocab, lowercase=True).encode(words, is_pretokenized=True)
(what transformers' tokenizer(words, is_split_into_words=True) does on a BERT
fast tokenizer) and aligns the labels as run_ner's tokenize_and_align_labels,
with the label list sorted (run_ner's get_label_list) and its b_to_i_label.

Output, one line per sentence:
  number of words|ids|word_ids|labels|labels with label_all_tokens
each list space-separated, with -1 for word_ids None.
"""
import argparse
import os
import sys

from tokenizers import BertWordPieceTokenizer


def read_conll(path):
    sentences, words, labels = [], [], []
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", errors="replace")
    if data.startswith("\ufeff"):
        data = data[1:]
    for line in data.split("\n"):
        fields = line.replace("\r", "").split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append((words, labels))
            words, labels = [], []
            continue
        words.append(fields[0])
        labels.append(fields[-1])
    if words:
        sentences.append((words, labels))
    return sentences


def join(xs):
    return " ".join(str(x) for x in xs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    args = p.parse_args()

    tok = BertWordPieceTokenizer(args.vocab, lowercase=True)
    sentences = read_conll(args.input)
    label_list = sorted({l for _, labels in sentences for l in labels})
    label_to_id = {l: i for i, l in enumerate(label_list)}
    b_to_i_label = []
    for idx, label in enumerate(label_list):
        if label.startswith("B-") and label.replace("B-", "I-") in label_list:
            b_to_i_label.append(label_list.index(label.replace("B-", "I-")))
        else:
            b_to_i_label.append(idx)

    encodings = tok.encode_batch([words for words, _ in sentences], is_pretokenized=True)
    out = []
    for (words, labels), e in zip(sentences, encodings):
        word_ids = e.word_ids
        aligned = {False: [], True: []}
        for label_all_tokens in (False, True):
            previous = None
            for w in word_ids:
                if w is None:
                    aligned[label_all_tokens].append(-100)
                elif w != previous:
                    aligned[label_all_tokens].append(label_to_id[labels[w]])
                else:
                    aligned[label_all_tokens].append(
                        b_to_i_label[label_to_id[labels[w]]] if label_all_tokens else -100)
                previous = w
        out.append("|".join([str(len(words)), join(e.ids), join(-1 if w is None else w for w in word_ids),
                             join(aligned[False]), join(aligned[True])]))

    tmp = f"{args.output}.tmp-{os.getpid()}"  # atomic for parallel test processes
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in out:
            f.write(line + "\n")
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

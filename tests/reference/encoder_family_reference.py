#!/usr/bin/env python3
"""The parity oracle for kiln's encoder families (RoBERTa, XLM-R, DistilBERT):
transformers itself builds randomly initialised models of each family from a
config (from_config, seeds fixed), saves them (safetensors) and records what
they compute, so the C++ test can load the same directories and compare.

    encoder_family_reference.py tokenize --tokenizer tokenizer.json --sentences sst2/dev.tsv --out ids.json
    encoder_family_reference.py roberta-tokenizer --gpt2-dir DIR --out tokenizer.json
    encoder_family_reference.py build --workdir DIR [--text-ids ids.json --xlmr-tokenizer tokenizer.json]
                                      [--roberta-text-ids ids.json --roberta-tokenizer tokenizer.json]

"tokenize" needs only the tokenizers package (the test venv's, new enough
for the real XLM-R tokenizer.json); "build" needs torch and transformers
(the .venv-hf reference environment).

For each case (family x size) and head (Model, ForMaskedLM,
ForSequenceClassification, ForTokenClassification) it writes
DIR/<case>/<Head>/ (config.json + model.safetensors) and
DIR/<case>/<Head>.golden.safetensors with the inputs (padded: pad id 1,
attention_mask 0 there; RoBERTa's pad id 1, DistilBERT's 0), the outputs
(last_hidden_state and, where the family has a pooler, pooler_output; or logits), the loss on the labels and every parameter's gradient of that
loss ("grad.<name>"), all float32. With --text-ids, the case "xlmr-text"
(heads Model and ForSequenceClassification, no gradients) runs a model of
the real XLM-R tokenizer's vocabulary (the tokenizer copied into the model
directories) on the ids "tokenize" gave for the first sentences of the file.
"roberta-tokenizer" (tokenizers only) builds a RoBERTa-style tokenizer.json
from the real GPT-2 vocab.json + merges.txt as roberta-base's is laid out:
<s> <pad> </s> <unk> at ids 0-3, GPT-2's byte-level BPE after them, <mask>
last, RobertaProcessing; with --roberta-text-ids the case "roberta-text"
does for a RoBERTa of that vocabulary what "xlmr-text" does.
The small cases' masked-LM model is also saved sharded (max_shard_size
200KB) as <Head>-sharded/. DIR/manifest.json lists the cases."""
import argparse
import copy
import json
import os
import shutil
import sys


HEADS = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification"]
NUM_LABELS = {"ForSequenceClassification": 3, "ForTokenClassification": 5}


PREFIX = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "distilbert": "DistilBert"}
PAD = {"roberta": 1, "xlm-roberta": 1, "distilbert": 0}


def config_for(family, vocab, hidden, layers, heads, ffn, positions):
    import transformers
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab, dim=hidden, n_layers=layers, n_heads=heads,
                                             hidden_dim=ffn, max_position_embeddings=positions, dropout=0.0,
                                             attention_dropout=0.0, seq_classif_dropout=0.0, pad_token_id=0)
    cls = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
    # dropout off: the gradients of one step are compared, and dropout's masks differ
    return cls(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
               intermediate_size=ffn, max_position_embeddings=positions, type_vocab_size=1,
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0,
               eos_token_id=2, layer_norm_eps=1e-5)


def synthetic_inputs(vocab, lengths, seed, pad=1):
    import torch
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.full((len(lengths), T), pad, dtype=torch.long)
    mask = torch.zeros((len(lengths), T), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, vocab, (n,), generator=g)
        ids[i, 0], ids[i, n - 1] = (0, 2) if pad == 1 else (2, 3)  # <s> ... </s>, [CLS] ... [SEP]
        mask[i, :n] = 1
    return ids, mask


def labels_for(head, ids, mask, vocab, seed):
    import torch
    g = torch.Generator().manual_seed(seed + 1)
    B, T = ids.shape
    if head == "ForSequenceClassification":
        return torch.randint(0, NUM_LABELS[head], (B,), generator=g)
    if head == "ForTokenClassification":
        y = torch.randint(0, NUM_LABELS[head], (B, T), generator=g)
        return torch.where(mask.bool(), y, torch.full_like(y, -100))
    if head == "ForMaskedLM":
        y = torch.randint(3, vocab, (B, T), generator=g)
        pick = (torch.rand((B, T), generator=g) < 0.4) & mask.bool()
        pick[:, 1] = True  # at least one per row
        return torch.where(pick, y, torch.full_like(y, -100))
    return None


def run_case(workdir, name, family, config, ids, mask, seed, tokenizer_file=None, heads=HEADS, grads=True,
             sharded=False):
    import torch
    import transformers
    from safetensors.torch import save_file
    prefix = PREFIX[family]
    os.makedirs(os.path.join(workdir, name), exist_ok=True)
    for head in heads:
        torch.manual_seed(seed)
        cls = getattr(transformers, prefix + head)
        c = copy.deepcopy(config)
        if head in NUM_LABELS:
            c.num_labels = NUM_LABELS[head]
        c.architectures = [prefix + head]
        model = cls(c)
        out_dir = os.path.join(workdir, name, head)
        model.save_pretrained(out_dir, safe_serialization=True)
        if sharded and head == "ForMaskedLM":  # the same weights as shards + model.safetensors.index.json
            model.save_pretrained(out_dir + "-sharded", safe_serialization=True, max_shard_size="200KB")
        if tokenizer_file:
            shutil.copy(tokenizer_file, os.path.join(out_dir, "tokenizer.json"))
        model.train()  # dropout is 0: train mode computes what eval mode does
        labels = labels_for(head, ids, mask, config.vocab_size, seed)
        out = model(input_ids=ids, attention_mask=mask, **({"labels": labels} if labels is not None else {}))
        golden = {"input_ids": ids, "attention_mask": mask}
        if head == "Model":
            golden["last_hidden_state"] = out.last_hidden_state
            hm = out.last_hidden_state * mask.unsqueeze(-1)
            if getattr(out, "pooler_output", None) is not None:
                golden["pooler_output"] = out.pooler_output
                loss = hm.pow(2).mean() + out.pooler_output.sum()
            else:  # DistilBERT has no pooler; mean(LN(x)^2) alone is constant in x at init, so cubes
                loss = hm.pow(3).mean()
        else:
            golden["logits"] = out.logits
            golden["labels"] = labels
            loss = out.loss
        golden["loss"] = loss.reshape(1)
        if grads:
            loss.backward()
            for n, p in model.named_parameters():
                if p.grad is not None:
                    golden["grad." + n] = p.grad
        golden = {k: (v.detach().float() if v.is_floating_point() else v).contiguous() for k, v in golden.items()}
        save_file(golden, os.path.join(workdir, name, head + ".golden.safetensors"))


def roberta_tokenizer(a):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    with open(os.path.join(a.gpt2_dir, "vocab.json"), encoding="utf-8") as f:
        gpt2 = json.load(f)
    with open(os.path.join(a.gpt2_dir, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:] if line]
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for t, i in sorted(gpt2.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials + [AddedToken("<mask>", lstrip=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(a.out)


def text_case(workdir, name, family, text_ids_file, tokenizer_file, seed, cases):
    import torch
    with open(text_ids_file, encoding="utf-8") as f:
        text = json.load(f)
    T = max(len(e) for e in text["ids"])
    ids = torch.full((len(text["ids"]), T), 1, dtype=torch.long)
    mask = torch.zeros((len(text["ids"]), T), dtype=torch.long)
    for i, e in enumerate(text["ids"]):
        ids[i, :len(e)] = torch.tensor(e)
        mask[i, :len(e)] = 1
    config = config_for(family, text["vocab_size"], 32, 1, 2, 64, 514)
    run_case(workdir, name, family, config, ids, mask, seed=seed, tokenizer_file=tokenizer_file,
             heads=["Model", "ForSequenceClassification"], grads=False)
    cases.append(name)


def tokenize(a):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    with open(a.sentences, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    col = next(i for i, h in enumerate(rows[0]) if h in ("sentence", "content", "text"))
    lines = [r[col] for r in rows[1:5]]
    enc = tok.encode_batch(lines)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"sentences": lines, "ids": [e.ids for e in enc], "vocab_size": tok.get_vocab_size()}, f)


def build(a):
    import torch
    import transformers
    os.makedirs(a.workdir, exist_ok=True)
    torch.set_num_threads(1)
    cases = []
    # two sizes per family: a small one, and one of a realistic layer shape (bert-mini's)
    for family in ["roberta", "xlm-roberta", "distilbert"]:
        for size, (vocab, hidden, layers, heads, ffn, positions) in {
            "small": (1000, 64, 2, 4, 256, 40),
            "mini": (5000, 256, 4, 4, 1024, 130),
        }.items():
            name = f"{family}-{size}"
            config = config_for(family, vocab, hidden, layers, heads, ffn, positions)
            ids, mask = synthetic_inputs(vocab, [11, 7, 3], seed=len(cases) + 5, pad=PAD[family])
            run_case(a.workdir, name, family, config, ids, mask, seed=100 + len(cases), sharded=size == "small")
            cases.append(name)
    if a.text_ids:
        text_case(a.workdir, "xlmr-text", "xlm-roberta", a.text_ids, a.xlmr_tokenizer, 300, cases)
    if a.roberta_text_ids:
        text_case(a.workdir, "roberta-text", "roberta", a.roberta_text_ids, a.roberta_tokenizer, 301, cases)
    with open(os.path.join(a.workdir, "manifest.json"), "w") as f:
        json.dump({"cases": cases, "heads": HEADS, "num_labels": NUM_LABELS,
                   "transformers": transformers.__version__}, f)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--sentences", required=True)
    t.add_argument("--out", required=True)
    b = sub.add_parser("build")
    b.add_argument("--workdir", required=True)
    b.add_argument("--text-ids")
    b.add_argument("--xlmr-tokenizer")
    b.add_argument("--roberta-text-ids")
    b.add_argument("--roberta-tokenizer")
    r = sub.add_parser("roberta-tokenizer")
    r.add_argument("--gpt2-dir", required=True)
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    {"tokenize": tokenize, "build": build, "roberta-tokenizer": roberta_tokenizer}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The parity oracle for kiln's encoder families (RoBERTa, XLM-R, DistilBERT, ModernBERT):
transformers itself builds randomly initialised models of each family from a
config (from_config, seeds fixed), saves them (safetensors) and records what
they compute, so the C++ test can load the same directories and compare.

    encoder_family_reference.py tokenize --tokenizer tokenizer.json --sentences sst2/dev.tsv --out ids.json
    encoder_family_reference.py roberta-tokenizer --gpt2-dir DIR --out tokenizer.json
    encoder_family_reference.py build --workdir DIR --families roberta,xlm-roberta,distilbert
                                      [--text-ids ids.json --xlmr-tokenizer tokenizer.json]
                                      [--roberta-text-ids ids.json --roberta-tokenizer tokenizer.json]
    encoder_family_reference.py build --workdir DIR --families modernbert
                                      [--roberta-text-ids ids.json --roberta-tokenizer tokenizer.json]

"tokenize" needs only the tokenizers package (the test venv's, new enough
for the real XLM-R tokenizer.json); "build" needs torch and transformers
(the .venv-hf reference environment; ModernBERT needs transformers >= 4.48,
the .venv-hf48 one, which runs on the same Debian PyTorch 1.13 through
tests/reference/torch_compat.py). Each "build" adds its families' cases to
DIR/manifest.json.

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
does for a RoBERTa of that vocabulary what "xlmr-text" does (with
--families modernbert, "modernbert-text" for a ModernBERT of it).
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


PREFIX = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "distilbert": "DistilBert", "modernbert": "ModernBert"}
PAD = {"roberta": 1, "xlm-roberta": 1, "distilbert": 0, "modernbert": 0}


def config_for(family, vocab, hidden, layers, heads, ffn, positions, **extra):
    import transformers
    if family == "modernbert":
        # the padded eager path (transformers' flash-attention path unpads; the same numbers at real
        # positions); special ids inside the small vocabularies: [CLS] 2, [SEP] 3, [PAD] 0 as
        # synthetic_inputs lays them out, unless the caller gives RoBERTa's layout
        ids = {"pad_token_id": 0, "bos_token_id": 2, "cls_token_id": 2, "eos_token_id": 3, "sep_token_id": 3}
        ids.update({k: v for k, v in extra.items() if k.endswith("_token_id")})
        # initializer_range 0.1 (transformers' 0.02 leaves attention near uniform): rotary and the window matter
        rest = {"initializer_range": 0.1, **{k: v for k, v in extra.items() if not k.endswith("_token_id")}}
        return transformers.ModernBertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                             num_attention_heads=heads, intermediate_size=ffn,
                                             max_position_embeddings=positions, attn_implementation="eager",
                                             reference_compile=False, **ids, **rest)
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


def text_case(workdir, name, family, text_ids_file, tokenizer_file, seed, cases, **extra):
    import torch
    with open(text_ids_file, encoding="utf-8") as f:
        text = json.load(f)
    T = max(len(e) for e in text["ids"])
    ids = torch.full((len(text["ids"]), T), 1, dtype=torch.long)
    mask = torch.zeros((len(text["ids"]), T), dtype=torch.long)
    for i, e in enumerate(text["ids"]):
        ids[i, :len(e)] = torch.tensor(e)
        mask[i, :len(e)] = 1
    config = config_for(family, text["vocab_size"], 32, 1, 2, 64, 514, **extra)
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
    import family_manifest
    import torch_compat  # noqa: F401  (before transformers: torch 2 names transformers 4.48 uses)
    import torch
    import transformers
    os.makedirs(a.workdir, exist_ok=True)
    torch.set_num_threads(1)
    families = a.families.split(",")
    manifest = family_manifest.open_manifest(a.workdir, families, heads=HEADS, num_labels=NUM_LABELS)
    cases = manifest["cases"]
    # two sizes per family: a small one, and one of a realistic layer shape (bert-mini's)
    for family in [f for f in ["roberta", "xlm-roberta", "distilbert"] if f in families]:
        for size, (vocab, hidden, layers, heads, ffn, positions) in {
            "small": (1000, 64, 2, 4, 256, 40),
            "mini": (5000, 256, 4, 4, 1024, 130),
        }.items():
            name = f"{family}-{size}"
            config = config_for(family, vocab, hidden, layers, heads, ffn, positions)
            ids, mask = synthetic_inputs(vocab, [11, 7, 3], seed=len(cases) + 5, pad=PAD[family])
            run_case(a.workdir, name, family, config, ids, mask, seed=100 + len(cases), sharded=size == "small")
            cases.append(name)
    # ModernBERT: global and local (windowed) layers alternating, each with its own rotary theta;
    # small: transformers' defaults otherwise (no biases, norms without bias, [CLS] pooling, a
    # decoder bias); mini: every bias on, mean pooling, local layers on the global theta, no decoder bias
    modernbert_cases = {
        "modernbert-small": ((1000, 64, 2, 4, 96, 40), {"global_attn_every_n_layers": 2, "local_attention": 4}),
        "modernbert-mini": ((5000, 256, 4, 4, 384, 130),
                            {"global_attn_every_n_layers": 3, "local_attention": 6, "local_rope_theta": None,
                             "norm_bias": True, "attention_bias": True, "mlp_bias": True, "classifier_bias": True,
                             "decoder_bias": False, "classifier_pooling": "mean", "hidden_activation": "gelu_new",
                             "global_rope_theta": 50000.0}),
    }
    for name, (shape, extra) in modernbert_cases.items():
        if "modernbert" not in families:
            continue
        config = config_for("modernbert", *shape, **extra)
        ids, mask = synthetic_inputs(shape[0], [11, 7, 3], seed=len(cases) + 5, pad=PAD["modernbert"])
        run_case(a.workdir, name, "modernbert", config, ids, mask, seed=100 + len(cases), sharded=name.endswith("small"))
        cases.append(name)
    if a.text_ids and "xlm-roberta" in families:
        text_case(a.workdir, "xlmr-text", "xlm-roberta", a.text_ids, a.xlmr_tokenizer, 300, cases)
    if a.roberta_text_ids and "roberta" in families:
        text_case(a.workdir, "roberta-text", "roberta", a.roberta_text_ids, a.roberta_tokenizer, 301, cases)
    if a.roberta_text_ids and "modernbert" in families:  # RoBERTa's layout: <s> 0, <pad> 1, </s> 2
        text_case(a.workdir, "modernbert-text", "modernbert", a.roberta_text_ids, a.roberta_tokenizer, 302, cases,
                  pad_token_id=1, bos_token_id=0, cls_token_id=0, eos_token_id=2, sep_token_id=2,
                  global_attn_every_n_layers=1)
    family_manifest.save_manifest(a.workdir, manifest)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--sentences", required=True)
    t.add_argument("--out", required=True)
    b = sub.add_parser("build")
    b.add_argument("--workdir", required=True)
    b.add_argument("--families", required=True, help="comma-separated: roberta, xlm-roberta, distilbert, modernbert")
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

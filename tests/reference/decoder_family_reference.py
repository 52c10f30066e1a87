#!/usr/bin/env python3
"""The parity oracle for kiln's decoder families (GPT-2, Llama, Mistral, Qwen2): transformers itself
builds randomly initialised models from a config (from_config, seeds fixed),
saves them (safetensors) and records what they compute, so the C++ test
(tests/test_decoder_families.cpp) can load the same directories and compare.

    decoder_family_reference.py build --workdir DIR --families gpt2,llama,mistral   (.venv-hf: transformers 4.36)
    decoder_family_reference.py build --workdir DIR --families qwen2                (.venv-hf48: transformers 4.48)
    decoder_family_reference.py tokenize --tokenizer tokenizer.json --prompt TEXT --out prompt.json
    decoder_family_reference.py text --workdir DIR --tokenizer tokenizer.json --prompt-ids prompt.json
    decoder_family_reference.py detokenize --tokenizer tokenizer.json --ids DIR/generated.json --out text.txt

"build" and "text" need torch and transformers (the .venv-hf reference
environment; Qwen2 needs transformers >= 4.37, the .venv-hf48 one, which runs
on the same Debian PyTorch 1.13 through tests/reference/torch_compat.py);
each "build" adds its families' cases to DIR/manifest.json. "tokenize" and
"detokenize" only the tokenizers package (the test venv's, new enough for
the real GPT-2 tokenizer.json). "text" saves a
GPT-2 of the tokenizer's vocabulary as DIR/gpt2-text (tokenizer.json beside
it) and writes DIR/generated.json: the ids generate() adds greedily to the
prompt's (32 new tokens, stopping at eos as generate() does); "detokenize"
writes their text as the tokenizer decodes it (special tokens skipped).

For each case (family x variant) and head (Model, LMHeadModel: GPT-2's
GPT2LMHeadModel, Llama's, Mistral's and Qwen2's *ForCausalLM) it writes
DIR/<case>/<Head>/ (config.json + model.safetensors) and
DIR/<case>/<Head>.golden.safetensors with the inputs (right-padded with id 0,
attention_mask 0 there), the outputs (last_hidden_state, or logits), the loss
(the LM head's own shifted cross-entropy on labels = ids with -100 at the
padding; the base model's mean((h * mask)^3)), every parameter's gradient of
that loss ("grad.<name>", transformers' names), all float32; the LM head's
file also holds "prompt" (2, 5) and "generated": what generate() gives greedily
for 32 new tokens (eos = the config's eos_token_id, rows that finish padded
with it). DIR/manifest.json lists the cases."""
import argparse
import copy
import json
import os
import sys

HEADS = ["Model", "LMHeadModel"]
PREFIX = {"gpt2": "GPT2", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}
LM_CLASS = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM"}
NEW_TOKENS = 32


def llama_config(family, vocab, hidden, layers, heads, kv_heads, inner, positions, **extra):
    import transformers
    cls = getattr(transformers, PREFIX[family] + "Config")
    return cls(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
               num_key_value_heads=kv_heads, intermediate_size=inner, max_position_embeddings=positions,
               bos_token_id=vocab - 2, eos_token_id=vocab - 1, initializer_range=0.2, **extra)


def config_for(family, vocab, hidden, layers, heads, positions, inner=None):
    import transformers
    # dropout off: one training step's gradients are compared, and dropout's masks differ
    return transformers.GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=hidden, n_layer=layers,
                                   n_head=heads, n_inner=inner, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   bos_token_id=vocab - 1, eos_token_id=vocab - 1, initializer_range=0.2)


def synthetic_inputs(vocab, lengths, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.zeros((len(lengths), T), dtype=torch.long)
    mask = torch.zeros((len(lengths), T), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(1, vocab - 1, (n,), generator=g)
        mask[i, :n] = 1
    return ids, mask


def run_case(workdir, name, family, config, ids, mask, seed):
    import torch
    import transformers
    from safetensors.torch import save_file
    prefix = PREFIX[family]
    os.makedirs(os.path.join(workdir, name), exist_ok=True)
    for head in HEADS:
        torch.manual_seed(seed)
        c = copy.deepcopy(config)
        cls = LM_CLASS[family] if head == "LMHeadModel" else prefix + head
        c.architectures = [cls]
        model = getattr(transformers, cls)(c)
        model.save_pretrained(os.path.join(workdir, name, head), safe_serialization=True)
        model.train()  # dropout is 0: train mode computes what eval mode does
        golden = {"input_ids": ids, "attention_mask": mask}
        if head == "Model":
            out = model(input_ids=ids, attention_mask=mask)
            golden["last_hidden_state"] = out.last_hidden_state
            loss = (out.last_hidden_state * mask.unsqueeze(-1)).pow(3).mean()
        else:
            labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            golden["logits"] = out.logits
            golden["labels"] = labels
            loss = out.loss
        golden["loss"] = loss.reshape(1)
        loss.backward()
        for n, p in model.named_parameters():
            if p.grad is not None:
                golden["grad." + n] = p.grad
        if head == "LMHeadModel":
            model.eval()
            g = torch.Generator().manual_seed(seed + 7)
            prompt = torch.randint(1, config.vocab_size - 1, (2, 5), generator=g)
            with torch.no_grad():
                generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                           max_new_tokens=NEW_TOKENS, pad_token_id=config.eos_token_id)
            golden["prompt"] = prompt
            golden["generated"] = generated
        golden = {k: (v.detach().float() if v.is_floating_point() else v).contiguous() for k, v in golden.items()}
        save_file(golden, os.path.join(workdir, name, head + ".golden.safetensors"))


def build(a):
    import family_manifest
    import torch_compat  # noqa: F401  (before transformers: torch 2 names transformers 4.48 uses)
    import torch
    import transformers
    os.makedirs(a.workdir, exist_ok=True)
    torch.set_num_threads(1)
    families = a.families.split(",")
    manifest = family_manifest.open_manifest(a.workdir, families, heads=HEADS, new_tokens=NEW_TOKENS)
    cases = manifest["cases"]
    # two sizes per family: a small one, and one of a realistic layer shape (bert-mini's widths)
    sizes = {"small": (1000, 64, 2, 4, 40, None), "mini": (5000, 256, 4, 4, 130, 768)}
    for family in [f for f in ["gpt2"] if f in families]:
        for size, (vocab, hidden, layers, heads, positions, inner) in sizes.items():
            name = f"{family}-{size}"
            config = config_for(family, vocab, hidden, layers, heads, positions, inner)
            ids, mask = synthetic_inputs(vocab, [11, 7, 3], seed=len(cases) + 5)
            run_case(a.workdir, name, family, config, ids, mask, seed=100 + len(cases))
            cases.append(name)
    # Llama-style: grouped-query (kv 2 of 4 heads) untied; multi-query with attention bias, linear rope
    # scaling, theta 500000, tied; dynamic NTK scaling past max_position_embeddings (generation runs to 37 > 16);
    # Mistral's sliding window (4, 8) shorter than the inputs and the generated sequences
    llama_cases = {
        "llama-small": ("llama", (1000, 64, 2, 4, 2, 128, 64), {}),
        "llama-mini": ("llama", (5000, 256, 4, 4, 1, 688, 130),
                       {"attention_bias": True, "rope_scaling": {"type": "linear", "factor": 2.0},
                        "rope_theta": 500000.0, "tie_word_embeddings": True}),
        "llama-dynamic": ("llama", (1000, 64, 2, 4, 4, 128, 16), {"rope_scaling": {"type": "dynamic", "factor": 2.0}}),
        "mistral-small": ("mistral", (1000, 64, 2, 4, 2, 128, 64), {"sliding_window": 4}),
        "mistral-mini": ("mistral", (5000, 256, 4, 8, 2, 688, 130), {"sliding_window": 8}),
        # Qwen2: biases on q, k, v only; grouped-query untied, and multi-query tied with theta 1e6 as
        # Qwen2-0.5B has (its eos is also its pad: pad_token_id set)
        "qwen2-small": ("qwen2", (1000, 64, 2, 4, 2, 128, 64), {}),
        "qwen2-mini": ("qwen2", (5000, 256, 4, 8, 1, 688, 130),
                       {"tie_word_embeddings": True, "rope_theta": 1000000.0, "pad_token_id": 4999}),
    }
    for name, (family, shape, extra) in llama_cases.items():
        if family not in families:
            continue
        config = llama_config(family, *shape, **extra)
        ids, mask = synthetic_inputs(config.vocab_size, [11, 7, 3], seed=len(cases) + 5)
        run_case(a.workdir, name, family, config, ids, mask, seed=100 + len(cases))
        cases.append(name)
    family_manifest.save_manifest(a.workdir, manifest)


def tokenize(a):
    from tokenizers import Tokenizer
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"ids": Tokenizer.from_file(a.tokenizer).encode(a.prompt).ids}, f)


def detokenize(a):
    from tokenizers import Tokenizer
    with open(a.ids, encoding="utf-8") as f:
        ids = json.load(f)["new_ids"]
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(Tokenizer.from_file(a.tokenizer).decode(ids, skip_special_tokens=True) + "\n")


def text(a):
    import shutil
    import torch
    import transformers
    with open(a.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    vocab = max(ids) + 1
    eos = tok["model"]["vocab"].get("<|endoftext|>", vocab - 1)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos,
                                     eos_token_id=eos, initializer_range=0.2, architectures=["GPT2LMHeadModel"])
    torch.manual_seed(400)
    model = transformers.GPT2LMHeadModel(config).eval()
    out = os.path.join(a.workdir, "gpt2-text")
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(a.tokenizer, os.path.join(out, "tokenizer.json"))
    with open(a.prompt_ids, encoding="utf-8") as f:
        prompt = torch.tensor([json.load(f)["ids"]])
    with torch.no_grad():
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                   max_new_tokens=NEW_TOKENS, pad_token_id=eos)
    with open(os.path.join(a.workdir, "generated.json"), "w", encoding="utf-8") as f:
        json.dump({"new_ids": generated[0, prompt.shape[1]:].tolist()}, f)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--workdir", required=True)
    b.add_argument("--families", required=True, help="comma-separated: gpt2, llama, mistral, qwen2")
    t = sub.add_parser("tokenize")
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--prompt", required=True)
    t.add_argument("--out", required=True)
    x = sub.add_parser("text")
    x.add_argument("--workdir", required=True)
    x.add_argument("--tokenizer", required=True)
    x.add_argument("--prompt-ids", required=True)
    d = sub.add_parser("detokenize")
    d.add_argument("--tokenizer", required=True)
    d.add_argument("--ids", required=True)
    d.add_argument("--out", required=True)
    a = ap.parse_args()
    {"build": build, "tokenize": tokenize, "text": text, "detokenize": detokenize}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())

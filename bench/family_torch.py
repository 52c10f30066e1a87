#!/usr/bin/env python3
"""The transformers side of `kiln bench family` (tools/bench_family.cpp): the
same config.json built by transformers' Auto classes (from_config, its
default attention implementation), the same training step (masked-LM with
15% of the positions labelled for encoders, causal-LM with labels = ids for
decoders; AdamW lr 1e-4, weight decay 0.01 on all parameters, torch's fused
CPU kernel; median of --steps after 2 warm-up steps) and, for decoders,
greedy decoding on the KV cache timed per one-token step (median of --new
steps, after a warm-up run).

The masked-LM head runs on the labelled rows only, as kiln's does (the work
of ../shared/peer/hf_bert_step.py --masked-head): the base model, the rows
whose label is not -100, the family's head on them (ModernBERT's own
sparse_prediction does this). --full-head runs transformers' forward with
labels as is (the head at every position) instead.

    family_torch.py --config CONFIG.json [--batch 8] [--seq 128] [--steps 5] [--new 32] [--threads N]

Prints lines in kiln's format with "torch" in place of "bench":
    torch family model_type=T task=... batch=B seq=S step_s=X train_tokens_per_s=N
    torch family-generate model_type=T prompt=P new=N ms_per_token=X generate_tokens_per_s=N
Run it in the torch 2.15 + transformers 5 peer venv (../shared/peer/README.md)."""
import argparse
import inspect
import json
import statistics
import time

import torch
import transformers


def masked_head(model):
    """The family's masked-LM head, rows (M, C) -> logits (M, V)."""
    if hasattr(model, "cls"):  # BertForMaskedLM
        return model.cls
    if hasattr(model, "lm_head"):  # RobertaForMaskedLM, XLMRobertaForMaskedLM
        return model.lm_head
    if hasattr(model, "vocab_projector"):  # DistilBertForMaskedLM
        return lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))
    raise SystemExit(f"family_torch.py: no masked-head path for {type(model).__name__}; use --full-head")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--full-head", action="store_true", help="masked LM: the head at every position")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    with open(a.config) as f:
        fields = json.load(f)
    if fields["model_type"] == "modernbert" and not a.full_head:
        fields["sparse_prediction"] = True
    config = transformers.AutoConfig.for_model(**fields)
    decoder = config.model_type in ("gpt2", "llama", "mistral", "qwen2")
    torch.manual_seed(0)
    cls = transformers.AutoModelForCausalLM if decoder else transformers.AutoModelForMaskedLM
    model = cls.from_config(config)
    model.train()
    vocab = config.vocab_size
    ids = torch.randint(min(5, vocab - 1), vocab, (a.batch, a.seq))
    mask = torch.ones_like(ids)
    labels = ids if decoder else torch.where(torch.rand(a.batch, a.seq) < 0.15, ids, torch.full_like(ids, -100))
    fused = {"fused": True} if "fused" in inspect.signature(torch.optim.AdamW).parameters else {}  # torch >= 2.0
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **fused)
    head = None if decoder or a.full_head or config.model_type == "modernbert" else masked_head(model)
    rows = labels != -100

    def loss():
        if head is None:
            return model(input_ids=ids, attention_mask=mask, labels=labels).loss
        h = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[rows]  # (M, C)
        return torch.nn.functional.cross_entropy(head(h), labels[rows])

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    times = []
    for i in range(a.steps + 2):
        t0 = time.perf_counter()
        step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    print(f"torch family model_type={config.model_type} task={'causal-lm' if decoder else 'masked-lm'} "
          f"batch={a.batch} seq={a.seq} step_s={step_s:.4f} train_tokens_per_s={a.batch * a.seq / step_s:.0f}",
          flush=True)
    if not decoder:
        return
    model.eval()
    prompt = torch.randint(min(5, vocab - 1), vocab, (1, a.seq - a.new))
    per_token = []
    # transformers 5 names the KV cache "cache" (argument and output), 4.x "past_key_values"
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        for rnd in range(2):  # the first round warms up
            out = model(input_ids=prompt, use_cache=True)
            past, nxt = out[cache_arg], out.logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(a.new):
                t0 = time.perf_counter()
                out = model(input_ids=nxt, **{cache_arg: past}, use_cache=True)
                past, nxt = out[cache_arg], out.logits[:, -1].argmax(-1, keepdim=True)
                int(nxt)
                if rnd == 1:
                    per_token.append(time.perf_counter() - t0)
    ms = statistics.median(per_token) * 1e3
    print(f"torch family-generate model_type={config.model_type} prompt={a.seq - a.new} new={a.new} "
          f"ms_per_token={ms:.3f} generate_tokens_per_s={1e3 / ms:.1f}")


if __name__ == "__main__":
    main()

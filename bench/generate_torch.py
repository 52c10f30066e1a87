"""transformers' generate() per-token cost with and without its KV cache on the
shapes of bench/bench_generate.cpp (GPT2LMHeadModel for --family gpt and gpt2,
LlamaForCausalLM for llama), greedy, one sequence; the same measurement as
bench_generate.

Usage: generate_torch.py [--family gpt|gpt2|llama] [--layers 4] [--embd 256] [--heads 4]
                         [--kv-heads H] [--inner 4*embd] [--vocab 256]
                         [--context 256] [--new 32] [--rounds 5] [--threads N]
Prints "torch cache=on ms_per_token=X", "torch cache=off ms_per_token=Y", "speedup=Y/X".
Run with .venv-hf/bin/python (Debian's torch 1.13 + transformers 4.36).
"""
import argparse
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("embd", 256), ("heads", 4), ("vocab", 256), ("context", 256), ("new", 32),
                          ("rounds", 5), ("threads", 0), ("kv-heads", 0), ("inner", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--family", default="gpt", choices=["gpt", "gpt2", "llama"])
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.family == "llama":
        config = LlamaConfig(vocab_size=a.vocab, max_position_embeddings=512, hidden_size=a.embd,
                             num_hidden_layers=a.layers, num_attention_heads=a.heads,
                             num_key_value_heads=a.kv_heads or a.heads, intermediate_size=a.inner or 4 * a.embd,
                             bos_token_id=None, eos_token_id=None)
        model = LlamaForCausalLM(config).eval()
    else:
        config = GPT2Config(vocab_size=a.vocab, n_positions=512, n_embd=a.embd, n_layer=a.layers, n_head=a.heads,
                            n_inner=a.inner or None, activation_function="gelu_new", bos_token_id=None,
                            eos_token_id=None, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
        model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, a.vocab, (1, a.context - a.new))
    mask = torch.ones_like(prompt)

    def seconds(n, cache):
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=mask, max_new_tokens=n, do_sample=False, eos_token_id=None,
                                 use_cache=cache, pad_token_id=0)
        assert out.shape[1] == prompt.shape[1] + n
        return time.perf_counter() - t0

    on, off = [], []
    for _ in range(a.rounds):
        for cache in (True, False):
            per_token = (seconds(a.new, cache) - seconds(1, cache)) / (a.new - 1)
            (on if cache else off).append(per_token * 1e3)
    print(f"family={a.family} shape layers={a.layers} embd={a.embd} heads={a.heads} vocab={a.vocab} context={a.context} new={a.new} "
          f"threads={torch.get_num_threads()}")
    print(f"torch cache=on ms_per_token={statistics.median(on):.3f}")
    print(f"torch cache=off ms_per_token={statistics.median(off):.3f}")
    print(f"speedup={statistics.median(off) / statistics.median(on):.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The transformers + PyTorch side of `kiln bench train --memory`: peak
resident memory per phase (forward, backward, optimizer) of one BERT
masked-LM training step, the configuration `kiln bench train` runs (preset
shape, batch, sequence, the MLM head on the ~15% masked positions, AdamW).

    python3 bench/memory_torch.py --shape bert-base --batch 8 --seq 512 [--freeze-all-but-head]
        [--lora-r 8] [--gradient-checkpointing] [--steps 3]

Each phase starts by resetting the process's resident peak (writing 5 to
/proc/self/clear_refs, Linux's VmHWM reset) and ends reading VmHWM, so a
phase's figure is the largest resident set seen during it; PyTorch's CPU
allocator keeps no statistics of its own. The step's last run is reported
(the first allocate the optimizer's state). Prints one line:
    torch memory shape=... forward_peak_rss=B backward_peak_rss=B optimizer_peak_rss=B step_s=S
Run with the peer environment (../shared/peer/README.md: torch 2.15 +
transformers 5) or .venv-hf (torch 1.13 + transformers 4.36).
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import transformers

SHAPES = {"bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4), "bert-small": (4, 512, 8), "bert-base": (12, 768, 12)}


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="bert-base", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--freeze-all-but-head", action="store_true")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    L, H, A = SHAPES[a.shape]
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                     intermediate_size=4 * H, max_position_embeddings=max(512, a.seq))
    model = transformers.BertForMaskedLM(config)
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if a.freeze_all_but_head:
        for n, p in model.named_parameters():
            p.requires_grad = n.startswith("cls.") and "decoder" not in n and "word_embeddings" not in n
    if a.lora_r > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, target_modules=["query", "value"]))
    model.train()
    bert, cls = (model.base_model.model if a.lora_r > 0 else model).bert, (model.base_model.model if a.lora_r > 0 else model).cls
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(5, 30522, (a.batch, a.seq))
    sel = torch.rand(a.batch, a.seq) < 0.15
    labels = ids[sel]
    times, peaks = [], None
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        reset_peak()
        h = bert(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        loss = F.cross_entropy(cls(h[sel]), labels)
        fwd = peak_rss()
        reset_peak()
        loss.backward()
        bwd = peak_rss()
        del h, loss
        reset_peak()
        opt.step()
        step = peak_rss()
        times.append(time.perf_counter() - t0)
        peaks = (fwd, bwd, step)
    print(f"torch memory shape={a.shape} batch={a.batch} seq={a.seq} forward_peak_rss={peaks[0]} "
          f"backward_peak_rss={peaks[1]} optimizer_peak_rss={peaks[2]} step_s={statistics.median(times):.4f} "
          f"torch={torch.__version__} transformers={transformers.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# tools/gpu_torch_step.py: the PyTorch + Hugging Face peer of `kiln bench train
# --device cuda --shape bert-base --amp bf16` (tools/gpu_check.sh, step torch):
# BERT-base masked-LM training steps with bf16 autocast, SDPA attention and
# fused AdamW, timed with CUDA events. BATCH and SEQ come from the environment.
# Prints "... N seq/s ..." for the check's kiln/torch ratio.
import os, time, torch, transformers
from transformers import BertConfig, BertForMaskedLM
B, S = int(os.environ["BATCH"]), int(os.environ["SEQ"])
torch.manual_seed(0)
cfg = BertConfig(attn_implementation="sdpa")  # bert-base-uncased shape
model = BertForMaskedLM(cfg).cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, cfg.vocab_size, (B, S), device="cuda")
labels = torch.full((B, S), -100, device="cuda")
mask = torch.rand(B, S, device="cuda") < 0.15
labels[mask] = ids[mask]
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    return loss
for _ in range(5): step()
torch.cuda.synchronize()
n = 30
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(n): loss = step()
end.record(); torch.cuda.synchronize()
sec = start.elapsed_time(end) / 1e3 / n
L, H, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
nonemb = sum(p.numel() for n_, p in model.named_parameters() if "embeddings" not in n_)
flops = 6 * nonemb * B * S + 12 * L * B * S * S * H + 6 * B * S * H * V  # matmuls, attention, MLM decoder
peak = 989e12  # dense bf16, H100/H200 SXM datasheet
print(f"torch {torch.__version__} transformers {transformers.__version__}: step {sec*1e3:.2f} ms  "
      f"{B/sec:.1f} seq/s  MFU {flops/sec/peak*100:.1f}% (of {peak/1e12:.0f} TFLOP/s)  loss {loss.item():.3f}")
print(f"peak allocated {torch.cuda.max_memory_allocated()/2**30:.2f} GiB, reserved {torch.cuda.max_memory_reserved()/2**30:.2f} GiB")

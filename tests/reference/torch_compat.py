"""Lets transformers 4.48 (the .venv-hf48 reference environment: Qwen2 and
ModernBERT) run on Debian's PyTorch 1.13, the only PyTorch a test machine
installs without pulling gigabytes of CUDA wheels. Each shim supplies a torch
2 name that transformers' modelling code touches, with torch 1.13's own
computation of the same thing; none changes what a model computes:

- torch.compile: a decorator that returns the function unchanged (eager is
  what compile must reproduce; ModernBERT decorates helpers with it);
- nn.LayerNorm(..., bias=False) (torch >= 2.1): the same layer with its bias
  removed, so F.layer_norm runs without one (ModernBERT's norms);
- generate()'s FSDP check imports torch.distributed.fsdp, which fails to
  import on Python 3.11 under torch 1.13: a model built here is never FSDP.

Import it before transformers. Under a PyTorch that has these names it does
nothing."""
import inspect

import torch

if not hasattr(torch, "compile"):
    torch.compile = lambda *args, **kwargs: (lambda fn: fn)

if "bias" not in inspect.signature(torch.nn.LayerNorm.__init__).parameters:
    class _LayerNorm(torch.nn.LayerNorm):
        def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
            super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)
            if not bias:
                self.bias = None

    torch.nn.LayerNorm = _LayerNorm

try:
    import torch.distributed.fsdp  # noqa: F401
except Exception:  # torch 1.13 on Python 3.11: a dataclass default its module defines is refused
    import transformers.generation.utils as _generation_utils
    if hasattr(_generation_utils, "is_fsdp_managed_module"):
        _generation_utils.is_fsdp_managed_module = lambda module: False

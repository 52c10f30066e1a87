#!/usr/bin/env python3
"""Convert a PyTorch checkpoint (pytorch_model.bin) into model.safetensors.

    convert_pytorch_to_safetensors.py MODEL_DIR            # writes MODEL_DIR/model.safetensors
    convert_pytorch_to_safetensors.py IN.bin OUT.safetensors

Uses PyTorch (Debian's python3-torch works) and the `safetensors` package.
Tensors that share storage (a tied decoder) are written once: the duplicate
"cls.predictions.decoder.weight" is dropped, since kiln and transformers re-tie
it on load; other shared tensors are cloned. Non-tensor entries are an error.
"""
import os
import sys

import torch
from safetensors.torch import save_file

TIED = {"cls.predictions.decoder.weight"}


def convert(src, dst):
    state = torch.load(src, map_location="cpu")
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        sys.exit(f"{src}: expected a state dict, got {type(state).__name__}")
    out, seen = {}, {}
    for name, t in state.items():
        if not torch.is_tensor(t):
            sys.exit(f"{src}: entry '{name}' is not a tensor ({type(t).__name__})")
        if name in TIED and "bert.embeddings.word_embeddings.weight" in state:
            continue
        key = (t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr())
        t = t.detach().contiguous()
        if key in seen and t.numel() > 0:
            t = t.clone()
        seen[key] = name
        out[name] = t
    tmp = dst + ".tmp"
    save_file(out, tmp, metadata={"format": "pt"})
    os.replace(tmp, dst)
    print(f"wrote {dst}: {len(out)} tensors")


def main():
    args = sys.argv[1:]
    if len(args) == 1 and os.path.isdir(args[0]):
        convert(os.path.join(args[0], "pytorch_model.bin"), os.path.join(args[0], "model.safetensors"))
    elif len(args) == 2:
        convert(args[0], args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""Cross-compatibility reference for kiln's safetensors reader and writer.

  write_safetensors.py write OUT   save the reference tensors with the Python
                                   `safetensors` library (metadata {"format": "pt"})
  write_safetensors.py check IN    load IN with the library and check that it
                                   holds exactly the reference tensors and metadata

The reference tensors are mirrored in tests/test_safetensors.cpp (reference_entries).
"""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def reference_tensors():
    return {
        "emb.weight": (torch.arange(12, dtype=torch.float32) - 5).mul(0.25).reshape(3, 4),
        "f64": torch.tensor([1.5, -2.25], dtype=torch.float64),
        "half": (torch.arange(5, dtype=torch.float32) * 0.5 - 1).to(torch.float16),
        "bf": torch.tensor([[1.0, -2.0], [0.5, 3.0]]).to(torch.bfloat16),
        "ids": torch.tensor([-1, 0, 1 << 40], dtype=torch.int64),
        "i32": torch.tensor([[7], [-8]], dtype=torch.int32),
        "mask": torch.tensor([True, False, False, True]),
        "u8": torch.tensor([0, 128, 255], dtype=torch.uint8),
        "i16": torch.tensor([-300, 300], dtype=torch.int16),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


METADATA = {"format": "pt"}


def check(path):
    expected = reference_tensors()
    got = load_file(path)
    if sorted(got) != sorted(expected):
        sys.exit(f"names differ: {sorted(got)} vs {sorted(expected)}")
    for name, want in expected.items():
        have = got[name]
        if have.dtype != want.dtype or have.shape != want.shape or not torch.equal(have, want):
            sys.exit(f"tensor {name}: got {have.dtype} {tuple(have.shape)} {have}, want {want}")
    with safe_open(path, framework="pt") as f:
        if f.metadata() != METADATA:
            sys.exit(f"metadata {f.metadata()} != {METADATA}")
    print("ok")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "write":
        save_file(reference_tensors(), sys.argv[2], metadata=METADATA)
    else:
        check(sys.argv[2])


if __name__ == "__main__":
    main()

"""Reference logits processing from transformers' generation warpers, for
tests/test_generation.cpp.

Usage: logits_reference.py OUT.safetensors

Writes "logits" (4, 64) float32 (seeded, a few rows with repeated values) and,
for each case below, "case_N" = the logits after TemperatureLogitsWarper,
TopKLogitsWarper and TopPLogitsWarper in the order generate() applies them
(transformers 4.36 _get_logits_warper). Metadata "cases" lists the settings as
JSON: [[temperature, top_k, top_p], ...]. "history" (4, 12) int64 (ids with
repeats) and "penalty_N" = RepetitionPenaltyLogitsProcessor(PENALTIES[N]) of
the logits given that history; metadata "penalties" lists them.
"""
import json
import sys

import torch
from safetensors.torch import save_file
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper, RepetitionPenaltyLogitsProcessor)

PENALTIES = [1.3, 0.7, 2.0]
CASES = [[0.7, 0, 1.0], [1.0, 5, 1.0], [1.0, 0, 0.9], [0.8, 10, 0.95], [1.3, 1, 1.0], [1.0, 0, 0.01],
         [0.5, 50, 0.5], [1.0, 1000, 1.0], [2.0, 3, 0.3], [1.0, 0, 0.999]]


def main(out):
    torch.manual_seed(0)
    logits = torch.randn(4, 64) * 3.0
    logits[3, 10:20] = 1.5  # ties at the top-k / top-p boundary
    tensors = {"logits": logits.clone()}
    ids = torch.zeros(4, 1, dtype=torch.long)
    for n, (temperature, top_k, top_p) in enumerate(CASES):
        scores = logits.clone()
        if temperature != 1.0:
            scores = TemperatureLogitsWarper(temperature)(ids, scores)
        if top_k != 0:
            scores = TopKLogitsWarper(top_k)(ids, scores)
        if top_p < 1.0:
            scores = TopPLogitsWarper(top_p)(ids, scores)
        tensors[f"case_{n}"] = scores.contiguous()
    history = torch.randint(0, 64, (4, 12))
    history[:, 6:] = history[:, :6]  # every id at least twice
    tensors["history"] = history
    for n, p in enumerate(PENALTIES):
        tensors[f"penalty_{n}"] = RepetitionPenaltyLogitsProcessor(p)(history, logits.clone()).contiguous()
    save_file(tensors, out, metadata={"cases": json.dumps(CASES), "penalties": json.dumps(PENALTIES)})


if __name__ == "__main__":
    main(sys.argv[1])

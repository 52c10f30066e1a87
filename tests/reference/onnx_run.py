"""Runs an exported ONNX model in ONNX Runtime (CPU) on several input sets:
the reference side of tests/test_onnx_export.cpp.

  onnx_run.py MODEL.onnx INPUTS.safetensors OUTPUTS.safetensors [--threads N]

INPUTS holds tensors named "<set>.<input name>" (set = 0, 1, ...); OUTPUTS
gets "<set>.<output name>" for every output of every set. Prints one line per
set: the set and its outputs' shapes.
"""
import argparse
import collections

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file, save_file


def session(model, threads):
    """A CPU session with `threads` intra-op threads and one inter-op thread
    (also bench/onnxruntime_forward.py's)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("outputs")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    sess = session(a.model, a.threads)
    sets = collections.defaultdict(dict)
    for key, value in load_file(a.inputs).items():
        s, name = key.split(".", 1)
        sets[int(s)][name] = value
    out = {}
    for s in sorted(sets):
        feeds = {i.name: sets[s][i.name] for i in sess.get_inputs()}
        results = sess.run(None, feeds)
        for o, r in zip(sess.get_outputs(), results):
            out[f"{s}.{o.name}"] = np.ascontiguousarray(r)
        print(s, " ".join(f"{o.name}{tuple(r.shape)}" for o, r in zip(sess.get_outputs(), results)))
    save_file(out, a.outputs)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tokens/s of kiln's BERT WordPiece tokenizer beside Hugging Face `tokenizers`.

Runs, on the same input in the same run:
  kiln: build/bin/bench_tokenizer (encode_batch, 1 thread and all threads)
  HF:   BertWordPieceTokenizer.encode_batch and .encode_batch_fast (no
        offsets) in a subprocess per thread count (RAYON_NUM_THREADS=1 and
        =all; rayon reads it once per process)
Both count the ids of every line including [CLS]/[SEP] and report the best
of --repeat timed runs after one warm-up.

usage: tokenizer_vs_hf.py [--bench build/bin/bench_tokenizer] [--vocab V]
                          [--threads N] [--repeat R] [FILE...]
Defaults: the files sst2/train.tsv and wikitext-2/valid.txt under KILN_DATA
(default ../shared/data beside the repository).
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hf_worker(vocab, files, repeat):
    from tokenizers import BertWordPieceTokenizer

    texts = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        texts += [line.decode("utf-8", errors="replace") for line in lines]
    tok = BertWordPieceTokenizer(vocab, lowercase=True)
    result = {"lines": len(texts)}
    for method in ("encode_batch", "encode_batch_fast"):
        encode = getattr(tok._tokenizer, method)  # the Rust-backed Tokenizer
        encode(texts)  # warm-up
        best, tokens = float("inf"), 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            encodings = encode(texts)
            best = min(best, time.perf_counter() - t0)
            tokens = sum(len(e.ids) for e in encodings)
        result[method] = {"tokens": tokens, "best_s": best}
    print(json.dumps(result))


def run_hf(vocab, files, repeat, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run(
        [sys.executable, __file__, "--hf-worker", "--vocab", vocab, "--repeat", str(repeat)] + files,
        env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_kiln(bench, vocab, files, repeat, threads):
    out = subprocess.run([bench, vocab] + files + ["--repeat", str(repeat), "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    results = {}
    for line in out.splitlines():
        fields = dict(kv.split("=") for kv in line.split()[1:])
        results[int(fields["threads"])] = {
            "lines": int(fields["lines"]), "tokens": int(fields["tokens"]), "best_s": float(fields["best_s"])}
    return results


def main():
    data = os.environ.get("KILN_DATA", os.path.join(REPO, "..", "shared", "data"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*")
    p.add_argument("--bench", default=os.path.join(REPO, "build", "bin", "bench_tokenizer"))
    p.add_argument("--vocab", default=os.path.join(data, "vocab", "bert-base-uncased-vocab.txt"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    files = args.files or [os.path.join(data, "sst2", "train.tsv"), os.path.join(data, "wikitext-2", "valid.txt")]
    if args.hf_worker:
        hf_worker(args.vocab, files, args.repeat)
        return 0

    thread_counts = [1] + ([args.threads] if args.threads > 1 else [])
    kiln = run_kiln(args.bench, args.vocab, files, args.repeat, args.threads)
    print(f"input: {', '.join(files)}")
    print(f"{'threads':>7} {'kiln tok/s':>14} {'HF encode_batch':>16} {'HF ..._fast':>14}"
          f" {'kiln/HF best':>13}   tokens")
    ok = True
    for t in thread_counts:
        hf = run_hf(args.vocab, files, args.repeat, t)
        k = kiln[t]
        rates = []
        for method in ("encode_batch", "encode_batch_fast"):
            if hf[method]["tokens"] != k["tokens"] or hf["lines"] != k["lines"]:
                print(f"token count mismatch at {t} threads: kiln {k} HF {method} {hf[method]}")
                ok = False
            rates.append(hf[method]["tokens"] / hf[method]["best_s"])
        k_rate = k["tokens"] / k["best_s"]
        print(f"{t:>7} {k_rate:>14,.0f} {rates[0]:>16,.0f} {rates[1]:>14,.0f}"
              f" {k_rate / max(rates):>12.2f}x   {k['tokens']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

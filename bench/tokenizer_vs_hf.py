#!/usr/bin/env python3
"""Tokens/s of kiln's tokenizers beside Hugging Face `tokenizers`, per family.

For GPT-2 byte-level BPE and XLM-R SentencePiece Unigram (their
tokenizer.json in KILN_DATA/tokenizers) and BERT WordPiece (the
bert-base-uncased vocab.txt), on the same input in the same run:
  kiln: `kiln bench tokenizer --tokenizer T` (Tokenizer::encode_batch: full
        encodings with offsets, 1 thread and --threads), and for BERT also
        build/bin/bench_tokenizer (BertTokenizer, ids only: what training uses)
  HF:   Tokenizer.encode_batch and encode_batch_fast (no offsets), in a
        subprocess per thread count (RAYON_NUM_THREADS is read once per process)
Rounds alternate kiln and HF (--rounds); each run reports the median of
--repeat timed passes after a warm-up, and the table shows the median over
rounds. kiln / HF divides by HF's faster method. Token counts (special tokens
included) must agree. docs/performance.md records the figures.

usage: tokenizer_vs_hf.py [--kiln build/bin/kiln] [--threads N] [--rounds R]
                          [--repeat K] [--families gpt2,xlm-roberta,bert] [FILE...]
Default input: KILN_DATA/wikitext-2/valid.txt (KILN_DATA defaults to
../shared/data beside the repository).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_texts(files):
    texts = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        texts += [line.decode("utf-8", errors="replace") for line in lines]
    return texts


def hf_worker(family, path, files, repeat):
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    texts = read_texts(files)
    tok = BertWordPieceTokenizer(path, lowercase=True)._tokenizer if family == "bert" \
        else Tokenizer.from_file(path)
    result = {"lines": len(texts)}
    for method in ("encode_batch", "encode_batch_fast"):
        encode = getattr(tok, method)
        encode(texts)  # warm-up
        times, tokens = [], 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            encodings = encode(texts)
            times.append(time.perf_counter() - t0)
            tokens = sum(len(e.ids) for e in encodings)
        result[method] = {"tokens": tokens, "s": statistics.median(times)}
    print(json.dumps(result))


def run_hf(family, path, files, repeat, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, __file__, "--hf-worker", family, "--path", path,
                          "--repeat", str(repeat)] + files,
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def parse_fields(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def run_kiln(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = {}
    for line in out.splitlines():
        f = parse_fields(line)
        if "threads" not in f:
            continue
        seconds = float(f.get("median_s", f.get("best_s")))
        results[int(f["threads"])] = {"lines": int(f["lines"]), "tokens": int(f["tokens"]), "s": seconds}
    return results


def main():
    data = os.environ.get("KILN_DATA", os.path.join(REPO, "..", "shared", "data"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*")
    p.add_argument("--kiln", default=os.path.join(REPO, "build", "bin", "kiln"))
    p.add_argument("--bench", default=os.path.join(REPO, "build", "bin", "bench_tokenizer"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--families", default="gpt2,xlm-roberta,bert")
    p.add_argument("--hf-worker", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    files = args.files or [os.path.join(data, "wikitext-2", "valid.txt")]
    if args.hf_worker:
        hf_worker(args.hf_worker, args.path, files, args.repeat)
        return 0

    paths = {
        "gpt2": os.path.join(data, "tokenizers", "gpt2", "tokenizer.json"),
        "xlm-roberta": os.path.join(data, "tokenizers", "xlm-roberta", "tokenizer.json"),
        "bert": os.path.join(data, "vocab", "bert-base-uncased-vocab.txt"),
    }
    threads = [1] + ([args.threads] if args.threads > 1 else [])
    print(f"input: {', '.join(files)}; {args.rounds} alternating rounds, median of {args.repeat} passes each")
    print(f"{'family':<12} {'kiln path':<22} {'threads':>7} {'kiln tok/s':>12} {'HF batch':>11}"
          f" {'HF fast':>11} {'kiln/HF':>8}")
    ok = True
    for family in args.families.split(","):
        path = paths[family]
        kiln_cmds = {"Tokenizer (offsets)": [args.kiln, "bench", "tokenizer", "--tokenizer", path] + files +
                     ["--threads", str(args.threads), "--repeat", str(args.repeat)]}
        if family == "bert" and os.path.exists(args.bench):
            kiln_cmds["BertTokenizer (ids)"] = [args.bench, path] + files + [
                "--repeat", str(args.repeat), "--threads", str(args.threads)]
        kiln_runs = {name: [] for name in kiln_cmds}
        hf_runs = {t: [] for t in threads}
        for _ in range(args.rounds):
            for name, cmd in kiln_cmds.items():
                kiln_runs[name].append(run_kiln(cmd))
            for t in threads:
                hf_runs[t].append(run_hf(family, path, files, args.repeat, t))
        for t in threads:
            hf_tokens = hf_runs[t][0]["encode_batch"]["tokens"]
            hf_rate = {m: statistics.median(hf_tokens / r[m]["s"] for r in hf_runs[t])
                       for m in ("encode_batch", "encode_batch_fast")}
            for name, runs in kiln_runs.items():
                k_tokens = runs[0][t]["tokens"]
                if k_tokens != hf_tokens:
                    print(f"token count mismatch ({family}, {name}, {t} threads): kiln {k_tokens} HF {hf_tokens}")
                    ok = False
                k_rate = statistics.median(k_tokens / r[t]["s"] for r in runs)
                print(f"{family:<12} {name:<22} {t:>7} {k_rate:>12,.0f} {hf_rate['encode_batch']:>11,.0f}"
                      f" {hf_rate['encode_batch_fast']:>11,.0f} {k_rate / max(hf_rate.values()):>7.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What the emulated CUDA device ran (Note [Emulated CUDA device] in cuda/emu/emu.h).

Every process of an emulated build run with KILN_EMU_COVERAGE=FILE appends
"kernel NAME COUNT" and "api NAME COUNT" lines to FILE at exit. This sums them
and compares them with the source: every kernel launch site (KILN_LAUNCH in
cuda/*.cu, cuda/*.cuh) and every CUDA runtime call kiln's CUDA backend makes
(cuda/*.cpp, cuda/*.cu, outside cuda/emu/).

  tools/emu_coverage.py [--source DIR] [--check] [--write-doc docs/gpu.md] FILE
    --check      exit 1 when a kernel was never launched or a runtime call
                 kiln makes was never made
    --write-doc  replace the section between the markers
                 <!-- emu_coverage: begin --> and <!-- emu_coverage: end -->
"""
import argparse
import collections
import datetime
import glob
import os
import re
import subprocess
import sys

BEGIN = "<!-- emu_coverage: begin -->"
# Runtime calls one emulated device cannot reach, with the reason.
UNREACHABLE = {"cudaMemcpyPeerAsync": "a peer copy needs two devices; the emulator has one"}
END = "<!-- emu_coverage: end -->"


def norm(name):
    return re.sub(r"\s+", "", name)


def launch_sites(src):
    """{kernel name as KILN_LAUNCH stringizes it: [file:line, ...]}"""
    sites = collections.defaultdict(list)
    files = sorted(glob.glob(os.path.join(src, "cuda", "*.cu")) + glob.glob(os.path.join(src, "cuda", "*.cuh")))
    for f in files:
        text = open(f, encoding="utf-8").read()
        for m in re.finditer(r"KILN_LAUNCH\(", text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if text[max(0, m.start() - 8):m.start()].endswith("define ") or "//" in text[line_start:m.start()]:
                continue
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            args, parts, cur, d = text[m.end():i - 1], [], "", 0
            for ch in args:
                if ch in "(<[":
                    d += 1
                elif ch in ")>]":
                    d -= 1
                if ch == "," and d == 0 and len(parts) < 4:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += ch
            parts.append(cur)
            if len(parts) != 5:
                continue
            line = text.count("\n", 0, m.start()) + 1
            sites[norm(parts[4])].append(f"{os.path.relpath(f, src)}:{line}")
    return sites


def runtime_calls(src):
    """CUDA runtime functions the emulated build's backend calls (cuDNN's attention is not built there)."""
    calls = set()
    for f in glob.glob(os.path.join(src, "cuda", "*.c*")) + glob.glob(os.path.join(src, "cuda", "*.h")):
        if os.path.basename(f).startswith("attention_cudnn"):
            continue
        for name in re.findall(r"\b(cuda[A-Z]\w*)\s*\(", open(f, encoding="utf-8").read()):
            calls.add(name)
    declared = set(re.findall(r"\b(cuda[A-Z]\w*)\s*\(",
                              open(os.path.join(src, "cuda", "emu", "include", "cuda_runtime_api.h")).read()))
    return calls & declared


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--write-doc")
    ap.add_argument("file")
    a = ap.parse_args()
    if not os.path.exists(a.file):
        print(f"emu_coverage: {a.file}: no such file (was the emulated suite run with KILN_EMU_COVERAGE?)")
        return 2
    kernels, apis = collections.Counter(), collections.Counter()
    for line in open(a.file, encoding="utf-8", errors="replace"):
        parts = line.rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].strip().isdigit():
            continue
        kind, _, name = parts[0].partition(" ")
        (kernels if kind == "kernel" else apis if kind == "api" else collections.Counter())[norm(name)] += int(parts[1])
    sites = launch_sites(a.source)
    calls = runtime_calls(a.source)
    missing_k = sorted(k for k in sites if kernels[k] == 0)
    missing_a = sorted(c for c in calls if apis[c] == 0 and c not in UNREACHABLE)
    made = sum(1 for c in calls if apis[c] > 0)
    unreachable = sorted(c for c in calls if c in UNREACHABLE and apis[c] == 0)
    print(f"emu_coverage: {len(sites) - len(missing_k)} of {len(sites)} kernels launched, "
          f"{made} of {len(calls)} runtime calls made"
          + (f" ({len(unreachable)} unreachable on one device: {', '.join(unreachable)})" if unreachable else ""))
    for k in missing_k:
        print(f"  kernel never launched: {k} ({', '.join(sites[k])})")
    for c in missing_a:
        print(f"  runtime call never made: {c}")
    if a.write_doc:
        try:
            commit = subprocess.run(["git", "-C", a.source, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
        except OSError:
            commit = "?"
        out = [BEGIN, "",
               f"Generated by `tools/emu_coverage.py --write-doc` from the emulated ASan + UBSan suite "
               f"(`make test-asan`) on {datetime.date.today()}, commit {commit or '?'}: "
               f"{len(sites) - len(missing_k)} of {len(sites)} kernels launched, "
               f"{made} of {len(calls)} runtime calls kiln makes were made"
               + (f" ({', '.join(unreachable)}: unreachable on one device)" if unreachable else "") + ".", "",
               "| kernel (as launched) | launch sites | launches |", "| --- | --- | --- |"]
        for k in sorted(sites):
            out.append(f"| `{k}` | {', '.join(sites[k])} | {kernels[k]} |")
        out += ["", "| runtime call | calls |", "| --- | --- |"]
        for c in sorted(calls):
            out.append(f"| `{c}` | {apis[c]}{' (' + UNREACHABLE[c] + ')' if c in UNREACHABLE else ''} |")
        stand_ins = sorted(n for n in apis if not n.startswith("cuda"))
        if stand_ins:
            out += ["", "Library stand-ins queued: " + ", ".join(f"`{n}` ({apis[n]})" for n in stand_ins) + "."]
        out += ["", END]
        doc = open(a.write_doc, encoding="utf-8").read()
        if BEGIN in doc and END in doc:
            doc = doc[:doc.index(BEGIN)] + "\n".join(out) + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip("\n") + "\n\n" + "\n".join(out) + "\n"
        open(a.write_doc, "w", encoding="utf-8").write(doc)
    return 1 if a.check and (missing_k or missing_a) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Keeps the code in docs/*.md equal to code that is compiled.

A fenced code block right after a line

    <!-- snippet: PATH [NAME] -->

must equal the lines of PATH (relative to the repository root) between the
two lines `// [NAME]` (or `# [NAME]`), with their common indentation removed.
The examples those regions live in are built and run in CI (Makefile:
test-install), so every such snippet is code that compiles and works.

  tools/check_snippets.py docs/tutorial.md ...          # exit 1 on any drift
  tools/check_snippets.py --update docs/tutorial.md ... # rewrite the blocks

Also fails when a ```c++ block has no snippet line (so no C++ in these docs
goes unchecked) or a region is missing or unterminated.
"""
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"^<!-- snippet: (\S+) \[([\w-]+)\] -->$")


def region(path, name):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    tags = [i for i, line in enumerate(lines) if line.strip() in (f"// [{name}]", f"# [{name}]")]
    if len(tags) != 2:
        raise SystemExit(f"check_snippets: {path}: expected two '[{name}]' lines, found {len(tags)}")
    return textwrap.dedent("\n".join(lines[tags[0] + 1:tags[1]])).rstrip("\n").split("\n")


def process(doc, update):
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, problems, i, n = [], [], 0, 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line)
        if line.startswith("```c++") and not (out and MARK.match(out[-1])):
            problems.append(f"{doc}:{i + 1}: a c++ block without a '<!-- snippet: PATH [NAME] -->' line")
        out.append(line)
        i += 1
        if not m:
            continue
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append(f"{doc}:{i}: the snippet line is not followed by a code block")
            continue
        fence = lines[i]
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        if end == len(lines):
            raise SystemExit(f"check_snippets: {doc}:{i + 1}: unterminated code block")
        want = region(m.group(1), m.group(2))
        n += 1
        if lines[i + 1:end] != want:
            problems.append(f"{doc}:{i + 1}: differs from {m.group(1)} [{m.group(2)}]")
        out.extend([fence] + want + ["```"])
        i = end + 1
    if update:
        with open(doc, "w", encoding="utf-8") as f:
            f.write("\n".join(out))
        return [p for p in problems if "without a" in p], n
    return problems, n


def main(argv):
    update = "--update" in argv
    docs = [a for a in argv if a != "--update"]
    if not docs:
        raise SystemExit(__doc__)
    failed = False
    for doc in docs:
        problems, n = process(doc, update)
        for p in problems:
            print("check_snippets:", p)
        failed = failed or bool(problems)
        print(f"check_snippets: {doc}: {n} snippets {'updated' if update else 'checked'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

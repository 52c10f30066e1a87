#!/usr/bin/env bash
# `kiln tokenize --tokenizer` and `--decode` against Hugging Face tokenizers:
# for the real GPT-2 and XLM-R tokenizers (and BERT's vocab.txt directory),
# every line of WikiText-2 valid and of tests/data/unicode_edge_cases.txt
# must print exactly Tokenizer.encode(line).ids, and --decode of those ids
# exactly decode(ids, skip_special_tokens=True).
# usage: tokenize_hf_cli.sh KILN PYTHON DATA SOURCE_DIR WORK_DIR (KILN_PYTHON / KILN_DATA override)
set -euo pipefail
kiln=$1 python=${KILN_PYTHON:-$2} data=${KILN_DATA:-$3} src=$4 work=$5
mkdir -p "$work"
fail=0
for tok in "$data/tokenizers/gpt2/tokenizer.json" "$data/tokenizers/xlm-roberta" "$data/tokenizers/gpt2"; do
  for input in "$data/wikitext-2/valid.txt" "$src/tests/data/unicode_edge_cases.txt"; do
    name=$(basename "$tok").$(basename "$input")
    json=$tok; [ -d "$tok" ] && json=$tok/tokenizer.json
    "$python" - "$json" "$input" "$work/$name.hf" "$work/$name.hfdec" <<'PY'
import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
lines = data.split(b"\n")
if data.endswith(b"\n"):
    lines.pop()
with open(sys.argv[3], "w", encoding="utf-8", newline="\n") as ids, \
     open(sys.argv[4], "w", encoding="utf-8", newline="\n") as dec:
    for raw in lines:
        e = tok.encode(raw.decode("utf-8", errors="replace"))
        ids.write(" ".join(map(str, e.ids)) + "\n")
        dec.write(tok.decode(e.ids, skip_special_tokens=True) + "\n")
PY
    "$kiln" tokenize --tokenizer "$tok" < "$input" > "$work/$name.kiln"
    "$kiln" tokenize --tokenizer "$tok" --decode < "$work/$name.kiln" > "$work/$name.kilndec"
    if ! cmp -s "$work/$name.hf" "$work/$name.kiln"; then
      echo "FAIL: ids of $name differ from HF:"; diff "$work/$name.hf" "$work/$name.kiln" | head -6; fail=1
    elif ! cmp -s "$work/$name.hfdec" "$work/$name.kilndec"; then
      echo "FAIL: --decode of $name differs from HF:"; diff "$work/$name.hfdec" "$work/$name.kilndec" | head -6; fail=1
    else
      echo "ok: $name ($(wc -l < "$work/$name.hf") lines)"
    fi
  done
done
# Bad input: a word that is not an id is one clear error.
if echo "12 x 3" | "$kiln" tokenize --tokenizer "$data/tokenizers/gpt2" --decode > /dev/null 2> "$work/err.txt"; then
  echo "FAIL: --decode accepted a non-id"; fail=1
elif ! grep -q 'line 1: "x" is not a token id' "$work/err.txt"; then
  echo "FAIL: unclear --decode error:"; cat "$work/err.txt"; fail=1
fi
exit $fail

#!/usr/bin/env bash
# The kiln tool's front door: `kiln --help` names the program, `kiln
# --version` prints the version CMake built (project(kiln VERSION ...)), and
# every subcommand that takes --model answers a model directory that is
# missing, a file, unreadable, empty or holding only pytorch_model.bin with
# one error naming the directory and what is missing in it.
#
#   tests/tool_cli.sh KILN_BINARY WORK_DIR VERSION
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
version=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

"$kiln" --help >help.txt 2>&1 || fail "kiln --help: non-zero exit"
grep -q '^Usage: kiln \[OPTIONS\] SUBCOMMAND' help.txt || { fail "kiln --help does not name kiln:"; head -3 help.txt; }
for sub in pretrain finetune evaluate predict embed export tokenize prepare bench info demo; do
  grep -qE "^  $sub( |$)" help.txt || fail "kiln --help does not list $sub"
done
"$kiln" finetune --help >sub_help.txt 2>&1 || fail "kiln finetune --help: non-zero exit"
grep -q '^Usage: kiln finetune \[OPTIONS\]' sub_help.txt || { fail "kiln finetune --help:"; head -3 sub_help.txt; }
out=$("$kiln" --version 2>&1) || fail "kiln --version: non-zero exit"
[[ $out == "kiln $version" ]] || fail "kiln --version printed '$out', expected 'kiln $version'"
"$kiln" info | grep -qx "  version: $version" || fail "kiln info does not report version $version"
# The float32 GEMM library choice (Note [GEMM library per shape]): named by
# kiln info, and a KILN_CPU_GEMM it does not know is one clear error.
"$kiln" info | grep -q "^  cpu gemm: oneDNN" || fail "kiln info does not name the CPU GEMM libraries"
KILN_CPU_GEMM=openblas "$kiln" info | grep -q "^  cpu gemm: OpenBLAS.* for every shape (KILN_CPU_GEMM=openblas)" ||
  fail "kiln info ignores KILN_CPU_GEMM=openblas"
expect_error "KILN_CPU_GEMM=mkl" "KILN_CPU_GEMM=mkl: expected auto, openblas or onednn" env KILN_CPU_GEMM=mkl "$kiln" info

# Model directories that are not one.
touch a_file.txt train.tsv
mkdir -p empty torch_only no_weights
echo '{}' >torch_only/config.json
touch torch_only/pytorch_model.bin
echo '{}' >no_weights/config.json
echo 'x' | cat >in.txt
model_commands() {  # each subcommand taking --model, with its other required flags
  local m=$1
  echo "finetune --model $m --train-file train.tsv --output-dir out_ft"
  echo "pretrain --model $m --output-dir out_pt --max-steps 1"
  echo "evaluate --model $m --validation-file train.tsv"
  echo "predict --model $m --input in.txt --output pred.txt"
  echo "embed --model $m"
  echo "bench forward --model $m"
  if "$kiln" export --help >/dev/null 2>&1 && ! "$kiln" export --help 2>&1 | grep -q "not in this build"; then
    echo "export --model $m --output m.onnx"
  fi
}
check_model() {
  local dir=$1 want=$2
  while read -r line; do
    # shellcheck disable=SC2086
    expect_error "${line%% *} --model $dir" "--model $dir: $want" "$kiln" $line </dev/null
  done < <(model_commands "$dir")
}
check_model nowhere "no such directory"
check_model a_file.txt "not a directory"
check_model empty "no config.json in it"
check_model torch_only "no model.safetensors in it, only pytorch_model.bin"
check_model no_weights "no model.safetensors in it"
if [[ $(id -u) != 0 ]]; then  # root reads any directory
  mkdir -p locked && echo '{}' >locked/config.json && chmod 000 locked
  check_model locked "cannot read the directory"
  chmod 700 locked
fi
# Nothing was written by any of them.
for d in out_ft out_pt; do [[ ! -e $d ]] || fail "a failed run created $d"; done
[[ ! -e pred.txt && ! -e m.onnx ]] || fail "a failed run wrote its output"

# --shard-optimizer and `kiln checkpoint consolidate` refuse bad input with one error.
expect_error "--shard-optimizer 3" "--shard-optimizer must be 0, 1 or 2" \
  "$kiln" pretrain --synthetic-documents 20 --max-steps 1 --shard-optimizer 3 --output-dir shard3
expect_error "--shard-optimizer 2 --amp fp16" "--shard-optimizer 2 with --amp fp16 is not supported" \
  "$kiln" pretrain --synthetic-documents 20 --max-steps 1 --shard-optimizer 2 --amp fp16 --output-dir shard2
[[ ! -e shard3 && ! -e shard2 ]] || fail "a refused --shard-optimizer left an output directory"
expect_error "consolidate a missing directory" "missing-dir: checkpoint directory not found" \
  "$kiln" checkpoint consolidate missing-dir
mkdir -p not-a-checkpoint && echo keep >not-a-checkpoint/notes.txt
expect_error "consolidate a plain directory" "not a complete kiln checkpoint" \
  "$kiln" checkpoint consolidate not-a-checkpoint
[[ $(cat not-a-checkpoint/notes.txt) == keep ]] || fail "consolidate touched a plain directory's files"
expect_error "checkpoint without a subcommand" "A subcommand is required" "$kiln" checkpoint

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all tool checks passed"

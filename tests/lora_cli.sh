#!/usr/bin/env bash
# LoRA and frozen parameters from the outside: kiln finetune --lora-r saves
# only the adapter (PEFT's files) and resumes exactly; evaluate, predict,
# embed and export take --adapter; merge-adapter writes a whole model that
# predicts as base + adapter does; --freeze; and bad input (one clear
# message, a non-zero exit, nothing written over).
#
#   tests/lora_cli.sh KILN_BINARY WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

pretrain_tiny_base "$kiln" base
w=($(sed -n '30,45p' base/vocab.txt))
{
  printf 'sentence\tlabel\n'
  for i in 1 2 3 4; do
    printf '%s %s %s\t1\n%s %s\t0\n%s %s %s\t1\n%s\t0\n' "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}" "${w[4]}" \
      "${w[5]}" "${w[0]}" "${w[6]}" "${w[7]}"
  done
} >train.tsv
head -9 train.tsv >dev.tsv

lora=(--model base --train-file train.tsv --validation-file dev.tsv --max-seq-length 16 --batch-size 4 --workers 1
  --lr 5e-3 --max-steps 6 --lora-r 4 --lora-alpha 8 --lora-target query,value --lora-modules-to-save pooler)
"$kiln" finetune "${lora[@]}" --save-steps 3 --output-dir lora >lora.log 2>&1 || { cat lora.log; fail "finetune --lora-r"; }
for f in adapter_config.json adapter_model.safetensors config.json vocab.txt; do
  [[ -f lora/$f ]] || fail "finetune --lora-r wrote no $f"
done
[[ ! -e lora/model.safetensors ]] || fail "finetune --lora-r wrote the whole model"
grep -q '"peft_type": "LORA"' lora/adapter_config.json || fail "adapter_config.json: $(cat lora/adapter_config.json)"
grep -q '"task_type": "SEQ_CLS"' lora/adapter_config.json || fail "adapter_config.json lacks SEQ_CLS"
grep -q 'trainable parameters: ' lora.log || fail "finetune --lora-r does not say what trains: $(head -5 lora.log)"
grep -q 'LoRA: rank 4 adapters on 4 layers' lora.log || fail "LoRA layers: $(grep LoRA lora.log)"
adapter_bytes=$(stat -c %s lora/adapter_model.safetensors)
[[ $adapter_bytes -lt $(($(stat -c %s base/model.safetensors) / 3)) ]] ||
  fail "the adapter ($adapter_bytes bytes) is not much smaller than the model"

# Mixed precision and the profiler with adapters.
"$kiln" finetune "${lora[@]}" --save-steps 0 --max-steps 2 --amp bf16 --profile-steps 1:2 --output-dir lora_amp \
  >amp.log 2>&1 || { cat amp.log; fail "finetune --lora-r --amp bf16 --profile-steps"; }
[[ -f lora_amp/adapter_model.safetensors ]] || fail "--amp bf16 with --lora-r saved no adapter"
ls lora_amp/profile/trace-steps1-2-rank0.json >/dev/null 2>&1 || fail "--profile-steps with --lora-r wrote no trace"

# Exact resume of an adapter run: the same adapter bit for bit.
"$kiln" finetune "${lora[@]}" --save-steps 3 --output-dir lora_resumed --stop-after-steps 3 >r1.log 2>&1 ||
  { cat r1.log; fail "finetune --lora-r --stop-after-steps"; }
"$kiln" finetune "${lora[@]}" --save-steps 3 --output-dir lora_resumed --resume >r2.log 2>&1 ||
  { cat r2.log; fail "finetune --lora-r --resume"; }
cmp -s lora/adapter_model.safetensors lora_resumed/adapter_model.safetensors ||
  fail "the resumed adapter differs from the uninterrupted run's"

# evaluate with --adapter: the run's own final evaluation.
final=$(grep -o 'final evaluation:.*' lora.log | grep -o 'accuracy [0-9.e-]*' | head -1 | cut -d' ' -f2)
"$kiln" evaluate --model base --adapter lora --validation-file dev.tsv >eval.json 2>eval.err ||
  { cat eval.err; fail "evaluate --adapter"; }
got=$(grep -o '"accuracy":[0-9.e-]*' eval.json | cut -d: -f2)
python3 -c "import sys; sys.exit(abs(float('$got') - float('$final')) > 1e-9)" ||
  fail "evaluate --adapter accuracy $got differs from finetune's final $final"

# predict: base + adapter, and the merged model, the same labels.
"$kiln" predict --model base --adapter lora --input dev.tsv --format jsonl >pred.jsonl 2>err.txt ||
  { cat err.txt; fail "predict --adapter"; }
[[ $(wc -l <pred.jsonl) -eq 8 ]] || fail "predict --adapter: $(cat pred.jsonl)"
"$kiln" merge-adapter --model base --adapter lora --output merged >merge.log 2>&1 || { cat merge.log; fail "merge-adapter"; }
[[ -f merged/model.safetensors && -f merged/config.json && -f merged/vocab.txt ]] || fail "merge-adapter: $(ls merged)"
"$kiln" predict --model merged --input dev.tsv --format jsonl >merged.jsonl 2>err.txt ||
  { cat err.txt; fail "predict on the merged model"; }
python3 - pred.jsonl merged.jsonl <<'EOF' || fail "the merged model predicts otherwise than base + adapter"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b)
for x, y in zip(a, b):
    assert x["label"] == y["label"] and abs(x["score"] - y["score"]) < 1e-5, (x, y)
EOF

# embed and export with --adapter.
printf '%s %s\n%s\n' "${w[0]}" "${w[1]}" "${w[2]}" >lines.txt
"$kiln" embed --model base --adapter lora <lines.txt >emb.txt 2>err.txt || { cat err.txt; fail "embed --adapter"; }
"$kiln" embed --model base <lines.txt >emb_base.txt 2>err.txt || { cat err.txt; fail "embed"; }
[[ $(wc -l <emb.txt) -eq 2 ]] || fail "embed --adapter: $(wc -l <emb.txt) lines"
! cmp -s emb.txt emb_base.txt || fail "embed --adapter gives the base model's embeddings"
if "$kiln" export --help 2>&1 | grep -q -- --adapter; then
  "$kiln" export --model base --adapter lora --output clf.onnx >err.txt 2>&1 || { cat err.txt; fail "export --adapter"; }
  grep -q "sequence-classification" err.txt || fail "export --adapter: not the classifier: $(cat err.txt)"
fi

# --freeze: the named parameters do not train.
"$kiln" finetune --model base --train-file train.tsv --max-seq-length 16 --batch-size 4 --workers 1 --max-steps 2 \
  --save-steps 0 --freeze 'bert\.embeddings\.' --freeze 'bert\.encoder\.layer\.0\.' --output-dir frozen >frozen.log 2>&1 ||
  { cat frozen.log; fail "finetune --freeze"; }
grep -q -- '--freeze: [1-9][0-9]* parameter tensors frozen' frozen.log || fail "--freeze: $(head -5 frozen.log)"

# Bad input: one clear error each, nothing written over.
expect_error "--lora-target of no layer" "target module 'qkv' is not in the model" \
  "$kiln" finetune "${lora[@]/query,value/qkv}" --output-dir bad1
expect_error "--lora-target without --lora-r" "need --lora-r" \
  "$kiln" finetune --model base --train-file train.tsv --lora-target query --output-dir bad2
expect_error "--lora-r negative" "--lora-r must be >= 0" \
  "$kiln" finetune --model base --train-file train.tsv --lora-r -1 --lora-target query --output-dir bad3
expect_error "--lora-r without targets" "--lora-r needs --lora-target" \
  "$kiln" finetune --model base --train-file train.tsv --lora-r 4 --output-dir bad4
expect_error "--freeze of nothing" "--freeze 'embedings' matches no parameter" \
  "$kiln" finetune --model base --train-file train.tsv --freeze embedings --output-dir bad5
for d in bad1 bad2 bad3 bad4 bad5; do [[ ! -e $d ]] || fail "a refused run wrote $d"; done
expect_error "an adapter directory as --model" "holds a LoRA adapter" \
  "$kiln" predict --model lora --input dev.tsv
expect_error "--adapter of no directory" "no such directory" \
  "$kiln" predict --model base --adapter nowhere --input dev.tsv
expect_error "merge-adapter over a model" "already holds config.json" \
  "$kiln" merge-adapter --model base --adapter lora --output merged
cp base/model.safetensors keep.safetensors
expect_error "merge-adapter into the base" "is an input directory" \
  "$kiln" merge-adapter --model base --adapter lora --output base
cmp -s base/model.safetensors keep.safetensors || fail "merge-adapter changed the base model"
sed 's/"LORA"/"IA3"/' lora/adapter_config.json >ia3.json
mkdir -p ia3 && cp ia3.json ia3/adapter_config.json && cp lora/adapter_model.safetensors ia3/
expect_error "an IA3 adapter" "peft_type 'IA3' is not supported" \
  "$kiln" predict --model base --adapter ia3 --input dev.tsv

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all LoRA CLI checks passed"

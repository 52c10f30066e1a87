#!/usr/bin/env bash
# `kiln export` from the outside: it writes a model ONNX Runtime runs at any
# batch and sequence length, never over an existing file without
# --overwrite, and refuses bad flags with one clear message.
#
#   tests/export_cli.sh KILN_BINARY WORK_DIR [PYTHON_WITH_ONNXRUNTIME]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
python=${KILN_PYTHON:-${3:-}}
[[ -n "$python" && -x "$python" ]] || python=""
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

# A tiny pretrained model on kiln's synthetic language (an HF directory).
"$kiln" pretrain --synthetic-documents 100 --max-seq-length 32 --batch-size 8 --workers 1 --max-steps 2 \
  --save-steps 0 --output-dir base >log.txt 2>&1 || { cat log.txt; fail "pretrain of the base model"; }

"$kiln" export --model base --output base.onnx >export.log 2>&1 || { cat export.log; fail "kiln export"; }
[[ -s base.onnx ]] || fail "kiln export wrote no base.onnx"
grep -q "(embed)" export.log || fail "a base model should export as embed: $(cat export.log)"
"$kiln" export --model base --output mlm.onnx --task masked-lm --opset 14 >export_mlm.log 2>&1 ||
  { cat export_mlm.log; fail "kiln export --task masked-lm --opset 14"; }

if [[ -n "$python" ]]; then
  # Shapes other than the traced ones; outputs by name and shape.
  "$python" - base.onnx mlm.onnx >ort.txt 2>&1 <<'PY' || { cat ort.txt; fail "ONNX Runtime on the exported models"; }
import sys
import numpy as np
import onnxruntime as ort
for path in sys.argv[1:]:
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b, t in [(1, 4), (3, 17)]:
        ids = np.ones((b, t), np.int64)
        mask = np.ones((b, t), np.int64)
        mask[:, t - 1] = 0
        out = s.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((b, t), np.int64)})
        print(path, b, t, [o.shape for o in out])
        assert all(o.shape[:2] == (b, t) or o.shape[0] == b for o in out)
        assert all(np.isfinite(o).all() for o in out)
PY
  grep -q "base.onnx 3 17 \[(3, 17, " ort.txt || fail "ONNX Runtime output shapes: $(cat ort.txt)"
  echo "ok: ONNX Runtime runs both exports at (batch, sequence) (1, 4) and (3, 17)"
else
  echo "skipped: the ONNX Runtime run (no KILN_PYTHON)"
fi

before=$(cksum <base.onnx)
expect_error "export over an existing file" "exists; give --overwrite" \
  "$kiln" export --model base --output base.onnx
[[ "$(cksum <base.onnx)" == "$before" ]] || fail "a refused export changed base.onnx"
"$kiln" export --model base --output base.onnx --overwrite >/dev/null 2>&1 || fail "export --overwrite"
expect_error "bad opset" "--opset 9 is not supported" "$kiln" export --model base --output o9.onnx --opset 9
expect_error "bad task" "--task" "$kiln" export --model base --output t.onnx --task summarize
expect_error "missing model" "--model nowhere: no such directory" "$kiln" export --model nowhere --output m.onnx
expect_error "classifier task on a base model" "no id2label" \
  "$kiln" export --model base --output c.onnx --task sequence-classification
[[ ! -e o9.onnx && ! -e t.onnx && ! -e m.onnx && ! -e c.onnx ]] || fail "a refused export left a file"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all export CLI checks passed"

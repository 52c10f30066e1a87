# Helpers of the tool tests (tests/train_cli.sh, tests/finetune_cli.sh), sourced.
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error "what" "message substring" command...: non-zero exit, one
# "kiln: error:" line (or CLI11's message) containing the substring, no crash.
expect_error() {
  local what=$1 want=$2
  shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    fail "$what: exit status 0"
  elif [[ $rc -ge 128 ]]; then
    fail "$what: killed by a signal (status $rc)"
  elif ! grep -qF -- "$want" err.txt; then
    fail "$what: stderr lacks '$want':"
    cat err.txt
  else
    echo "ok: $what -> $(head -n 1 err.txt)"
  fi
}

# pretrain_tiny_base KILN DIR: a tiny pretrained BERT on kiln's synthetic
# language (an HF directory with vocab.txt) at DIR, for the fine-tuning tests.
pretrain_tiny_base() {
  "$1" pretrain --synthetic-documents 200 --max-seq-length 32 --batch-size 8 --workers 1 --max-steps 3 \
    --save-steps 0 --output-dir "$2" >"$2.log" 2>&1 || { cat "$2.log"; fail "pretrain of the base model"; }
}

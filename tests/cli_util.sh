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

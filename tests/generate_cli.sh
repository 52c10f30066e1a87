#!/usr/bin/env bash
# `kiln generate` and causal-LM training from the outside. End to end from text: transformers
# builds a GPT-2 of the real GPT-2 tokenizer's vocabulary
# (tests/reference/decoder_family_reference.py text), the tokenizers package
# encodes a prompt and decodes what generate() adds greedily; kiln, given
# the directory and the prompt's text, must print that text. Sampling is
# reproducible by --seed; bad flags and a model without a causal-LM head are
# one clear error each. Then a GPT-2-shaped decoder is pretrained with
# `kiln pretrain --task causal-lm`, evaluated (perplexity), fine-tuned and
# sampled from.
#
#   tests/generate_cli.sh KILN PYTHON HF_PYTHON DATA WORK_DIR
#   (KILN_PYTHON, KILN_HF_PYTHON, KILN_DATA override)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1 python=${KILN_PYTHON:-$2} hf_python=${KILN_HF_PYTHON:-$3} data=${KILN_DATA:-$4} work=$5
ref=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/reference/decoder_family_reference.py
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
tok=$data/tokenizers/gpt2/tokenizer.json
prompt="The history of the river begins"

"$python" "$ref" tokenize --tokenizer "$tok" --prompt "$prompt" --out prompt.json || fail "reference tokenize"
"$hf_python" "$ref" text --workdir . --tokenizer "$tok" --prompt-ids prompt.json || fail "reference text model"
"$python" "$ref" detokenize --tokenizer "$tok" --ids generated.json --out want.txt || fail "reference detokenize"
model=gpt2-text

"$kiln" generate --model $model --prompt "$prompt" --max-new-tokens 32 >got.txt 2>err.txt || { cat err.txt; fail "generate"; }
cmp -s got.txt want.txt || fail "generate: kiln printed '$(cat got.txt)', transformers' generate() gives '$(cat want.txt)'"
"$kiln" generate --model $model --prompt "$prompt" --max-new-tokens 5 --full-text >full.txt 2>err.txt ||
  { cat err.txt; fail "generate --full-text"; }
[[ $(cat full.txt) == "$prompt"* ]] || fail "generate --full-text does not start with the prompt: $(cat full.txt)"

# sampling: the same seed gives the same text; the options are accepted together
sample() {
  "$kiln" generate --model $model --prompt "$prompt" --max-new-tokens 16 --do-sample --temperature 0.9 --top-k 40 \
    --top-p 0.95 --repetition-penalty 1.2 --seed "$1" 2>err.txt || { cat err.txt; fail "generate --do-sample"; }
}
a=$(sample 7) b=$(sample 7) c=$(sample 8)
greedy16=$("$kiln" generate --model $model --prompt "$prompt" --max-new-tokens 16 2>err.txt) || { cat err.txt; fail "generate 16"; }
[[ -n $a && $a == "$b" ]] || fail "generate --do-sample --seed 7 is not reproducible: '$a' vs '$b'"
[[ $a != "$c" ]] || fail "generate --do-sample: seeds 7 and 8 printed the same text '$a'"
[[ $a != "$greedy16" ]] || fail "generate --do-sample printed the greedy text"

expect_error "a sampling flag without --do-sample" "--temperature applies to sampling: add --do-sample" \
  "$kiln" generate --model $model --prompt "$prompt" --temperature 0.5
expect_error "too many new tokens" "exceeds the 64 positions of" \
  "$kiln" generate --model $model --prompt "$prompt" --max-new-tokens 60
mkdir -p encoder
cat >encoder/config.json <<'JSON'
{"model_type": "roberta", "vocab_size": 50257, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 64, "max_position_embeddings": 40, "type_vocab_size": 1, "pad_token_id": 1}
JSON
cp $model/model.safetensors $model/tokenizer.json encoder/
expect_error "an encoder" "model_type 'roberta' has no causal-lm head in kiln" \
  "$kiln" generate --model encoder --prompt "$prompt"
expect_error "no model" "--model missing: no such directory" "$kiln" generate --model missing --prompt "$prompt"
# causal-LM training: pretrain from a config.json, evaluate, finetune, generate
head -c 60000 "$data/wikitext-2/valid.txt" >text.txt
cat >gpt2.json <<'JSON'
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 32, "n_embd": 32, "n_layer": 1, "n_head": 2,
 "bos_token_id": 50256, "eos_token_id": 50256}
JSON
"$kiln" pretrain --task causal-lm --config gpt2.json --tokenizer "$tok" --train-file text.txt --max-seq-length 32 \
  --batch-size 4 --max-steps 3 --save-steps 0 --output-dir lm >pretrain.log 2>&1 || { cat pretrain.log; fail "pretrain --task causal-lm"; }
grep -q '"GPT2LMHeadModel"' lm/config.json || fail "lm/config.json does not name GPT2LMHeadModel"
[[ -f lm/tokenizer.json ]] || fail "pretrain --task causal-lm did not save the tokenizer beside the model"
grep -q "perplexity" pretrain.log || fail "pretrain --task causal-lm reported no perplexity"
"$kiln" evaluate --model lm --validation-file text.txt --max-seq-length 32 >eval.txt 2>eval.err || { cat eval.err; fail "evaluate (causal-lm)"; }
grep -q '"perplexity"' eval.txt || fail "evaluate lacks perplexity: $(cat eval.txt)"
"$kiln" finetune --task causal-lm --model lm --train-file text.txt --max-seq-length 32 --batch-size 4 --max-steps 2 \
  --save-steps 0 --output-dir lm2 >finetune.log 2>&1 || { cat finetune.log; fail "finetune --task causal-lm"; }
"$kiln" generate --model lm2 --prompt "$prompt" --max-new-tokens 8 --ignore-eos >lm2.txt 2>err.txt || { cat err.txt; fail "generate (kiln-trained)"; }
[[ -s lm2.txt ]] || fail "generate printed nothing for the kiln-trained decoder"
expect_error "causal-lm without text" "--task causal-lm needs --train-file" \
  "$kiln" pretrain --task causal-lm --config gpt2.json --tokenizer "$tok" --output-dir x
expect_error "causal-lm with an encoder's config" "model_type 'roberta' has no causal-lm head in kiln" \
  "$kiln" pretrain --task causal-lm --config encoder/config.json --tokenizer "$tok" --train-file text.txt --output-dir x
expect_error "masked-lm in finetune" "--task masked-lm is kiln pretrain's" \
  "$kiln" finetune --task masked-lm --model lm --train-file text.txt --output-dir x

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "generate_cli: all checks passed"

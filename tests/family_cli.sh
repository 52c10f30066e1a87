#!/usr/bin/env bash
# A non-BERT family through every tool, from the outside (nn/auto.h): an
# XLM-R-shaped model with the real XLM-R tokenizer is pretrained from a
# config.json (kiln pretrain --config), fine-tuned on SST-2 sentences (kiln
# finetune), then evaluated, asked for predictions, embeddings and, when
# this build has the exporter, an ONNX file. Each saved config keeps the
# family's classes; an unknown model_type is one clear error. A
# DistilBERT-shaped and a ModernBERT-shaped model (BERT's WordPiece
# vocabulary) go through the same tools, and through token classification on
# CoNLL-2003 sentences.
#
#   tests/family_cli.sh KILN DATA WORK_DIR   (KILN_DATA overrides DATA)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1 data=${KILN_DATA:-$2} work=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
tok=$data/tokenizers/xlm-roberta/tokenizer.json

# embed_and_export BASE CLF FAMILY: 40 sentence embeddings of 32 numbers from
# BASE, and (when this build has the exporter) CLF as ONNX.
embed_and_export() {
  local base=$1 clf=$2 family=$3
  "$kiln" embed --model "$base" <sentences.txt >"$base.emb" 2>"$base.emb.err" || { cat "$base.emb.err"; fail "embed ($family)"; }
  [[ $(wc -l <"$base.emb") -eq 40 && $(head -1 "$base.emb" | wc -w) -eq 32 ]] ||
    fail "embed ($family): expected 40 lines of 32 numbers"
  if "$kiln" export --help 2>&1 | grep -q -- "--output"; then
    "$kiln" export --model "$clf" --output "$clf.onnx" >"$clf.export.log" 2>&1 ||
      { cat "$clf.export.log"; fail "export ($family)"; }
    [[ -s $clf.onnx ]] || fail "export ($family) wrote no $clf.onnx"
  fi
}

cat >config.json <<'JSON'
{"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 34, "type_vocab_size": 1,
 "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
JSON
head -c 200000 "$data/wikitext-2/valid.txt" >text.txt
"$kiln" pretrain --config config.json --tokenizer "$tok" --train-file text.txt --max-seq-length 32 --batch-size 8 \
  --max-steps 3 --save-steps 0 --output-dir base >pretrain.log 2>&1 || { cat pretrain.log; fail "pretrain --config (xlm-roberta)"; }
grep -q '"XLMRobertaForMaskedLM"' base/config.json || fail "base/config.json does not name XLMRobertaForMaskedLM"
grep -q '"model_type": "xlm-roberta"' base/config.json || fail "base/config.json lost its model_type"
[[ -f base/tokenizer.json ]] || fail "pretrain did not save the tokenizer beside the model"

head -n 201 "$data/sst2/train.tsv" >train.tsv
head -n 41 "$data/sst2/dev.tsv" >dev.tsv
"$kiln" finetune --model base --train-file train.tsv --validation-file dev.tsv --max-seq-length 32 --batch-size 16 \
  --max-steps 4 --save-steps 0 --output-dir clf >finetune.log 2>&1 || { cat finetune.log; fail "finetune (xlm-roberta)"; }
grep -q '"XLMRobertaForSequenceClassification"' clf/config.json ||
  fail "clf/config.json does not name XLMRobertaForSequenceClassification"
"$kiln" evaluate --model clf --validation-file dev.tsv --max-seq-length 32 >eval.txt 2>eval.err || { cat eval.err; fail "evaluate (xlm-roberta)"; }
grep -q '"accuracy"' eval.txt || fail "evaluate lacks accuracy: $(cat eval.txt)"
cut -f2 dev.tsv | tail -n +2 >sentences.txt
"$kiln" predict --model clf --input dev.tsv --max-seq-length 32 >pred.txt 2>pred.err || { cat pred.err; fail "predict (xlm-roberta)"; }
[[ $(wc -l <pred.txt) -eq 40 ]] || fail "predict: expected 40 lines, got $(wc -l <pred.txt)"
embed_and_export base clf xlm-roberta

mkdir -p other
sed 's/"xlm-roberta"/"gpt_neox"/' clf/config.json >other/config.json
cp clf/model.safetensors other/
expect_error "an unknown model_type" "model_type 'gpt_neox' is not supported (kiln supports: bert, roberta, xlm-roberta, distilbert, modernbert, gpt2, llama, mistral, qwen2)" \
  "$kiln" predict --model other --input sentences.txt
expect_error "max-seq-length past the padding offset" "exceeds the 32 tokens" \
  "$kiln" finetune --model base --train-file train.tsv --max-seq-length 33 --max-steps 1 --output-dir never

# DistilBERT: pretrain from a config.json, sequence and token classification, embed, export
vocab=$data/vocab/bert-base-uncased-vocab.txt
cat >distil.json <<'JSON'
{"model_type": "distilbert", "vocab_size": 30522, "dim": 32, "n_layers": 1, "n_heads": 2, "hidden_dim": 64,
 "max_position_embeddings": 32}
JSON
"$kiln" pretrain --config distil.json --vocab "$vocab" --train-file text.txt --max-seq-length 32 --batch-size 8 \
  --max-steps 3 --save-steps 0 --output-dir dbase >dpretrain.log 2>&1 || { cat dpretrain.log; fail "pretrain --config (distilbert)"; }
grep -q '"DistilBertForMaskedLM"' dbase/config.json || fail "dbase/config.json does not name DistilBertForMaskedLM"
grep -q '"n_layers": 1' dbase/config.json || fail "dbase/config.json lost DistilBERT's field names"
"$kiln" finetune --model dbase --train-file train.tsv --validation-file dev.tsv --max-seq-length 32 --batch-size 16 \
  --max-steps 4 --save-steps 0 --output-dir dclf >dfinetune.log 2>&1 || { cat dfinetune.log; fail "finetune (distilbert)"; }
grep -q '"DistilBertForSequenceClassification"' dclf/config.json ||
  fail "dclf/config.json does not name DistilBertForSequenceClassification"
"$kiln" evaluate --model dclf --validation-file dev.tsv --max-seq-length 32 >deval.txt 2>deval.err ||
  { cat deval.err; fail "evaluate (distilbert)"; }
grep -q '"accuracy"' deval.txt || fail "evaluate (distilbert) lacks accuracy: $(cat deval.txt)"
head -n 120 "$data/conll2003/train.txt" >ner_train.txt
head -n 60 ner_train.txt >ner_dev.txt  # labels the training part has
"$kiln" finetune --task token-classification --model dbase --train-file ner_train.txt --validation-file ner_dev.txt \
  --max-seq-length 32 --batch-size 8 --max-steps 3 --save-steps 0 --output-dir dner >dner.log 2>&1 ||
  { cat dner.log; fail "finetune --task token-classification (distilbert)"; }
grep -q '"DistilBertForTokenClassification"' dner/config.json ||
  fail "dner/config.json does not name DistilBertForTokenClassification"
"$kiln" predict --model dner --input ner_dev.txt --max-seq-length 32 >dnerpred.txt 2>dnerpred.err ||
  { cat dnerpred.err; fail "predict (distilbert NER)"; }
embed_and_export dbase dclf distilbert
mkdir -p dmixed
cp dclf/config.json dclf/vocab.txt dmixed/ && cp clf/model.safetensors dmixed/
expect_error "a DistilBERT config over XLM-R weights" "is named as a" "$kiln" predict --model dmixed --input sentences.txt \
  --max-seq-length 32

# ModernBERT: the same tools from its config.json (BERT's vocabulary and special ids; layer 1 local)
cat >modern.json <<'JSON'
{"model_type": "modernbert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 48, "max_position_embeddings": 32, "global_attn_every_n_layers": 2, "local_attention": 8,
 "pad_token_id": 0, "bos_token_id": 101, "cls_token_id": 101, "eos_token_id": 102, "sep_token_id": 102}
JSON
"$kiln" pretrain --config modern.json --vocab "$vocab" --train-file text.txt --max-seq-length 32 --batch-size 8 \
  --max-steps 3 --save-steps 0 --output-dir mbase >mpretrain.log 2>&1 || { cat mpretrain.log; fail "pretrain --config (modernbert)"; }
grep -q '"ModernBertForMaskedLM"' mbase/config.json || fail "mbase/config.json does not name ModernBertForMaskedLM"
grep -q '"local_attention": 8' mbase/config.json || fail "mbase/config.json lost ModernBERT's fields"
"$kiln" finetune --model mbase --train-file train.tsv --validation-file dev.tsv --max-seq-length 32 --batch-size 16 \
  --max-steps 4 --save-steps 0 --output-dir mclf >mfinetune.log 2>&1 || { cat mfinetune.log; fail "finetune (modernbert)"; }
grep -q '"ModernBertForSequenceClassification"' mclf/config.json ||
  fail "mclf/config.json does not name ModernBertForSequenceClassification"
"$kiln" evaluate --model mclf --validation-file dev.tsv --max-seq-length 32 >meval.txt 2>meval.err ||
  { cat meval.err; fail "evaluate (modernbert)"; }
grep -q '"accuracy"' meval.txt || fail "evaluate (modernbert) lacks accuracy: $(cat meval.txt)"
"$kiln" finetune --task token-classification --model mbase --train-file ner_train.txt --validation-file ner_dev.txt \
  --max-seq-length 32 --batch-size 8 --max-steps 3 --save-steps 0 --output-dir mner >mner.log 2>&1 ||
  { cat mner.log; fail "finetune --task token-classification (modernbert)"; }
"$kiln" predict --model mner --input ner_dev.txt --max-seq-length 32 >mnerpred.txt 2>mnerpred.err ||
  { cat mnerpred.err; fail "predict (modernbert NER)"; }
"$kiln" predict --model mclf --input dev.tsv --max-seq-length 32 >mpred.txt 2>mpred.err || { cat mpred.err; fail "predict (modernbert)"; }
[[ $(wc -l <mpred.txt) -eq 40 ]] || fail "predict (modernbert): expected 40 lines, got $(wc -l <mpred.txt)"
embed_and_export mbase mclf modernbert

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "family_cli: all checks passed"

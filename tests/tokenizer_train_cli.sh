#!/usr/bin/env bash
# The tools on a model whose tokenizer is a tokenizer.json of another family
# (a SentencePiece-style Unigram with RoBERTa's <s> A </s> template, trained
# here with HF tokenizers on WikiText-2): kiln pretrain --tokenizer, prepare,
# finetune (classification and NER), evaluate, predict and embed on the saved
# directory, which transformers' AutoTokenizer loads and whose ids equal
# kiln tokenize's; and the flags that do not apply give one clear error.
#
# The tokenizer is trained in the transformers venv (its older `tokenizers`
# writes a tokenizer.json both versions read).
#
#   tests/tokenizer_train_cli.sh KILN HF_PYTHON DATA WORK_DIR (KILN_HF_PYTHON / KILN_DATA override)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1 python=${KILN_HF_PYTHON:-$2} data=${KILN_DATA:-$3} work=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

head -n 400 "$data/wikitext-2/valid.txt" >wiki.txt
head -n 65 "$data/sst2/train.tsv" >sst.tsv
head -n 120 "$data/conll2003/train.txt" >ner.txt

# The tokenizer: Unigram over NFKC + Metaspace, <s> A </s> (</s> B </s>).
"$python" - <<'PY' || { fail "training the reference tokenizer"; exit 1; }
import os
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers
tok = Tokenizer(models.Unigram())
tok.normalizer = normalizers.NFKC()
tok.pre_tokenizer = pre_tokenizers.Metaspace()
tok.decoder = decoders.Metaspace()
specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
tok.train(["wiki.txt"], trainers.UnigramTrainer(vocab_size=600, special_tokens=specials, unk_token="<unk>"))
tok.post_processor = processors.TemplateProcessing(
    single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
    special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
os.makedirs("tok", exist_ok=True)
tok.save("tok/tokenizer.json")
PY

# A new model with that tokenizer; the saved directory carries it.
"$kiln" pretrain --config bert-tiny --tokenizer tok --train-file wiki.txt --max-seq-length 32 --batch-size 8 \
  --workers 1 --max-steps 3 --save-steps 0 --output-dir base >pretrain.log 2>&1 ||
  { cat pretrain.log; fail "pretrain --tokenizer"; }
cmp -s tok/tokenizer.json base/tokenizer.json || fail "base/tokenizer.json is not the tokenizer it was trained with"
[[ ! -e base/vocab.txt ]] || fail "base/ has a vocab.txt beside its tokenizer.json"
grep -q '"vocab_size": 600' base/config.json || fail "base/config.json's vocab_size is not the tokenizer's 600"

# kiln prepare with the model directory and with the tokenizer.json file: the same shards.
"$kiln" prepare --tokenizer base wiki.txt --output-dir corpus_dir >prep.log 2>&1 || { cat prep.log; fail "prepare --tokenizer DIR"; }
"$kiln" prepare --tokenizer tok/tokenizer.json wiki.txt --output-dir corpus_file >prep2.log 2>&1 ||
  { cat prep2.log; fail "prepare --tokenizer FILE"; }
for f in corpus_dir/*; do cmp -s "$f" "corpus_file/$(basename "$f")" || fail "prepare: $f differs by tokenizer path"; done
"$kiln" pretrain --model base --train-file corpus_dir --max-seq-length 32 --batch-size 8 --workers 1 --max-steps 2 \
  --save-steps 0 --output-dir base2 >pretrain2.log 2>&1 || { cat pretrain2.log; fail "pretrain --model on a prepared corpus"; }

# Classification: finetune, evaluate, predict.
"$kiln" finetune --model base --train-file sst.tsv --validation-file sst.tsv --max-seq-length 32 --batch-size 8 \
  --max-steps 4 --save-steps 0 --output-dir cls >cls.log 2>&1 || { cat cls.log; fail "finetune (classification)"; }
cmp -s tok/tokenizer.json cls/tokenizer.json || fail "cls/tokenizer.json differs"
"$kiln" evaluate --model cls --validation-file sst.tsv >eval.txt 2>eval.err || { cat eval.err; fail "evaluate"; }
grep -q '"accuracy"' eval.txt || fail "evaluate printed no accuracy: $(cat eval.txt)"
cut -f2 sst.tsv | tail -n +2 | tr -d '\r' >sentences.txt
"$kiln" predict --model cls --input sst.tsv >pred.txt 2>pred.err || { cat pred.err; fail "predict (classification)"; }
[[ $(wc -l <pred.txt) -ge 64 ]] || fail "predict: expected 64 predictions, got $(wc -l <pred.txt) lines"

# Token classification: the words' first pieces carry the labels.
"$kiln" finetune --task token-classification --model base --train-file ner.txt --validation-file ner.txt \
  --max-seq-length 32 --batch-size 4 --max-steps 3 --save-steps 0 --output-dir ner >ner.log 2>&1 ||
  { cat ner.log; fail "finetune --task token-classification"; }
"$kiln" predict --model ner --input ner.txt >ner_pred.txt 2>ner_pred.err || { cat ner_pred.err; fail "predict (NER)"; }
[[ $(grep -c . ner_pred.txt) -eq $(grep -v '^-DOCSTART-' ner.txt | grep -c .) ]] ||
  fail "predict (NER): not one line per word"

# Embeddings, one line of 128 floats per input line.
head -n 5 sentences.txt | "$kiln" embed --model base >emb.txt 2>emb.err || { cat emb.err; fail "embed"; }
[[ $(wc -l <emb.txt) -eq 5 && $(head -1 emb.txt | wc -w) -eq 128 ]] || fail "embed: expected 5 lines of 128 floats"

# transformers loads the saved tokenizer, with the same ids as kiln tokenize and the roles kiln used.
"$kiln" tokenize --tokenizer cls <sentences.txt >kiln_ids.txt 2>tok.err || { cat tok.err; fail "tokenize --tokenizer cls"; }
"$python" - cls sentences.txt kiln_ids.txt <<'PY' || fail "transformers' AutoTokenizer on the saved directory"
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8", newline="").read().split("\n")[:-1]
kiln = open(sys.argv[3], encoding="utf-8", newline="").read().split("\n")[:-1]
assert len(lines) == len(kiln), (len(lines), len(kiln))
for line, ids in zip(lines, kiln):
    want = " ".join(map(str, tok(line)["input_ids"]))
    assert want == ids, f"{line!r}: transformers {want}, kiln {ids}"
assert (tok.pad_token, tok.mask_token, tok.cls_token, tok.sep_token, tok.unk_token) == \
    ("<pad>", "<mask>", "<s>", "</s>", "<unk>"), tok.special_tokens_map
print(f"ok: transformers' {type(tok).__name__} gives kiln's ids on {len(lines)} lines")
PY

# Flags that do not apply to this tokenizer: one clear error each.
expect_error "--cased with a tokenizer.json" "--cased is for BERT's WordPiece" \
  "$kiln" prepare --tokenizer tok --cased wiki.txt --output-dir c3
expect_error "--vocab and --tokenizer together" "not both" \
  "$kiln" finetune --model base --tokenizer tok --vocab x.txt --train-file sst.tsv --output-dir c4
expect_error "--whole-word-mask without ## pieces" "--whole-word-mask needs a WordPiece tokenizer" \
  "$kiln" pretrain --model base --whole-word-mask --train-file wiki.txt --max-steps 1 --output-dir c5
expect_error "--output-dir is the --tokenizer directory" "are the same directory" \
  "$kiln" finetune --model base --tokenizer cls --train-file sst.tsv --output-dir cls --overwrite-output-dir
cmp -s tok/tokenizer.json cls/tokenizer.json || fail "a refused run changed cls/tokenizer.json"
expect_error "prepare without a tokenizer" "give one of --vocab" "$kiln" prepare wiki.txt --output-dir c6
expect_error "a directory without a tokenizer" "no tokenizer in this directory" \
  "$kiln" prepare --tokenizer corpus_dir wiki.txt --output-dir c7

[[ $failures -eq 0 ]] && echo "tokenizer_train_cli: all passed"
exit $((failures > 0))

#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (stdlib only, deterministic):

  tests/fuzz/corpus/safetensors/   small valid files (every dtype, metadata,
                                   scalars, zero-sized tensors) and near-misses
  tests/fuzz/corpus/bert_config/   the all-MiniLM-L6-v2 config, presets, minimal
                                   and broken configs
  tests/fuzz/corpus/model_config/  configs of every family (bert, roberta,
                                   xlm-roberta, distilbert), unknown model_types
                                   and DistilBERT near-misses
  tests/fuzz/corpus/corpus/        `kiln prepare` folders (index.json + shards,
                                   concatenated) and corrupt ones
  tests/fuzz/corpus/labeled_file/  GLUE-style TSV, CSV and JSONL files (byte 0:
                                   the target's option bits)
  tests/fuzz/corpus/vocab/         vocab.txt files
  tests/fuzz/corpus/tokenizer_config/  Hugging Face tokenizer_config.json files
  tests/fuzz/corpus/args_file/     --args-file JSON for kiln pretrain/finetune
  tests/fuzz/corpus/checkpoint/    checkpoint-N folders (config.json,
                                   model.safetensors, optimizer.safetensors,
                                   trainer_state.json joined by "\n--8<--\n")
  tests/fuzz/corpus/metrics_jsonl/ metrics.jsonl files
  tests/fuzz/corpus/adapter_config/  PEFT LoRA adapter_config.json files (0.10's
                                   fields, newer PEFT's, kiln's) and refused ones
  tests/fuzz/corpus/weight_index/  model.safetensors.index.json files (sharded
                                   checkpoints) and hostile ones
  tests/fuzz/crashes/              inputs that still crash a target (not replayed;
                                   see crashes/README.md; none at present: the
                                   four found so far are fixed and replayed)

Run from anywhere: python3 tests/fuzz/make_seeds.py. With --large TARGET DIR it
writes inputs at and past TARGET's size caps into DIR instead (see below).
 Existing seeds of these
names are overwritten; other files in the directories are left alone.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(corpus, name, data):
    directory = os.path.join(HERE, "corpus", corpus)
    os.makedirs(directory, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape); data bytes are a fixed pattern."""
    header, buffer = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        data = bytes((i * 7 + 1) % (2 if dtype == "BOOL" else 256) for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buffer), len(buffer) + n]}
        buffer += data
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def raw(header_text, buffer=b""):
    text = header_text.encode("utf-8") if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(text)) + text + buffer


def safetensors_seeds():
    write("safetensors", "empty_header", safetensors([]))
    write("safetensors", "one_f32", safetensors([("w", "F32", [2, 3])]))
    write("safetensors", "all_dtypes", safetensors([(f"t_{d.lower()}", d, [3]) for d in SIZES]))
    write("safetensors", "bert_like", safetensors(
        [("embeddings.word_embeddings.weight", "F32", [8, 4]),
         ("embeddings.position_ids", "I64", [1, 4]),
         ("encoder.layer.0.attention.self.query.bias", "F16", [4]),
         ("pooler.dense.weight", "BF16", [4, 4])],
        metadata={"format": "pt"}))
    write("safetensors", "scalar_and_empty", safetensors(
        [("scalar", "F64", []), ("empty", "F32", [0, 5]), ("mask", "BOOL", [5])]))
    write("safetensors", "metadata_only", safetensors([], metadata={"a": "b", "ünï": "cödé"}))
    write("safetensors", "unpadded", safetensors([("x", "I32", [2])], pad=False))
    # Near misses: each breaks one rule.
    write("safetensors", "bad_truncated", safetensors([("w", "F32", [4])])[:-3])
    write("safetensors", "bad_overlap", raw(
        '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)))
    write("safetensors", "bad_duplicate", raw(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', bytes(1)))
    write("safetensors", "bad_size", raw(
        '{"a":{"dtype":"F32","shape":[5,4],"data_offsets":[0,100]}}', bytes(100)))
    write("safetensors", "bad_utf8", raw(b'{"a\xff":{}}'))
    write("safetensors", "bad_length", struct.pack("<Q", 1 << 40) + b"{}")
    write("safetensors", "bad_metadata", raw('{"__metadata__":{"k":1}}'))


def config(**fields):
    base = {"vocab_size": 30522, "hidden_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 512,
            "max_position_embeddings": 512, "type_vocab_size": 2}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, indent=2, sort_keys=True) + "\n"


def distil(**fields):
    base = {"model_type": "distilbert", "vocab_size": 30522, "dim": 64, "n_layers": 2, "n_heads": 2,
            "hidden_dim": 256, "max_position_embeddings": 512}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, indent=2, sort_keys=True) + "\n"


def gpt2(**fields):
    base = {"model_type": "gpt2", "vocab_size": 1000, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 2}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, indent=2, sort_keys=True) + "\n"


def llama(**fields):
    base = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, indent=2, sort_keys=True) + "\n"


def modernbert(**fields):
    base = {"model_type": "modernbert", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 64, "pad_token_id": 0,
            "bos_token_id": 1, "cls_token_id": 1, "eos_token_id": 2, "sep_token_id": 2}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, indent=2, sort_keys=True) + "\n"


def model_config_seeds():
    write("model_config", "bert", config())
    write("model_config", "no_model_type", config(model_type=None))
    write("model_config", "roberta", config(model_type="roberta", pad_token_id=1, max_position_embeddings=514,
                                            type_vocab_size=1))
    write("model_config", "xlm_roberta", config(model_type="xlm-roberta", vocab_size=250002))
    write("model_config", "distilbert", distil())
    write("model_config", "distilbert_hf", distil(
        activation="gelu", architectures=["DistilBertForSequenceClassification"], attention_dropout=0.1,
        dropout=0.1, id2label={"0": "NEGATIVE", "1": "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1},
        initializer_range=0.02, qa_dropout=0.1, seq_classif_dropout=0.2, sinusoidal_pos_embds=False,
        tie_weights_=True, transformers_version="4.36.2", pad_token_id=0))
    write("model_config", "distilbert_aliases", distil(dim=None, n_heads=None, n_layers=None, hidden_size=64,
                                                       num_attention_heads=2, num_hidden_layers=2))
    write("model_config", "distilbert_sinusoidal", distil(sinusoidal_pos_embds=True))
    write("model_config", "bad_unknown_type", config(model_type="gpt_neox"))
    write("model_config", "bad_type_type", config(model_type=3))
    write("model_config", "bad_distil_heads", distil(n_heads=5))
    write("model_config", "bad_distil_alias", distil(hidden_size=32))
    write("model_config", "bad_distil_bool", distil(sinusoidal_pos_embds="yes"))
    write("model_config", "bad_distil_act", distil(activation="swiglu"))
    write("model_config", "bad_distil_missing", distil(hidden_dim=None))
    write("model_config", "bad_distil_pad", distil(pad_token_id=30522))
    write("model_config", "gpt2", gpt2())
    write("model_config", "gpt2_hf", gpt2(
        activation_function="gelu_new", architectures=["GPT2LMHeadModel"], attn_pdrop=0.1, bos_token_id=999,
        eos_token_id=999, embd_pdrop=0.1, initializer_range=0.02, layer_norm_epsilon=1e-5, n_inner=None,
        reorder_and_upcast_attn=False, resid_pdrop=0.1, scale_attn_by_inverse_layer_idx=False,
        scale_attn_weights=True, summary_activation=None, summary_first_dropout=0.1, summary_proj_to_labels=True,
        summary_type="cls_index", summary_use_proj=True, task_specific_params={"text-generation": {
            "do_sample": True, "max_length": 50}}, transformers_version="4.36.2", use_cache=True))
    write("model_config", "gpt2_aliases", gpt2(n_embd=None, n_head=None, hidden_size=64, num_attention_heads=2,
                                               max_position_embeddings=64, n_positions=None))
    write("model_config", "gpt2_untied", gpt2(tie_word_embeddings=False, n_inner=96, pad_token_id=0))
    write("model_config", "bad_gpt2_heads", gpt2(n_head=3))
    write("model_config", "bad_gpt2_alias", gpt2(hidden_size=32))
    write("model_config", "bad_gpt2_eos", gpt2(eos_token_id=1000))
    write("model_config", "bad_gpt2_inner", gpt2(n_inner=0))
    write("model_config", "llama", llama())
    write("model_config", "llama_hf", llama(
        architectures=["LlamaForCausalLM"], attention_bias=False, attention_dropout=0.0, bos_token_id=1,
        eos_token_id=2, hidden_act="silu", initializer_range=0.02, num_key_value_heads=2, pretraining_tp=1,
        rms_norm_eps=1e-6, rope_scaling=None, rope_theta=10000.0, tie_word_embeddings=False,
        torch_dtype="float32", transformers_version="4.36.2", use_cache=True))
    write("model_config", "llama_scaled", llama(rope_scaling={"type": "dynamic", "factor": 2.0}, attention_bias=True,
                                                num_key_value_heads=1, tie_word_embeddings=True, rope_theta=500000.0))
    write("model_config", "mistral", llama(model_type="mistral", sliding_window=16, num_key_value_heads=2))
    write("model_config", "mistral_defaults", llama(model_type="mistral", num_attention_heads=8))
    write("model_config", "bad_llama_rope", llama(rope_scaling={"type": "yarn", "factor": 4.0}))
    write("model_config", "bad_llama_rope_factor", llama(rope_scaling={"type": "linear", "factor": 0.5}))
    write("model_config", "bad_llama_kv", llama(num_key_value_heads=3))
    write("model_config", "bad_llama_odd_head", llama(hidden_size=36, num_attention_heads=4))
    write("model_config", "bad_mistral_window", llama(model_type="mistral", sliding_window=0, num_attention_heads=8))
    write("model_config", "qwen2", llama(model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True,
                                         rope_theta=1000000.0, use_sliding_window=False, sliding_window=None,
                                         max_window_layers=28, rope_scaling={"rope_type": "default"}))
    write("model_config", "bad_qwen2_window", llama(model_type="qwen2", use_sliding_window=True, sliding_window=8))
    write("model_config", "modernbert", modernbert(global_attn_every_n_layers=2, local_attention=8))
    write("model_config", "modernbert_hf", modernbert(
        architectures=["ModernBertForMaskedLM"], attention_bias=False, attention_dropout=0.0, classifier_activation="gelu",
        classifier_bias=False, classifier_dropout=0.0, classifier_pooling="cls", decoder_bias=True,
        deterministic_flash_attn=False, embedding_dropout=0.0, global_attn_every_n_layers=3,
        global_rope_theta=160000.0, hidden_activation="gelu", initializer_cutoff_factor=2.0, initializer_range=0.02,
        local_attention=128, local_rope_theta=10000.0, mlp_bias=False, mlp_dropout=0.0, norm_bias=False,
        norm_eps=1e-5, reference_compile=None, repad_logits_with_grad=False, sparse_pred_ignore_index=-100,
        sparse_prediction=False, torch_dtype="float32", transformers_version="4.48.3"))
    write("model_config", "modernbert_biased", modernbert(norm_bias=True, attention_bias=True, mlp_bias=True,
                                                          classifier_pooling="mean", local_rope_theta=None))
    write("model_config", "bad_modernbert_pooling", modernbert(classifier_pooling="max"))
    write("model_config", "bad_modernbert_every", modernbert(global_attn_every_n_layers=0))
    write("model_config", "bad_modernbert_cls", modernbert(cls_token_id=1000))


def bert_config_seeds():
    write("bert_config", "minilm", json.dumps({
        "_name_or_path": "nreimers/MiniLM-L6-H384-uncased", "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 384, "initializer_range": 0.02,
        "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6, "pad_token_id": 0,
        "position_embedding_type": "absolute", "transformers_version": "4.8.2", "type_vocab_size": 2,
        "use_cache": True, "vocab_size": 30522}, indent=2) + "\n")
    write("bert_config", "minimal", config())
    write("bert_config", "bert_base", config(hidden_size=768, num_hidden_layers=12,
                                             num_attention_heads=12, intermediate_size=3072))
    write("bert_config", "classifier", config(
        architectures=["BertForSequenceClassification"], id2label={"0": "NEGATIVE", "1": "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1}, classifier_dropout=None, hidden_act="gelu_new",
        pad_token_id=None, problem_type="single_label_classification"))
    write("bert_config", "all_fields", config(
        hidden_act="relu", hidden_dropout_prob=0, attention_probs_dropout_prob=0.25,
        initializer_range=0.05, layer_norm_eps=1e-5, pad_token_id=3, classifier_dropout=0.5,
        position_embedding_type="absolute", model_type="bert", use_cache=False))
    # Near misses.
    write("bert_config", "bad_heads", config(hidden_size=100, num_attention_heads=3))
    write("bert_config", "bad_missing", config(hidden_size=None))
    write("bert_config", "bad_type", config(hidden_size="128"))
    write("bert_config", "bad_prob", config(hidden_dropout_prob=1.5))
    write("bert_config", "bad_act", config(hidden_act="gelu_10"))
    write("bert_config", "bad_json", '{"vocab_size": 30522, "hidden_size": ')
    write("bert_config", "roberta", config(model_type="roberta", pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                           max_position_embeddings=514, type_vocab_size=1))
    write("bert_config", "xlm_roberta", config(model_type="xlm-roberta", vocab_size=250002,
                                               architectures=["XLMRobertaForSequenceClassification"]))
    write("bert_config", "bad_family", config(model_type="gpt2"))



# ---- corpus (data/corpus.h Notes [Token shard format], [Corpus index]) ------

def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def shard(documents, vocab_size, version=1, checksum=None):
    """documents: lists of sentences (lists of ids). Returns (bytes, counts)."""
    tokens, sentence_starts, document_starts = [], [0], [0]
    for doc in documents:
        for sentence in doc:
            tokens += sentence
            sentence_starts.append(len(tokens))
        document_starts.append(len(sentence_starts) - 1)
    body = struct.pack(f"<{len(tokens)}i", *tokens)
    body += b"\0" * (-len(body) % 8)
    body += struct.pack(f"<{len(sentence_starts)}Q", *sentence_starts)
    body += struct.pack(f"<{len(document_starts)}Q", *document_starts)
    real = fnv1a64(body)
    header = b"KILNTOKS" + struct.pack("<IIQQQQQQ", version, 64, len(tokens), len(sentence_starts) - 1,
                                       len(document_starts) - 1, vocab_size,
                                       real if checksum is None else checksum, 0)
    counts = {"num_tokens": len(tokens), "num_sentences": len(sentence_starts) - 1,
              "num_documents": len(document_starts) - 1, "checksum": f"{real if checksum is None else checksum:016x}"}
    return header + body, counts


def corpus(shards_docs, vocab_size=30, index_edit=None, shard_edit=None):
    """An index.json followed by its shards, as fuzz_corpus reads them."""
    shards, entries = [], []
    totals = {"num_tokens": 0, "num_sentences": 0, "num_documents": 0}
    for k, docs in enumerate(shards_docs):
        data, counts = shard(docs, vocab_size)
        if shard_edit:
            data = shard_edit(k, data)
            if len(data) >= 56:  # the index repeats the (possibly edited) header checksum
                counts["checksum"] = f"{struct.unpack_from('<Q', data, 48)[0]:016x}"
        entries.append({"file": f"shard-{k:05d}.bin", **{key: counts[key] for key in totals},
                        "first_token": totals["num_tokens"], "first_sentence": totals["num_sentences"],
                        "first_document": totals["num_documents"], "checksum": counts["checksum"]})
        for key in totals:
            totals[key] += counts[key]
        shards.append(data)
    index = {"format": "kiln-token-corpus", "version": 1, "vocab_size": vocab_size,
             "vocab_fingerprint": "8f3c0a8e2b1d4c67", "lowercase": True,
             "special_ids": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, **totals, "shards": entries,
             "sources": [{"path": "wiki.txt", "lines": 9, "blank_lines": 2, "dropped_lines": 0,
                          "first_document": 0, "num_documents": totals["num_documents"]}],
             "options": {"shard_tokens": 16, "max_sentences_per_document": 0}}
    if index_edit:
        index_edit(index)
    return json.dumps(index, indent=2).encode() + b"\n" + b"".join(shards)


def corpus_seeds():
    two_docs = [[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]]
    write("corpus", "one_shard", corpus([two_docs]))
    write("corpus", "two_shards", corpus([two_docs, [[[14], [15, 16, 17]], [[29]]]]))
    write("corpus", "odd_tokens", corpus([[[[5, 6, 7]]]]))          # 3 tokens: 4 bytes of padding
    write("corpus", "single_token", corpus([[[[0]]]], vocab_size=1))
    write("corpus", "empty_shard_list", corpus([]))
    write("corpus", "many_documents", corpus([[[[5 + i % 20] * (1 + i % 3)] for i in range(40)]]))

    def patch(offset, value, fmt="<Q"):
        return lambda k, d: d[:offset] + struct.pack(fmt, value) + d[offset + struct.calcsize(fmt):]
    write("corpus", "bad_checksum", corpus([two_docs], shard_edit=lambda k, d: d[:64] + b"\x07" + d[65:]))
    write("corpus", "bad_truncated", corpus([two_docs], shard_edit=lambda k, d: d[:-5]))
    write("corpus", "bad_version", corpus([two_docs], shard_edit=patch(8, 2, "<I")))
    write("corpus", "bad_token_count", corpus([two_docs], shard_edit=patch(16, 1 << 40)))
    write("corpus", "bad_vocab_size", corpus([two_docs], shard_edit=patch(40, 31)))

    def bad_id(k, d):  # token 0 -> 99 >= vocab size, checksum fixed up: only verify_data sees it
        body = struct.pack("<i", 99) + d[68:]
        return d[:48] + struct.pack("<Q", fnv1a64(body)) + d[56:64] + body
    write("corpus", "bad_token_id", corpus([two_docs], shard_edit=bad_id))

    def bad_starts(k, d):  # sentence_starts[1] = 0 (not increasing), checksum fixed up
        body = bytearray(d[64:])
        struct.pack_into("<Q", body, 48, 0)  # 9 tokens: 40 bytes with padding, then sentence_starts
        return d[:48] + struct.pack("<Q", fnv1a64(bytes(body))) + d[56:64] + bytes(body)
    write("corpus", "bad_starts", corpus([two_docs], shard_edit=bad_starts))
    write("corpus", "bad_totals", corpus([two_docs], index_edit=lambda j: j.update(num_tokens=8)))
    write("corpus", "bad_offsets", corpus([two_docs, two_docs],
                                          index_edit=lambda j: j["shards"][1].update(first_token=0)))
    write("corpus", "bad_file_name", corpus([two_docs], index_edit=lambda j: j["shards"][0].update(
        file="../shard-00000.bin")))
    write("corpus", "bad_index_as_shard", corpus([two_docs], index_edit=lambda j: j["shards"][0].update(
        file="index.json")))
    write("corpus", "bad_missing_shard", corpus([two_docs], index_edit=lambda j: j["shards"].append(
        dict(j["shards"][0], file="shard-00007.bin"))))
    write("corpus", "bad_format", corpus([two_docs], index_edit=lambda j: j.update(format="kiln-corpus")))
    write("corpus", "bad_field_type", corpus([two_docs], index_edit=lambda j: j.update(vocab_size="30")))
    write("corpus", "bad_fingerprint", corpus([two_docs], index_edit=lambda j: j.update(vocab_fingerprint="xyz")))
    write("corpus", "bad_json", b'{"format": "kiln-token-corpus", "version": 1, "shards": [')


# ---- labeled files (data/finetune_data.h) ---------------------------------
# Byte 0: fuzz_labeled_file's options: bits 0-1 format (0 tsv, 1 csv, 2 jsonl),
# 4 unlabeled, 8 label_set {"0", "1", "neutral"}, 16 text_column "sentence",
# 32 pair_column "".
TSV, CSV, JSONL = 0, 1, 2


def labeled(flags, text):
    return bytes([flags]) + text.encode("utf-8")


def labeled_file_seeds():
    write("labeled_file", "sst2_tsv", labeled(TSV, "sentence\tlabel\nhide new secretions from the parental units \t0\n"
                                                   "contains no wit , only labored gags \t0\n"
                                                   "that loves its characters \t1\n"))
    write("labeled_file", "mnli_tsv", labeled(TSV, "index\tpremise\thypothesis\tlabel\n"
                                                   "0\tThe cat sat.\tA cat is sitting.\tentailment\n"
                                                   "1\tIt rains.\tThe sun \"shines\".\tcontradiction\n"
                                                   "2\tHe left.\tHe was late.\tneutral\n"))
    write("labeled_file", "test_unlabeled_tsv", labeled(TSV | 4, "idx\tsentence\n0\tuneasy mishmash of styles\n"
                                                                 "1\tthis film 's relationship to actual tension\n"))
    write("labeled_file", "bom_crlf_tsv", labeled(TSV, "\ufeffsentence\tlabel\r\ngood\t1\r\n\r\nbad\t0\r\n"))
    write("labeled_file", "label_set_tsv", labeled(TSV | 8, "sentence\tlabel\nok\t1\nmeh\tneutral\nno\t0\n"))
    write("labeled_file", "quoted_csv", labeled(CSV, 'text,label\n"Hello, world",positive\n'
                                                     '"She said ""hi""\nthen left",negative\n'
                                                     'plain text,positive\r\n'))
    write("labeled_file", "qqp_csv", labeled(CSV, "id,qid1,qid2,question1,question2,label\n"
                                                  '1,1,2,"How do I learn C++?","What is the best way to learn C++?",1\n'
                                                  "2,3,4,Why?,Why not?,0\n"))
    write("labeled_file", "trailing_comma_csv", labeled(CSV | 16 | 32, "sentence,label,\nfine,1,\n"))
    write("labeled_file", "numbers_jsonl", labeled(JSONL, '{"sentence": "a fine film", "label": 1}\n'
                                                          '\n{"sentence": "dull", "label": 0}\n'
                                                          '{"label": "01", "sentence": "x"}\n'))
    write("labeled_file", "pairs_jsonl", labeled(JSONL, '{"question": "Who?", "sentence": "Him.", "label": '
                                                        '"entailment", "idx": 0}\n'
                                                        '{"question": "Wh\\u00e9re?", "sentence": "Th\\u00e8re.", '
                                                        '"label": "not_entailment", "idx": 1}\n'))
    write("labeled_file", "unlabeled_jsonl", labeled(JSONL | 4, '{"text": "one"}\n{"text": null}\n'))
    write("labeled_file", "big_label_jsonl", labeled(JSONL, '{"text": "a", "label": 99999}\n'))
    # Near misses.
    write("labeled_file", "bad_width_tsv", labeled(TSV, "sentence\tlabel\nno tab here\n"))
    write("labeled_file", "bad_empty_label_tsv", labeled(TSV, "sentence\tlabel\ntext\t  \n"))
    write("labeled_file", "bad_label_set_tsv", labeled(TSV | 8, "sentence\tlabel\ntext\t2\n"))
    write("labeled_file", "bad_no_text_column", labeled(TSV | 16, "review\tlabel\ngood\t1\n"))
    write("labeled_file", "bad_unterminated_csv", labeled(CSV, 'text,label\n"open quote,1\n'))
    write("labeled_file", "bad_after_quote_csv", labeled(CSV, 'text,label\n"a"b,1\n'))
    write("labeled_file", "bad_json_jsonl", labeled(JSONL, '{"text": "a", "label": 1}\n{"text": \n'))
    write("labeled_file", "bad_missing_key_jsonl", labeled(JSONL, '{"text": "a", "label": 1}\n{"text": "b"}\n'))
    write("labeled_file", "bad_nested_jsonl", labeled(JSONL, '{"text": ["a"], "label": 1}\n'))
    write("labeled_file", "bad_empty", labeled(CSV, ""))


# ---- vocab.txt -------------------------------------------------------------

BERT_HEAD = ["[PAD]"] + [f"[unused{i}]" for i in range(4)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["!", ",", ".", "?", "a", "b", "c", "the", "of", "and", "hello", "world", "un", "##aff", "##able",
         "##ing", "##s", "##a", "##b", "play", "café", "##é", "中", "文", "😀"]


def vocab_seeds():
    write("vocab", "bert_like", "\n".join(BERT_HEAD + WORDS) + "\n")
    write("vocab", "minimal", "[UNK]\n")
    write("vocab", "crlf_no_final_newline", "\r\n".join(BERT_HEAD + WORDS[:8]))
    write("vocab", "duplicates_and_spaces", "[UNK]\nthe \nthe\n##s\t\n\n##s\n[CLS]\n[SEP]\n[PAD]\n")
    write("vocab", "odd_tokens", "[UNK]\n##\n####\n#\n[\n]\n[MASK\n" + "x" * 200 + "\n\xc3\n\xff\xfe\n")
    write("vocab", "cased", "\n".join(BERT_HEAD + ["Hello", "hello", "World", "##ING", "É", "é"]) + "\n")
    write("vocab", "bad_no_unk", "[PAD]\n[CLS]\n[SEP]\nthe\n")
    write("vocab", "bad_unk_lowercase", "[unk]\nthe\n")
    write("vocab", "bad_empty", "")


# ---- tokenizer_config.json -------------------------------------------------

def tokenizer_config_seeds():
    write("tokenizer_config", "bert_base_uncased", '{"do_lower_case": true, "model_max_length": 512}\n')
    write("tokenizer_config", "minilm", json.dumps({
        "clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_basic_tokenize": True,
        "do_lower_case": True, "mask_token": "[MASK]", "model_max_length": 512, "never_split": None,
        "pad_token": "[PAD]", "sep_token": "[SEP]", "strip_accents": None, "tokenize_chinese_chars": True,
        "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"}, indent=2) + "\n")
    write("tokenizer_config", "cased", '{"do_lower_case": false, "tokenizer_class": "BertTokenizer"}\n')
    write("tokenizer_config", "kiln_written", '{\n  "do_lower_case": true,\n  "tokenizer_class": "BertTokenizer"\n}\n')
    write("tokenizer_config", "empty_object", "{}")
    write("tokenizer_config", "duplicate_key", '{"do_lower_case": true, "do_lower_case": false}')
    write("tokenizer_config", "bad_string_bool", '{"do_lower_case": "true"}')
    write("tokenizer_config", "bad_array", '[{"do_lower_case": true}]')
    write("tokenizer_config", "bad_json", '{"do_lower_case": tru')
    write("tokenizer_config", "bad_empty", "")
    # Special-token roles, read beside a tokenizer.json (Note [Choosing a tokenizer]).
    write("tokenizer_config", "roles", '{"pad_token": "<pad>", "cls_token": {"content": "<s>"}, "mask_token": null}\n')
    write("tokenizer_config", "role_missing", '{"mask_token": "<mask>"}\n')
    write("tokenizer_config", "role_bad_type", '{"pad_token": ["<pad>"]}\n')


# ---- --args-file -----------------------------------------------------------
# fuzz_args_file tries each file with pretrain, finetune and evaluate.

def args_file_seeds():
    write("args_file", "doc_example", '{"lr": 1e-4, "batch-size": 16, "resume": true, "train_file": "data.txt"}\n')
    write("args_file", "finetune_glue", json.dumps({
        "model": "models/minilm", "train-file": "glue/SST-2/train.tsv", "validation-file": "glue/SST-2/dev.tsv",
        "text-column": "sentence", "label-column": "label", "max-seq-length": 128, "batch-size": 32,
        "lr": 2e-5, "epochs": 3, "warmup-ratio": 0.06, "weight-decay": 0.01, "seed": 42,
        "save-steps": 500, "save-total-limit": 2, "amp": "bf16"}, indent=2) + "\n")
    write("args_file", "pretrain_flags", json.dumps({
        "config": "bert-tiny", "optimizer": "lamb", "lr_scheduler": "cosine", "whole_word_mask": True,
        "cased": False, "mlm-probability": 0.15, "max-steps": 1000, "workers": 2, "device": "cpu"}) + "\n")
    write("args_file", "empty_object", "{}")
    write("args_file", "bool_value_flag", '{"seed": true, "lr": false}  ')
    write("args_file", "numbers", '{"lr": -1, "epochs": 1e300, "seed": 18446744073709551615, "max-steps": -0.0}')
    write("args_file", "dash_value", '{"model": "--resume", "output-dir": "-"}')
    write("args_file", "help", '{"help": true}')
    write("args_file", "bad_unknown_flag", '{"learning-rate": 1e-4}')
    write("args_file", "bad_on_off_value", '{"resume": "yes"}')
    write("args_file", "bad_nested", '{"lr": [1e-4]}')
    write("args_file", "bad_self", '{"args-file": "other.json"}')
    write("args_file", "bad_not_object", '["--lr", "1e-4"]')
    write("args_file", "bad_json", '{"lr": 1e-4,')


# ---- checkpoints (train/checkpoint.h; fuzz_checkpoint's nn::Linear(3, 2)) ---

FORMATS = {"F32": "f", "F64": "d", "I64": "q"}


def tensors(entries, metadata=None):
    """entries: (name, dtype, shape, values) -> safetensors bytes (values given)."""
    header, buffer = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in entries:
        data = struct.pack(f"<{len(values)}{FORMATS[dtype]}", *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buffer), len(buffer) + len(data)]}
        buffer += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def optimizer_state(step=1, with_state=True, edit=None):
    e = []
    for g, (index, decay) in enumerate([(0, 0.01), (1, 0.0)]):
        p = f"optimizer.param_groups.{g}."
        e += [(p + "params", "I64", [1], [index]), (p + "lr", "F64", [], [1e-3]),
              (p + "weight_decay", "F64", [], [decay]), (p + "beta1", "F64", [], [0.9]),
              (p + "beta2", "F64", [], [0.999]), (p + "eps", "F64", [], [1e-8])]
    if with_state:
        for i, shape in enumerate([[2, 3], [2]]):
            n = shape[0] * (shape[1] if len(shape) > 1 else 1)
            p = f"optimizer.state.{i}."
            e += [(p + "step", "I64", [], [step]), (p + "exp_avg", "F32", shape, [0.01 * (k + 1) for k in range(n)]),
                  (p + "exp_avg_sq", "F32", shape, [1e-4 * (k + 1) for k in range(n)])]
    e += [("scheduler.last_step", "I64", [], [step]), ("scheduler.base_lrs", "F64", [2], [1e-3, 1e-3]),
          ("scaler.scale", "F32", [], [65536.0]), ("scaler.growth_tracker", "I64", [], [step % 2000]),
          ("scaler.growth_factor", "F64", [], [2.0]), ("scaler.backoff_factor", "F64", [], [0.5]),
          ("scaler.growth_interval", "I64", [], [2000])]
    if edit:
        e = edit(e)
    return tensors(e, {"format": "kiln"})


def set_value(name, value, dtype=None):
    return lambda e: [(n, dtype or d, s, [value] if n == name else v) for n, d, s, v in e]


def trainer_state(**edits):
    state = {"step": 1, "total_steps": 10, "batches_per_epoch": 4, "kind": "mlm", "amp": "fp16", "epoch": 0.25,
             "loader": {"batches_consumed": 1, "epoch": 0}, "rng": {"offset": 12, "seed": 42},
             "eval": {"accuracy": 0.5}, "args": {"lr": 0.001, "seed": 42, "output_dir": "out"}}
    state.update(edits)
    return json.dumps({k: v for k, v in state.items() if v is not None}, indent=2) + "\n"


MODEL = tensors([("weight", "F32", [2, 3], [0.1, -0.2, 0.3, -0.4, 0.5, -0.6]), ("bias", "F32", [2], [0.0, 0.0])],
                {"format": "pt"})


def checkpoint(config_text=None, model=MODEL, optimizer=None, state=None, parts=4):
    files = [(config_text or config(vocab_size=30, hidden_size=8, intermediate_size=16, max_position_embeddings=16))
             .encode(), model, optimizer or optimizer_state(), (state or trainer_state()).encode()]
    return b"\n--8<--\n".join(files[:parts])


def checkpoint_seeds():
    write("checkpoint", "step_1", checkpoint())
    write("checkpoint", "no_param_state", checkpoint(optimizer=optimizer_state(with_state=False)))
    write("checkpoint", "step_large", checkpoint(optimizer=optimizer_state(step=123456789)))
    write("checkpoint", "minimal_trainer_state", checkpoint(state='{"step": 0}'))
    write("checkpoint", "only_config_and_model", checkpoint(parts=2))
    write("checkpoint", "bad_step_type", checkpoint(state=trainer_state(step=1.5)))
    write("checkpoint", "bad_trainer_state", checkpoint(state="[1, 2]"))
    write("checkpoint", "bad_state_amp_number", checkpoint(state=trainer_state(amp=5)))
    write("checkpoint", "bad_state_rng_string", checkpoint(state=trainer_state(rng={"seed": "42", "offset": 1})))
    write("checkpoint", "bad_state_loader_negative", checkpoint(state=trainer_state(
        loader={"batches_consumed": -1, "epoch": 0})))
    write("checkpoint", "bad_state_step_past_int64", checkpoint(state=trainer_state(step=2**64 - 1)))
    write("checkpoint", "bad_model_shape", checkpoint(model=tensors([("weight", "F32", [3, 2], [0.0] * 6),
                                                                      ("bias", "F32", [2], [0.0, 0.0])])))
    write("checkpoint", "bad_optimizer_step", checkpoint(optimizer=optimizer_state(
        edit=set_value("optimizer.state.0.step", 0))))
    write("checkpoint", "bad_lr", checkpoint(optimizer=optimizer_state(
        edit=set_value("optimizer.param_groups.0.lr", -1.0))))
    write("checkpoint", "bad_scheduler_step", checkpoint(optimizer=optimizer_state(
        edit=set_value("scheduler.last_step", -3))))
    write("checkpoint", "bad_scaler", checkpoint(optimizer=optimizer_state(
        edit=set_value("scaler.growth_tracker", 2000))))
    write("checkpoint", "bad_config", checkpoint(config_text='{"hidden_size": 8}'))


# ---- metrics.jsonl ---------------------------------------------------------

def metrics_jsonl_seeds():
    write("metrics_jsonl", "training", "".join(
        json.dumps({"step": s, "loss": round(10.5 - s * 0.37, 4), "lr": 1e-4 * min(1, s / 3),
                    "grad_norm": 1.5 + s % 3, "tokens_per_s": 1000 + s}) + "\n" for s in range(1, 21)))
    write("metrics_jsonl", "with_eval_and_null",
          '{"step":5,"loss":2.5,"lr":0.0001}\n{"step":5,"eval_accuracy":0.5,"eval_loss":null}\n'
          '{"step":10,"loss":null,"lr":5e-05}\n')
    write("metrics_jsonl", "resumed", '{"step":1,"loss":3.0}\n{"step":2,"loss":2.0}\n{"step":3,"loss":1.0}\n'
                                      '{"step":2,"loss":2.5}\n{"step":3,"loss":1.5}\n')
    write("metrics_jsonl", "extremes", '{"step":0,"loss":1e308,"lr":-1e308}\n{"step":9223372036854775807,'
                                       '"loss":5e-324,"lr":0}\n{"step":-9223372036854775808,"loss":-0.0}\n')
    write("metrics_jsonl", "single_point", '{"step":7,"loss":0.25}')
    write("metrics_jsonl", "empty", "")
    write("metrics_jsonl", "blank_lines", "\n\n{\"step\":1,\"lr\":1}\n\n")
    write("metrics_jsonl", "bad_step_float", '{"step":1.0,"loss":1}\n')
    write("metrics_jsonl", "bad_value_string", '{"step":1,"loss":"1"}\n')
    write("metrics_jsonl", "bad_torn_line", '{"step":1,"loss":1}\n{"step":2,"lo')
    write("metrics_jsonl", "bad_not_object", '[1, 2]\n')


# ---- inputs that once crashed, replayed since their fix ---------------------
# (tests/fuzz/crashes/ is for inputs that still crash: none at present)

def write_crash(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def crash_inputs():
    depth = 200000  # 20,000 already overflow the stack under ASan, 200,000 also without
    one_shard = corpus([[[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]]])
    index, rest = one_shard.split(b"KILNTOKS", 1)
    special = b'"special_ids": {\n    "pad": 0,\n    "unk": 1,\n    "cls": 2,\n    "sep": 3,\n    "mask": 4\n  }'
    assert special in index
    deep = index.replace(special, b'"special_ids": ' + b"[" * depth + b"]" * depth)
    write_crash("corpus", "stack_overflow_deep_special_ids", deep)
    # first_token past int64 parses as a double; get<uint64_t>() cast it (UBSan: out of range).
    floaty = index.replace(b'"first_token": 0', b'"first_token": -92233720368547758080')
    assert floaty != index
    write_crash("corpus", "ubsan_float_first_token", floaty + b"KILNTOKS" + rest)
    write_crash("corpus", "float_num_tokens", index.replace(b'"num_tokens": 9', b'"num_tokens": 9.0', 1)
                + b"KILNTOKS" + rest)
    write_crash("checkpoint", "optimizer_step_int64_max", checkpoint(optimizer=optimizer_state(
        edit=set_value("optimizer.state.0.step", 2**63 - 1))))
    write_crash("checkpoint", "scheduler_last_step_int64_max", checkpoint(optimizer=optimizer_state(
        edit=set_value("scheduler.last_step", 2**63 - 1))))
    write_crash("checkpoint", "scaler_growth_interval_int64_max", checkpoint(optimizer=optimizer_state(
        edit=set_value("scaler.growth_interval", 2**63 - 1))))


# ---- large inputs for long campaigns (not committed: written on request) -----
# `make_seeds.py --large TARGET DIR` writes inputs at and just past the size
# caps of TARGET's readers into DIR, so a libFuzzer run with a -max_len above
# the cap (tools/fuzz.sh with KILN_FUZZ_LARGE=1) mutates inputs that reach the
# caps: 16 MiB for JSON files (core/json_util.h kMaxJsonBytes, also a JSONL
# line), 1 MiB for --args-file (tools/args_file.h). Each is a few tens of MiB
# in all, so they are generated, not kept in tests/fuzz/corpus/.

JSON_CAP = 16 << 20
ARGS_CAP = 1 << 20


def pad_json(text, size):
    """text (a JSON object ending in '}') padded with spaces before the brace to exactly size bytes."""
    body = text.rstrip()
    assert body.endswith("}") and len(body) < size
    return body[:-1] + " " * (size - len(body)) + "}"


def long_string_json(text, size, key="_padding"):
    """text (a JSON object) with one more string member, to exactly size bytes."""
    obj = json.loads(text)
    obj[key] = ""
    base = len(json.dumps(obj))
    obj[key] = "x" * (size - base)
    out = json.dumps(obj)
    assert len(out) == size
    return out


def json_pair(text, cap):
    """(name, data) just under and just over cap: spaces, and one long string."""
    return [("large_spaces_at_cap", pad_json(text, cap)), ("large_spaces_over_cap", pad_json(text, cap + 1)),
            ("large_string_at_cap", long_string_json(text, cap)),
            ("large_string_over_cap", long_string_json(text, cap + 1))]


def large_seeds(target):
    small_config = config(vocab_size=30, hidden_size=8, intermediate_size=16, max_position_embeddings=16)
    if target == "bert_config":
        return json_pair(small_config, JSON_CAP) + [
            ("large_deep_at_cap", "[" * 64 + "]" * 64 + " " * (JSON_CAP - 128))]
    if target == "tokenizer_config":
        return json_pair('{"do_lower_case": true, "model_max_length": 512}', JSON_CAP)
    if target == "args_file":
        return json_pair('{"lr": 1e-4, "batch-size": 16, "resume": true}', ARGS_CAP)
    if target == "checkpoint":
        out = []
        for name, text in json_pair(small_config, JSON_CAP):
            out.append(("config_" + name, checkpoint(config_text=text)))
        for name, text in json_pair(trainer_state(), JSON_CAP):
            out.append(("state_" + name, checkpoint(state=text)))
        return out
    if target == "corpus":
        one_shard = corpus([[[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]]])
        index, rest = one_shard.split(b"KILNTOKS", 1)
        return [(name, text.encode() + b"KILNTOKS" + rest) for name, text in json_pair(index.decode(), JSON_CAP)]
    if target == "labeled_file":
        line = '{"sentence": "a good film", "label": 1}'
        out = [("large_jsonl_line_at_cap", b"\x02" + long_string_json(line, JSON_CAP, "note").encode() + b"\n"),
               ("large_jsonl_line_over_cap", b"\x02" + long_string_json(line, JSON_CAP + 1, "note").encode() + b"\n")]
        rows = "".join("a good film number %d\t%d\n" % (i, i % 2) for i in range(JSON_CAP // 32))
        out.append(("large_tsv", b"\x00sentence\tlabel\n" + rows.encode()))
        return out
    if target == "metrics_jsonl":
        line = '{"step": 1, "loss": 2.5}'
        rows = "".join('{"step": %d, "loss": %.4f, "lr": 1e-4}\n' % (s, 10.0 / s) for s in range(1, 350000))
        return [("large_line_at_cap", long_string_json(line, JSON_CAP, "note") + "\n"),
                ("large_line_over_cap", long_string_json(line, JSON_CAP + 1, "note") + "\n"),
                ("large_many_steps", rows)]
    if target == "safetensors":
        weights = safetensors([("w", "F32", [2, 2])])
        n = struct.unpack("<Q", weights[:8])[0]
        header = weights[8:8 + n].decode().rstrip()
        assert header.endswith("}")
        big = header[:-1] + ',"__metadata__":{"note":"' + "x" * JSON_CAP + '"}}'
        return [("large_metadata", struct.pack("<Q", len(big)) + big.encode() + weights[8 + n:]),
                ("large_header_len_past_cap", struct.pack("<Q", 100_000_001) + b"{}")]
    if target == "vocab":
        # Its cap (1 GiB) is far past any -max_len; a vocabulary 3x bert-base's instead.
        return [("large_vocab", "\n".join(BERT_HEAD + ["w%d" % i for i in range(100_000)]) + "\n")]
    if target == "tokenizer":
        return []  # its input is text: -max_len alone makes it long
    raise SystemExit("make_seeds.py: no large inputs for target '%s'" % target)


def weight_index_seeds():
    shard = "model-%05d-of-00002.safetensors"
    good = {"metadata": {"total_size": 1024},
            "weight_map": {"roberta.embeddings.word_embeddings.weight": shard % 1,
                           "lm_head.bias": shard % 2}}
    write("weight_index", "two_shards", json.dumps(good, indent=2))
    write("weight_index", "no_metadata", json.dumps({"weight_map": {"a": "model.safetensors"}}))
    for name, target in [("escape", "../outside.safetensors"), ("absolute", "/etc/passwd"),
                         ("dot", "."), ("empty_name", ""), ("number", 7)]:
        write("weight_index", "bad_" + name, json.dumps({"weight_map": {"a": target}}))
    write("weight_index", "bad_empty_map", json.dumps({"weight_map": {}}))
    write("weight_index", "bad_array", json.dumps({"weight_map": ["a", "b"]}))
    write("weight_index", "bad_duplicate", '{"weight_map": {"a": "x", "a": "y"}}')
    write("weight_index", "bad_json", '{"weight_map": {"a": ')


def adapter_config_seeds():
    peft = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "", "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layer_replication": None,
            "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 16,
            "lora_dropout": 0.1, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
            "peft_type": "LORA", "r": 8, "rank_pattern": {}, "revision": None, "target_modules": ["query", "value"],
            "task_type": "SEQ_CLS", "use_dora": False, "use_rslora": False}
    def seed(name, **edit):
        c = dict(peft)
        for k, v in edit.items():
            if v is None and k in c:
                del c[k]
            else:
                c[k] = v
        write("adapter_config", name, json.dumps(c, indent=2))
    seed("peft_0_10")
    seed("regex", target_modules=r".*layer\.1\..*(query|dense)")
    seed("all_linear", target_modules="all-linear", bias="all", use_rslora=True)
    seed("newer_peft", exclude_modules=None, lora_bias=False, use_qalora=False, peft_version="0.17.0")
    seed("modules_to_save", modules_to_save=["pooler"], init_lora_weights="gaussian", task_type=None)
    seed("bad_ia3", peft_type="IA3")
    seed("bad_dora", use_dora=True)
    seed("bad_rank", r=0)
    seed("bad_huge_rank", r=2147483647)
    seed("bad_target", target_modules=["nowhere"])
    seed("bad_layernorm", target_modules=["LayerNorm"])
    seed("bad_regex", target_modules="(unclosed")
    seed("bad_pattern", rank_pattern={"query": 4})
    write("adapter_config", "bad_json", '{"peft_type": "LORA", "r": ')


def write_large(target, directory):
    os.makedirs(directory, exist_ok=True)
    for name, data in large_seeds(target):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 4 and sys.argv[1] == "--large":
        write_large(sys.argv[2], sys.argv[3])
        sys.exit(0)
    safetensors_seeds()
    bert_config_seeds()
    model_config_seeds()
    corpus_seeds()
    labeled_file_seeds()
    vocab_seeds()
    tokenizer_config_seeds()
    args_file_seeds()
    checkpoint_seeds()
    metrics_jsonl_seeds()
    weight_index_seeds()
    adapter_config_seeds()
    crash_inputs()

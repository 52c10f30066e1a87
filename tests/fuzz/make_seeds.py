#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (stdlib only, deterministic):

  tests/fuzz/corpus/safetensors/   small valid files (every dtype, metadata,
                                   scalars, zero-sized tensors) and near-misses
  tests/fuzz/corpus/bert_config/   the all-MiniLM-L6-v2 config, presets, minimal
                                   and broken configs

Run from anywhere: python3 tests/fuzz/make_seeds.py. Existing seeds of these
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


if __name__ == "__main__":
    safetensors_seeds()
    bert_config_seeds()

#!/usr/bin/env python3
"""The PEFT side of tests/test_lora_peft.cpp: LoRA adapters made and run by
Hugging Face PEFT on transformers models built from configs (no hub).

    peft_reference.py build --out DIR
        DIR/<case>/base: a transformers model (save_pretrained), randomly
        initialised; DIR/<case>/adapter: a PEFT LoRA adapter on it (B not zero:
        init_lora_weights=False, so the adapter changes the outputs), saved by
        PeftModel.save_pretrained; DIR/<case>/inputs.safetensors and
        outputs.safetensors ("output": the adapted model's logits);
        DIR/manifest.json lists the cases.
    peft_reference.py run --base DIR --adapter DIR --arch CLASS --inputs F --out F
        PeftModel.from_pretrained(CLASS.from_pretrained(base), adapter) on the
        inputs: its logits ("output"), and the merged model's ("merged").
"""
import argparse
import json
import os
import sys

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file


def bert_case():
    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=40, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForSequenceClassification(config)
    lora = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value", "output.dense"],
                      lora_dropout=0.0, bias="all", init_lora_weights=False)
    return "BertForSequenceClassification", model, lora, 60


def gpt2_case():
    config = transformers.GPT2Config(vocab_size=70, n_positions=40, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=69,
                                     eos_token_id=69)
    model = transformers.GPT2LMHeadModel(config)
    lora = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, target_modules=["c_attn", "c_proj"],
                      fan_in_fan_out=True, use_rslora=True, lora_dropout=0.0, init_lora_weights=False)
    return "GPT2LMHeadModel", model, lora, 70


def inputs(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def logits(model, x):
    model.eval()
    with torch.no_grad():
        return model(input_ids=x["input_ids"], attention_mask=x["attention_mask"]).logits.float().contiguous()


def build(out):
    os.makedirs(out, exist_ok=True)
    cases = {}
    for seed, (name, make) in enumerate([("bert", bert_case), ("gpt2", gpt2_case)]):
        torch.manual_seed(100 + seed)
        arch, model, lora, vocab = make()
        d = os.path.join(out, name)
        model.save_pretrained(os.path.join(d, "base"))
        peft_model = get_peft_model(model, lora)
        peft_model.save_pretrained(os.path.join(d, "adapter"))
        x = inputs(vocab, 200 + seed)
        save_file(x, os.path.join(d, "inputs.safetensors"))
        save_file({"output": logits(peft_model, x)}, os.path.join(d, "outputs.safetensors"))
        cases[name] = {"arch": arch}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(cases, f)


def run(a):
    model = getattr(transformers, a.arch).from_pretrained(a.base)
    peft_model = PeftModel.from_pretrained(model, a.adapter)
    x = load_file(a.inputs)
    adapted = logits(peft_model, x)
    merged = logits(peft_model.merge_and_unload(), x)
    save_file({"output": adapted, "merged": merged}, a.out)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    r = sub.add_parser("run")
    for flag in ("--base", "--adapter", "--arch", "--inputs", "--out"):
        r.add_argument(flag, required=True)
    a = ap.parse_args()
    if a.cmd == "build":
        build(a.out)
    else:
        run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())

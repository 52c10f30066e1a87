"""Reference metric values for tests/test_task_metrics.cpp.

Usage: task_metrics_reference.py IN.json OUT.json

IN.json holds lists of cases, each with an "id":
  "entity":     {"id", "mode": "default" | "strict", "true": [[tag, ...], ...], "pred": [[...], ...]}
                seqeval 1.2.2: precision_score / recall_score / f1_score (average='micro'),
                accuracy_score, precision_recall_fscore_support(average=None) per type;
                mode "strict" is mode='strict', scheme=IOB2. Also the entities
                seqeval finds: get_entities on the sentence list and on each
                sentence (default), Tokens(sentence, IOB2).entities (strict).
  "regression": {"id", "predictions": [x, ...], "labels": [y, ...]}  (null = NaN)
                Hugging Face run_glue's STS-B metrics: scipy 1.11.4 pearsonr and
                spearmanr of (predictions, labels), combined_score = their
                numpy mean, and mse = numpy mean of the squared differences.
  "multilabel": {"id", "true": [[0/1, ...], ...], "pred": [[...], ...]}
                scikit-learn 1.3.2 on the indicator matrices: f1_score with
                average=None / 'micro' / 'macro', accuracy_score.
OUT.json maps each section to {id: result}. A case for which the library
raises gives {"error": "<exception type>: <message>"}; NaN is written as null,
infinity as "inf" / "-inf" (JSON has neither), in the inputs as in the output.
"""
import json
import math
import sys
import warnings

import numpy as np
import scipy.stats
import seqeval.metrics as sm
from seqeval.metrics.sequence_labeling import get_entities
from seqeval.metrics.sequence_labeling import precision_recall_fscore_support as prfs_default
from seqeval.metrics.v1 import precision_recall_fscore_support as prfs_strict
from seqeval.scheme import IOB2, Entities, Tokens
import sklearn.metrics as skm


def num(x):
    x = float(x)
    if math.isnan(x):
        return None
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def value(v):
    return math.nan if v is None else float(v)  # float("inf"), float("-inf")


def entity_case(case):
    y_true, y_pred = case["true"], case["pred"]
    strict = case["mode"] == "strict"
    kw = {"mode": "strict", "scheme": IOB2} if strict else {}
    out = {
        "precision": num(sm.precision_score(y_true, y_pred, **kw)),
        "recall": num(sm.recall_score(y_true, y_pred, **kw)),
        "f1": num(sm.f1_score(y_true, y_pred, **kw)),
    }
    try:
        out["accuracy"] = num(sm.accuracy_score(y_true, y_pred))
    except ZeroDivisionError:
        out["accuracy"] = None  # no tags at all
    if strict:
        ent_true, ent_pred = Entities(y_true, IOB2), Entities(y_pred, IOB2)
        types = sorted(ent_true.unique_tags | ent_pred.unique_tags)
        p, r, f, s = prfs_strict(y_true, y_pred, average=None, scheme=IOB2)
        out["sentence_entities"] = [[[e.tag, e.start, e.end - 1] for e in Tokens(sent, IOB2).entities]
                                    for sent in y_true]
    else:
        types = sorted({t for t, _, _ in get_entities(y_true)} | {t for t, _, _ in get_entities(y_pred)})
        p, r, f, s = prfs_default(y_true, y_pred, average=None)
        out["entities"] = [list(e) for e in get_entities(y_true)] if y_true else []
        out["sentence_entities"] = [[list(e) for e in get_entities(sent)] for sent in y_true]
    out["per_type"] = {t: {"precision": num(p[i]), "recall": num(r[i]), "f1": num(f[i]), "support": int(s[i])}
                       for i, t in enumerate(types)}
    return out


def regression_case(case):
    x = np.array([value(v) for v in case["predictions"]], dtype=np.float64)
    y = np.array([value(v) for v in case["labels"]], dtype=np.float64)
    # run_glue's glue metric for stsb: float(pearsonr(preds, labels)[0]), float(spearmanr(...)[0]);
    # combined_score = np.mean(list(result.values())).item(). Each metric on its own: pearsonr
    # raises on non-finite input where spearmanr gives NaN.
    out = {"mse": num(np.mean((x - y) ** 2))}
    for name, fn in (("pearson", scipy.stats.pearsonr), ("spearmanr", scipy.stats.spearmanr)):
        try:
            out[name] = num(float(fn(x, y)[0]))
        except Exception as e:
            out[name + "_error"] = "{}: {}".format(type(e).__name__, e)
    if "pearson" in out and "spearmanr" in out:
        values = [math.nan if out[k] is None else out[k] for k in ("pearson", "spearmanr")]
        out["combined_score"] = num(np.mean(values).item())
    return out


def multilabel_case(case):
    y_true = np.array(case["true"], dtype=np.int64)
    y_pred = np.array(case["pred"], dtype=np.int64)
    return {
        "f1_per_label": [num(v) for v in skm.f1_score(y_true, y_pred, average=None)],
        "f1_micro": num(skm.f1_score(y_true, y_pred, average="micro")),
        "f1_macro": num(skm.f1_score(y_true, y_pred, average="macro")),
        "accuracy": num(skm.accuracy_score(y_true, y_pred)),
    }


def run(fn, case):
    try:
        return fn(case)
    except Exception as e:  # the C++ side expects a kiln::Error for these
        return {"error": "{}: {}".format(type(e).__name__, e)}


def main():
    warnings.simplefilter("ignore")  # seqeval/scipy/sklearn warn on zero division and constant input
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    out = {}
    for section, fn in (("entity", entity_case), ("regression", regression_case), ("multilabel", multilabel_case)):
        out[section] = {case["id"]: run(fn, case) for case in spec.get(section, [])}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, allow_nan=False)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks bench/scaling_model.py's formulas (python3 -m unittest, or ctest
scaling_model), and that docs/distributed.md holds the tables it prints."""
import contextlib
import io
import math
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import scaling_model as sm  # noqa: E402


def args(*argv):
    return sm.parse_args(list(argv))


class Parameters(unittest.TestCase):
    def test_counts(self):
        # Hugging Face's BertForMaskedLM has the same counts (tied decoder, no pooler).
        self.assertEqual(sum(n for _, n in sm.parameters("bert-base")), 109514298)
        self.assertEqual(sum(n for _, n in sm.parameters("bert-large")), 335174458)

    def test_flops_match_bench_train(self):
        # tools/bench_train.cpp: 6 x encoder params x tokens + 12 L H S tokens + head on 15%.
        enc = 12 * (4 * (768 * 768 + 768) + 2 * 768 + 2 * 768 * 3072 + 3072 + 768 + 2 * 768)
        tokens = 8 * 128
        want = 6.0 * enc * tokens + 12.0 * 12 * 768 * 128 * tokens + 6.0 * (768 * 768 + 768 * 30522) * 0.15 * tokens
        self.assertAlmostEqual(sm.model_flops("bert-base", 128, 8), want, delta=1e-6 * want)

    def test_backward_events_cover_every_parameter(self):
        for m in sm.CONFIGS:
            names = [k for _, ks in sm.backward_events(m, 128, 8) for k in ks]
            self.assertEqual(sorted(names), sorted(k for k, _ in sm.parameters(m)))


class Buckets(unittest.TestCase):
    def test_ddp_rule(self):
        cap = 25 << 20
        for m in sm.CONFIGS:
            b = sm.buckets(m, cap)
            self.assertEqual(sum(x for x, _ in b), 4 * sum(n for _, n in sm.parameters(m)))
            for nbytes, names in b:
                self.assertTrue(nbytes <= cap or len(names) == 1)
            # reverse registration order: the head first, the (tied) word embedding last and alone
            self.assertEqual(b[0][1][0], "cls.predictions.transform.LayerNorm.bias")
            self.assertEqual(b[-1][1], ["bert.embeddings.word_embeddings.weight"])
        self.assertEqual(len(sm.buckets("bert-base", cap)), 16)


class Collectives(unittest.TestCase):
    def test_ring_single_node(self):
        net = sm.Net(args())
        s = 25 << 20
        base, a_nvl, _ = sm.LATENCY_US[("ring", "simple")]
        want = (base + 2 * 7 * a_nvl) * 1e-6 + 2 * 7 / 8 * s / 360e9
        self.assertAlmostEqual(net.ring(s, 8, "simple"), want, places=12)

    def test_reduce_scatter_plus_all_gather_is_an_all_reduce(self):
        net = sm.Net(args("--latency-scale", "0"))
        s = 100 << 20
        for n in (8, 64, 1024):
            self.assertAlmostEqual(2 * net.ring_half(s, n, "simple"), net.ring(s, n, "simple"), places=12)

    def test_tree_latency_is_logarithmic(self):
        net = sm.Net(args("--nvlink-busbw", "1e12", "--ib-bw", "1e12"))
        base, a_nvl, a_net = sm.LATENCY_US[("tree", "ll128")]
        for n, depth in ((16, 1), (64, 3), (1024, 7)):
            want = (base + 2 * (7 * a_nvl + depth * a_net)) * 1e-6
            self.assertAlmostEqual(net.tree(1, n, "ll128"), want, places=9)

    def test_multi_node_busbw_is_the_nics_or_nvlink(self):
        net = sm.Net(args("--nvlink-busbw", "360", "--ib-bw", "30"))
        self.assertEqual(net.busbw(8), 360e9)
        self.assertEqual(net.busbw(16), 8 * 30e9)


class Pipeline(unittest.TestCase):
    def step(self, *argv):
        a = args(*argv)
        return sm.Net(a), sm.Step(a, "bert-base", 128, 64, 25 << 20)

    def test_one_gpu(self):
        net, st = self.step()
        self.assertEqual(st.ddp(net, 1, "nccl")["eff"], 1.0)
        self.assertAlmostEqual(st.fwd + st.bwd, st.compute)
        self.assertAlmostEqual(st.bwd, 2 * st.fwd)

    def test_free_network_costs_nothing(self):
        net, st = self.step("--no-copies", "--latency-scale", "0", "--nvlink-busbw", "1e15", "--ib-bw", "1e15")
        for n in (8, 1024):
            self.assertAlmostEqual(st.ddp(net, n, "nccl")["eff"], 1.0, places=6)

    def test_last_bucket_is_exposed(self):
        # 8 GPUs: the collectives keep up with backward, so what is exposed is
        # the tail: the buckets whose gradients are final only at its very end
        # (the embeddings'), at least the last one's collective
        net, st = self.step("--no-copies")
        r = st.ddp(net, 8, "ring")
        tail = [net.ring(b, 8) for b, _ in st.buckets[-3:]]
        self.assertGreaterEqual(r["exposed"], tail[-1])
        self.assertLessEqual(r["exposed"], sum(tail) + 1e-12)

    def test_measured_step_time_overrides(self):
        net, st = self.step("--step-time", "bert-base:128=0.05")
        self.assertAlmostEqual(st.single(), 0.05)

    def test_jitter_grows_with_ranks(self):
        net, st = self.step("--jitter", "0.01")
        e8, e1024 = st.ddp(net, 8, "nccl"), st.ddp(net, 1024, "nccl")
        net0, st0 = self.step()
        self.assertAlmostEqual(e8["step"] - st0.ddp(net0, 8, "nccl")["step"],
                               0.01 * st.compute * math.sqrt(2 * math.log(8)), places=12)
        self.assertGreater(e1024["step"] - st0.ddp(net0, 1024, "nccl")["step"], e8["step"] - st0.ddp(net0, 8, "nccl")["step"])


class Docs(unittest.TestCase):
    def test_docs_hold_the_default_tables(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sm.main([])
        with open(os.path.join(ROOT, "docs", "distributed.md"), encoding="utf-8") as f:
            doc = f.read()
        missing = [l for l in out.getvalue().splitlines() if l.startswith("| ") and l not in doc]
        self.assertEqual(missing, [], "docs/distributed.md is out of date: rerun python3 bench/scaling_model.py")


if __name__ == "__main__":
    unittest.main()

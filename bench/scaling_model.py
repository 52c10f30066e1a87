#!/usr/bin/env python3
"""Paper model of a kiln data-parallel BERT step on 8-1,024 GPUs.

docs/distributed.md, "Cost at scale", explains the model and its assumptions;
this script prints its tables. Python 3 standard library only.

Nothing here is a measurement: no GPU has run kiln yet. The single-GPU step
comes from the model's FLOP count at an assumed MFU (or from --step-time, once
one is measured), the collectives from bandwidth and latency figures stated
below (each a command-line option).

    python3 bench/scaling_model.py                     # the docs' tables
    python3 bench/scaling_model.py --buckets           # also every bucket
    python3 bench/scaling_model.py --step-time bert-base:128=0.0123
"""

import argparse
import math
import sys

MiB = 1 << 20

# ---- the models ---------------------------------------------------------------

# (layers, hidden, heads, intermediate); vocab 30522, 512 positions, 2 types.
CONFIGS = {
    "bert-base": (12, 768, 12, 3072),
    "bert-large": (24, 1024, 16, 4096),
}
VOCAB, MAX_POS, TYPE_VOCAB = 30522, 512, 2


def parameters(name):
    """kiln's BertForMaskedLM parameters in registration order (Module::named_parameters:
    a module's own parameters, then its children in order; the decoder is tied
    to the word embeddings and not listed again; no pooler). [(name, numel)]"""
    L, H, _, I = CONFIGS[name]
    p = [("bert.embeddings.word_embeddings.weight", VOCAB * H),
         ("bert.embeddings.position_embeddings.weight", MAX_POS * H),
         ("bert.embeddings.token_type_embeddings.weight", TYPE_VOCAB * H),
         ("bert.embeddings.LayerNorm.weight", H), ("bert.embeddings.LayerNorm.bias", H)]
    for l in range(L):
        e = "bert.encoder.layer.%d." % l
        for q in ("query", "key", "value"):
            p += [(e + "attention.self.%s.weight" % q, H * H), (e + "attention.self.%s.bias" % q, H)]
        p += [(e + "attention.output.dense.weight", H * H), (e + "attention.output.dense.bias", H),
              (e + "attention.output.LayerNorm.weight", H), (e + "attention.output.LayerNorm.bias", H),
              (e + "intermediate.dense.weight", I * H), (e + "intermediate.dense.bias", I),
              (e + "output.dense.weight", H * I), (e + "output.dense.bias", H),
              (e + "output.LayerNorm.weight", H), (e + "output.LayerNorm.bias", H)]
    p += [("cls.predictions.bias", VOCAB),
          ("cls.predictions.transform.dense.weight", H * H), ("cls.predictions.transform.dense.bias", H),
          ("cls.predictions.transform.LayerNorm.weight", H), ("cls.predictions.transform.LayerNorm.bias", H)]
    return p


def model_flops(name, seq, batch, mask=0.15):
    """FLOPs of one forward + backward, the count `kiln bench train` prints
    (tools/bench_train.cpp): 6 x encoder parameters x tokens + attention
    12 x layers x hidden x seq per token + the MLM head (transform and tied
    decoder) 6 x (H^2 + H V) on the masked tokens only (kiln computes logits
    for the labelled rows alone)."""
    L, H, _, _ = CONFIGS[name]
    tokens = seq * batch
    enc = sum(n for k, n in parameters(name) if k.startswith("bert.encoder."))
    return 6.0 * enc * tokens + 12.0 * L * H * seq * tokens + 6.0 * (H * H + H * VOCAB) * mask * tokens


def backward_events(name, seq, batch, mask=0.15):
    """Backward as a list of (flops, [parameters whose gradient is final after it]),
    in the order backward runs (reverse of forward). Matmul backward = 2 x its
    forward (input and weight gradients); LayerNorm, biases and embeddings ~0.
    The tied word embedding gets its last contribution from the embedding
    lookup, so it is ready only at the very end."""
    L, H, _, I = CONFIGS[name]
    T = seq * batch
    M = mask * T
    ev = [(4.0 * H * VOCAB * M, ["cls.predictions.bias"]),
          (0.0, ["cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"]),
          (4.0 * H * H * M, ["cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias"])]
    for l in reversed(range(L)):
        e = "bert.encoder.layer.%d." % l
        ev += [(0.0, [e + "output.LayerNorm.weight", e + "output.LayerNorm.bias"]),
               (4.0 * I * H * T, [e + "output.dense.weight", e + "output.dense.bias"]),
               (4.0 * H * I * T, [e + "intermediate.dense.weight", e + "intermediate.dense.bias"]),
               (0.0, [e + "attention.output.LayerNorm.weight", e + "attention.output.LayerNorm.bias"]),
               (4.0 * H * H * T, [e + "attention.output.dense.weight", e + "attention.output.dense.bias"]),
               (8.0 * seq * H * T, [])]  # scores and weighted sum, no parameters
        for q in ("value", "key", "query"):
            ev.append((4.0 * H * H * T, [e + "attention.self.%s.weight" % q, e + "attention.self.%s.bias" % q]))
    ev.append((0.0, ["bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                     "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                     "bert.embeddings.word_embeddings.weight"]))
    return ev


def buckets(name, cap_bytes, elem=4):
    """dist/ddp.cpp build_buckets(): parameters in reverse registration order,
    a new bucket when the next one would pass the cap (a parameter larger than
    the cap gets a bucket of its own). fp32 gradients: 4 bytes each.
    [(bytes, [names])] in launch order."""
    out = []
    size = 0
    for pname, n in reversed(parameters(name)):
        b = n * elem
        if not out or size + b > cap_bytes:
            out.append([0, []])
            size = 0
        out[-1][0] += b
        out[-1][1].append(pname)
        size += b
    return [(b, names) for b, names in out]


# ---- the network ----------------------------------------------------------------


# Latencies in microseconds from NCCL's own cost model (src/graph/tuning.cc,
# baseLat and hwLat; read at NVIDIA/nccl commit b6475625): per collective, per
# ring step / tree hop over NVLink, and across the network. Not measured here.
LATENCY_US = {  # (algorithm, protocol): (base, NVLink step, network step)
    ("ring", "simple"): (8.4, 3.4, 14.0),
    ("ring", "ll128"): (14.0, 1.9, 4.0),
    ("tree", "simple"): (0.0, 28.0, 28.0),
    ("tree", "ll128"): (14.0, 1.25, 8.5),
}
PROTOCOLS = ("simple", "ll128")
# tuning.cc treeCorrectionFactor: the tree's bandwidth times this, by
# floor(log2(bytes / 64)) (64 B ... 256 MB; 1.0 beyond).
TREE_CORRECTION = {
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
RING_PLATEAU = 1.4  # tuning.cc: multi-node Simple ring latency x 1.4 (compute capability >= 8.0)


def tree_correction(proto, nbytes):
    i = int(math.floor(math.log2(max(nbytes, 64) / 64.0)))
    t = TREE_CORRECTION[proto]
    return t[i] if i < len(t) else 1.0


def bw_factor(algo, proto, multi_node):
    """The fraction of busbw NCCL's model gives each algorithm/protocol
    (tuning.cc: tree x 0.92; LL128 x 0.92 on a ring, x 120/128 (multi-node) or
    7/9 (one node) on a tree)."""
    f = 0.92 if algo == "tree" else 1.0
    if proto == "ll128":
        f *= 0.92 if algo == "ring" else (120.0 / 128.0 if multi_node else 7.0 / 9.0)
    return f


class Net:
    """Bandwidths in bytes/s, latencies in seconds; every all-reduce cost is
    the best protocol's (NCCL's tuner picks per call)."""

    def __init__(self, a):
        self.g = a.gpus_per_node
        self.b_nvl = a.nvlink_busbw * 1e9
        self.b_ib = a.ib_bw * 1e9
        self.lat = dict((k, tuple(x * 1e-6 * a.latency_scale for x in v)) for k, v in LATENCY_US.items())

    def layout(self, n):
        g = min(n, self.g)
        return g, (n + g - 1) // g

    def busbw(self, n):
        g, m = self.layout(n)
        # one ring per NIC (NCCL channels): each ring leaves every node once,
        # so a node's g NICs together carry what one GPU's NVLink carries.
        return self.b_nvl if m == 1 else min(self.b_nvl, g * self.b_ib)

    # all-reduce of s bytes over n GPUs -------------------------------------
    def ring(self, s, n, proto=None):
        """2(n-1) steps, 2 x nodes of them across the network (NCCL's count);
        bandwidth term 2(n-1)/n s / busbw."""
        if n == 1:
            return 0.0
        if proto is None:
            return min(self.ring(s, n, p) for p in PROTOCOLS)
        g, m = self.layout(n)
        base, a_nvl, a_net = self.lat[("ring", proto)]
        steps, inter = 2 * (n - 1), (2 * m if m > 1 else 0)
        lat = base + (steps - inter) * a_nvl + inter * a_net
        if m > 1 and proto == "simple":
            lat *= RING_PLATEAU
        return lat + 2.0 * (n - 1) / n * s / (bw_factor("ring", proto, m > 1) * self.busbw(n))

    def tree(self, s, n, proto=None):
        """NCCL's double binary tree: a chain inside each node, two binary
        trees across the nodes (depth log2 of the node count), reduce up and
        broadcast down: 2((g-1) NVLink hops + log2(nodes) network hops);
        bandwidth term 2 s / busbw (NCCL: algbw = busbw / 2)."""
        if n == 1:
            return 0.0
        if proto is None:
            return min(self.tree(s, n, p) for p in PROTOCOLS)
        g, m = self.layout(n)
        base, a_nvl, a_net = self.lat[("tree", proto)]
        lat = base + 2 * ((g - 1) * a_nvl + math.ceil(math.log2(m)) * a_net)
        bw = bw_factor("tree", proto, m > 1) * tree_correction(proto, s) * self.busbw(n)
        return lat + 2.0 * s / bw

    def _inter(self, s, m, proto):
        """All-reduce of s bytes per GPU across m nodes, one GPU per node on its
        own NIC: the faster of ring and double binary tree."""
        rb, _, ra = self.lat[("ring", proto)]
        tb, _, ta = self.lat[("tree", proto)]
        ring = (rb + 2 * (m - 1) * ra) * (RING_PLATEAU if proto == "simple" else 1.0) + \
            2.0 * (m - 1) / m * s / (bw_factor("ring", proto, True) * self.b_ib)
        tree = tb + 2 * math.ceil(math.log2(m)) * ta + \
            2.0 * s / (bw_factor("tree", proto, True) * tree_correction(proto, s) * self.b_ib)
        return min(ring, tree)

    def hier(self, s, n):
        """Two levels: reduce-scatter over NVLink inside the node, all-reduce of
        each GPU's 1/g shard across nodes over its own NIC, all-gather over NVLink."""
        g, m = self.layout(n)
        if m == 1:
            return self.ring(s, n)
        intra = 2 * self.half_intra(s, g)
        return intra + min(self._inter(s / g, m, p) for p in PROTOCOLS)

    # reduce-scatter / all-gather (ZeRO): ring only in NCCL's model (no tree)
    def half_intra(self, s, g, proto=None):
        if proto is None:
            return min(self.half_intra(s, g, p) for p in PROTOCOLS)
        base, a_nvl, _ = self.lat[("ring", proto)]
        return base + (g - 1) * a_nvl + (g - 1) / g * s / (bw_factor("ring", proto, False) * self.b_nvl)

    def ring_half(self, s, n, proto=None):
        """Reduce-scatter or all-gather on the ring: (n-1) steps, nodes-1 of
        them across the network; (n-1)/n s / busbw: half an all-reduce."""
        if n == 1:
            return 0.0
        if proto is None:
            return min(self.ring_half(s, n, p) for p in PROTOCOLS)
        g, m = self.layout(n)
        base, a_nvl, a_net = self.lat[("ring", proto)]
        steps, inter = n - 1, (m - 1 if m > 1 else 0)
        lat = base + (steps - inter) * a_nvl + inter * a_net
        return lat + (n - 1) / n * s / (bw_factor("ring", proto, m > 1) * self.busbw(n))

    def hier_half(self, s, n):
        """NVLink reduce-scatter inside the node, then a ring reduce-scatter of
        the 1/g shard across nodes (all-gather: the same in reverse)."""
        g, m = self.layout(n)
        if m == 1:
            return self.ring_half(s, n)
        best = float("inf")
        for p in PROTOCOLS:
            base, _, a_net = self.lat[("ring", p)]
            inter = base + (m - 1) * a_net + (m - 1) / m * (s / g) / (bw_factor("ring", p, True) * self.b_ib)
            best = min(best, inter)
        return self.half_intra(s, g) + best

    def half(self, s, n):
        return min(self.ring_half(s, n), self.hier_half(s, n))

    def allreduce(self, algo, s, n):
        if algo == "nccl":  # NCCL's tuner picks the faster of ring and tree per call
            return min(self.ring(s, n), self.tree(s, n))
        return getattr(self, algo)(s, n)


# ---- one step ---------------------------------------------------------------------


class Step:
    """One training step of one model shape: times in seconds."""

    def __init__(self, a, name, seq, batch, cap_bytes):
        self.name, self.seq, self.batch = name, seq, batch
        self.params = sum(n for _, n in parameters(name))
        self.flops = model_flops(name, seq, batch)
        self.hbm = a.hbm_bw * 1e9
        self.opt = a.optimizer_bytes * self.params / self.hbm  # fused AdamW: one pass
        measured = a.step_times.get((name, seq))
        if measured is not None:  # a measured single-GPU step (forward, backward, optimizer)
            self.compute = max(measured - self.opt, 1e-9)
        else:
            self.compute = self.flops / (a.mfu * a.peak_tflops * 1e12)
        self.accum = a.accum
        self.fwd = self.compute / 3.0  # backward = 2 x forward (matmuls)
        self.bwd = self.compute - self.fwd
        self.copies = a.copies
        self.tax = a.overlap_tax
        self.jitter = a.jitter
        self.buckets = buckets(name, cap_bytes)
        self.grad_bytes = 4 * self.params
        # when each parameter's gradient is final, as a fraction of backward
        ev = backward_events(name, seq, batch)
        total = sum(f for f, _ in ev)
        done, ready = 0.0, {}
        for f, names in ev:
            done += f
            for k in names:
                ready[k] = done / total
        self.ready_frac = [max(ready[k] for k in names) for _, names in self.buckets]

    def single(self):
        """One GPU: no collectives, no bucket copies (DDP returns early at world size 1)."""
        return self.accum * self.compute + self.opt

    def copy(self, nbytes):
        return 2.0 * nbytes / self.hbm  # read + write

    def ddp(self, net, n, algo, comm=None, shard_opt=None, one_gather=False):
        """The pipeline of Note [Gradient buckets] on a GPU: bucket i's gradients are
        copied into its flat buffer on the compute stream when its last gradient
        is final; its collective starts when that copy is done and the one
        before it has finished (one communication stream, index order); after
        backward, finish_gradient_sync waits for each bucket in order and copies
        it back on the compute stream; then the optimizer step. With shard_opt
        (ZeRO: comm is then a reduce-scatter, shard_opt the all-gather's cost)
        only the rank's 1/n shard is copied back and updated, and the updated
        parameters are all-gathered after the step, per bucket or (one_gather)
        in a single call over all of them. Returns a dict."""
        if n == 1:
            t = self.single()
            return dict(step=t, comm=0.0, exposed=0.0, eff=1.0)
        comm = comm or (lambda s: net.allreduce(algo, s, n))
        t0 = (self.accum - 1) * self.compute + self.fwd  # earlier micro-steps under no_sync, forward
        cursor = t0  # the compute stream
        stream = t0  # the communication stream
        costs = [comm(nbytes) for nbytes, _ in self.buckets]
        total_comm = sum(costs)
        # --overlap-tax: backward slowed while collectives share the SMs and HBM
        bwd = self.bwd + self.tax * min(total_comm, self.bwd)
        ends = []
        done_frac = 0.0
        for (nbytes, _), frac, c in zip(self.buckets, self.ready_frac, costs):
            cursor += (frac - done_frac) * bwd  # backward up to this bucket's last gradient
            done_frac = frac
            if self.copies:
                cursor += self.copy(nbytes)  # copy into the flat buffer
            stream = max(stream, cursor) + c
            ends.append(stream)
        cursor += (1.0 - done_frac) * bwd
        bwd_end = cursor
        for (nbytes, _), end in zip(self.buckets, ends):  # finish_gradient_sync
            cursor = max(cursor, end)
            if self.copies:
                cursor += self.copy(nbytes / n if shard_opt else nbytes)
        exposed = cursor - bwd_end
        opt = self.opt / n if shard_opt else self.opt
        step = cursor + opt
        ag = 0.0
        if shard_opt:  # ZeRO: all-gather the updated parameters, bucket by bucket
            for nbytes in ([self.grad_bytes] if one_gather else [b for b, _ in self.buckets]):
                ag += shard_opt(nbytes)
                if self.copies:
                    ag += self.copy(nbytes)
            step += ag
        # --jitter: every rank waits for the slowest; the expected maximum of n
        # normal step times is about sigma * sqrt(2 ln n) above the mean.
        step += self.jitter * self.accum * self.compute * math.sqrt(2.0 * math.log(n))
        single = self.single()
        return dict(step=step, comm=total_comm, exposed=exposed, allgather=ag, eff=single / step)


# ---- output -----------------------------------------------------------------------


def ms(t):
    return "%.2f" % (t * 1e3)


def pct(x):
    return "%.0f%%" % (100 * x)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert-base,bert-large")
    p.add_argument("--seqs", default="128,512")
    p.add_argument("--micro-batch", default="128:64,512:16",
                   help="per-GPU micro-batch per sequence length, SEQ:BATCH,... (default 128:64,512:16)")
    p.add_argument("--gpus", default="8,16,64,256,1024")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--bucket-mib", type=float, default=25.0, help="DDPOptions::bucket_cap_bytes in MiB (25)")
    p.add_argument("--mfu", type=float, default=0.40, help="model FLOPs / peak on one GPU (0.40)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM bf16 dense peak (989)")
    p.add_argument("--step-time", action="append", default=[],
                   help="measured single-GPU step (s) replacing the MFU estimate: MODEL:SEQ=SECONDS; repeatable")
    p.add_argument("--accum", type=int, default=1, help="micro-steps per synced step (no_sync before the last)")
    p.add_argument("--hbm-bw", type=float, default=2600.0, help="achieved HBM GB/s for copies and AdamW (2600)")
    p.add_argument("--optimizer-bytes", type=float, default=28.0,
                   help="HBM bytes per parameter of the fused AdamW (read p,g,m,v; write p,m,v: 28)")
    p.add_argument("--no-copies", dest="copies", action="store_false",
                   help="gradients as views of the bucket buffers (no copy in/out)")
    p.add_argument("--nvlink-busbw", type=float, default=360.0, help="NVLink all-reduce busbw GB/s (360)")
    p.add_argument("--ib-bw", type=float, default=45.0, help="InfiniBand GB/s per GPU, one NDR NIC each (45)")
    p.add_argument("--latency-scale", type=float, default=1.0,
                   help="multiplies every latency of NCCL's model (LATENCY_US) (1.0)")
    p.add_argument("--overlap-tax", type=float, default=0.0,
                   help="backward slowdown per unit of overlapped communication (0: free overlap)")
    p.add_argument("--jitter", type=float, default=0.0,
                   help="per-rank standard deviation of the compute time, as a fraction (0: no stragglers)")
    p.add_argument("--buckets", action="store_true", help="also list every bucket")
    p.add_argument("--section", default="all", choices=["all", "main", "buckets", "sweep", "zero"])
    a = p.parse_args(argv)
    a.models = a.models.split(",")
    for m in a.models:
        if m not in CONFIGS:
            p.error("unknown model %s (have %s)" % (m, ", ".join(CONFIGS)))
    a.seqs = [int(s) for s in a.seqs.split(",")]
    a.mb = dict((int(k), int(v)) for k, v in (x.split(":") for x in a.micro_batch.split(",")))
    for s in a.seqs:
        if s not in a.mb:
            p.error("--micro-batch has no batch for seq %d" % s)
    a.gpus = [int(g) for g in a.gpus.split(",")]
    a.step_times = {}
    for x in a.step_time:
        key, val = x.split("=")
        model, seq = key.split(":")
        a.step_times[(model, int(seq))] = float(val)
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    net = Net(a)
    cap = int(a.bucket_mib * MiB)
    print("# kiln data-parallel step on paper (bench/scaling_model.py; not measured)")
    print()
    print("MFU %.0f%% of %.0f TFLOP/s, NVLink busbw %.0f GB/s, IB %.0f GB/s per GPU, %d GPUs per node, "
          "buckets %.0f MiB, AdamW %.0f B/param at %.0f GB/s, bucket copies %s, accumulation %d, "
          "latency x %.2f, overlap tax %.2f, jitter %.3f"
          % (100 * a.mfu, a.peak_tflops, a.nvlink_busbw, a.ib_bw, a.gpus_per_node, a.bucket_mib,
             a.optimizer_bytes, a.hbm_bw, "on" if a.copies else "off", a.accum, a.latency_scale,
             a.overlap_tax, a.jitter))
    print()

    if a.section in ("all", "main"):
        rows = []
        for m in a.models:
            for s in a.seqs:
                st = Step(a, m, s, a.mb[s], cap)
                for n in a.gpus:
                    r = {k: st.ddp(net, n, k) for k in ("ring", "tree", "nccl", "hier")}
                    best = r["nccl"]
                    rows.append([m, s, st.batch, n, net.layout(n)[1], ms(st.accum * st.compute), ms(st.opt),
                                 ms(st.single()), len(st.buckets),
                                 "%s / %s / %s" % (ms(r["ring"]["comm"]), ms(r["tree"]["comm"]), ms(r["hier"]["comm"])),
                                 ms(best["exposed"]), ms(best["step"]),
                                 pct(r["ring"]["eff"]), pct(r["tree"]["eff"]), "**%s**" % pct(best["eff"]),
                                 pct(r["hier"]["eff"])])
        print("## Weak scaling, DDP all-reduce (per-GPU batch fixed)")
        print()
        print(table(["model", "seq", "micro-batch", "GPUs", "nodes", "fwd+bwd ms", "AdamW ms", "1-GPU step ms",
                     "buckets", "all-reduce ms/step ring / tree / hier", "exposed ms (NCCL)", "step ms (NCCL)",
                     "eff ring", "eff tree", "eff NCCL", "eff hier"], rows))
        print()

    if a.section in ("all", "buckets") or a.buckets:
        for m in a.models:
            st = Step(a, m, a.seqs[0], a.mb[a.seqs[0]], cap)
            print("## Buckets: %s (%d parameters, %.1f MB of fp32 gradients, %.0f MiB cap)"
                  % (m, st.params, st.grad_bytes / 1e6, a.bucket_mib))
            print()
            rows = []
            for i, ((b, names), f) in enumerate(zip(st.buckets, st.ready_frac)):
                rows.append([i, "%.2f" % (b / 1e6), len(names), names[0], names[-1], pct(f),
                             "%.0f" % (net.ring(b, 8) * 1e6), "%.0f" % (net.allreduce("nccl", b, 1024) * 1e6)])
            if not a.buckets and len(rows) > 12:
                rows = rows[:5] + [["...", "", "", "", "", "", "", ""]] + rows[-4:]
            print(table(["#", "MB", "params", "first (launch order)", "last", "ready at (of backward)",
                         "ring 8 GPUs us", "NCCL 1024 GPUs us"], rows))
            print()

    if a.section in ("all", "sweep"):
        rows = []
        for m in a.models:
            s = a.seqs[0]
            for mib in (5, 25, 100, 400):
                for mfu in (0.4, 0.6):
                    b = argparse.Namespace(**vars(a))
                    b.mfu = mfu
                    st = Step(b, m, s, a.mb[s], int(mib * MiB))
                    row = [m, s, mib, len(st.buckets), pct(mfu)]
                    for n in (8, 64, 1024):
                        row.append(pct(st.ddp(net, n, "nccl")["eff"]))
                    b.copies = False
                    st2 = Step(b, m, s, a.mb[s], int(mib * MiB))
                    for n in (8, 64, 1024):
                        row.append(pct(st2.ddp(net, n, "nccl")["eff"]))
                    rows.append(row)
        print("## Sensitivity: bucket cap and MFU (NCCL ring/tree choice)")
        print()
        print(table(["model", "seq", "cap MiB", "buckets", "MFU", "8", "64", "1024",
                     "8, no copies", "64, no copies", "1024, no copies"], rows))
        print()

    if a.section in ("all", "zero"):
        rows = []
        for m in a.models:
            P = sum(n for _, n in parameters(m))
            for n in [1] + a.gpus:
                ddp = 16.0 * P
                z1 = (4 + 4 + 8.0 / n) * P
                z2 = (4 + 4.0 / n + 8.0 / n) * P
                rows.append([m, n, "%.2f" % (ddp / 1e9), "%.2f" % (z1 / 1e9), "%.2f" % (z2 / 1e9)])
        print("## ZeRO-1/2: parameters + gradients + AdamW state per rank, GB (fp32; activations not included)")
        print()
        print(table(["model", "GPUs", "DDP 4+4+8 B", "ZeRO-1 4+4+8/N B", "ZeRO-2 4+4/N+8/N B"], rows))
        print()
        rows = []
        for m in a.models:
            s = a.seqs[0]
            st = Step(a, m, s, a.mb[s], cap)
            for n in a.gpus:
                d = st.ddp(net, n, "nccl")
                half = lambda b, n=n: net.half(b, n)
                z = st.ddp(net, n, "nccl", comm=half, shard_opt=half)
                z1 = st.ddp(net, n, "nccl", comm=half, shard_opt=half, one_gather=True)
                rows.append([m, s, n, ms(d["step"]), pct(d["eff"]), ms(z["comm"]), ms(st.opt / n),
                             ms(z["allgather"]), ms(z["step"]), pct(z["eff"]), ms(z1["allgather"]), pct(z1["eff"])])
        print("## ZeRO-1/2 step: reduce-scatter per bucket in backward, AdamW on 1/N, all-gather after")
        print()
        print(table(["model", "seq", "GPUs", "DDP step ms", "DDP eff", "reduce-scatter ms/step",
                     "AdamW ms", "all-gather ms (exposed)", "ZeRO step ms", "ZeRO eff",
                     "one all-gather ms", "ZeRO eff, one all-gather"], rows))
        print()


if __name__ == "__main__":
    main()

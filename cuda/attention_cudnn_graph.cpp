// The cuDNN backend-API graphs of scaled-dot-product attention (Note [cuDNN
// attention], cuda/attention_cudnn.cpp): a graph builder over the backend
// descriptors (tensors, pointwise, matmul, reduction, RNG and reshape
// operations), the execution plan it finalizes (make_plan), and the forward
// and backward graphs of a problem with their ragged offsets and padding mask
// (build_forward, build_backward; declared in cuda/attention_cudnn_graph.h).
// The plan cache, the per-call arguments and execution are in
// cuda/attention_cudnn.cpp.
#include "cuda/attention_cudnn_graph.h"

#include <memory>
#include <utility>
#include <vector>

namespace kiln::cuda::sdpa::internal {
namespace {

Dims packed_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// A matmul's GEMM size overrides: M, N, K stop at these per-batch lengths.
struct Overrides {
  DescPtr m, n, k;
};

// Builds one operation graph: tensors and operations in creation order.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnDataType_t io) : io_(io) {}

  // A tensor the variant pack names (uid) or a virtual one (uid from 1000 on);
  // `ragged`: its batch starts come from that offset tensor.
  DescPtr tensor(const Dims& dims, const Dims& strides, cudnnDataType_t dtype, int64_t uid, bool is_virtual,
                 bool by_value = false, const DescPtr& ragged = nullptr) {
    auto t = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t->set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype);
    t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
    t->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    if (ragged) t->set(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, *ragged);
    t->finalize();
    keep_.push_back(t);
    return t;
  }
  DescPtr virt(const Dims& dims, cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
    return tensor(dims, packed_strides(dims), dtype, next_virtual_++, true);
  }
  DescPtr virt(const Dims& dims, const Dims& strides, cudnnDataType_t dtype = CUDNN_DATA_FLOAT,
               const DescPtr& ragged = nullptr) {
    return tensor(dims, strides, dtype, next_virtual_++, true, false, ragged);
  }
  DescPtr scalar(int64_t uid, cudnnDataType_t dtype = CUDNN_DATA_FLOAT, bool by_value = true) {
    return tensor({1, 1, 1, 1}, {1, 1, 1, 1}, dtype, uid, false, by_value);
  }

  // y = mode(x[, b[, t]]) computed in `prec`; axis for GEN_INDEX.
  void pointwise_op(cudnnPointwiseMode_t mode, const DescPtr& y, const DescPtr& x, const DescPtr& b,
                    const DescPtr& t, cudnnDataType_t prec, int64_t axis = -1) {
    auto pw = std::make_shared<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw->set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x);
    if (b) op->set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op->set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y);
    op->finalize();
    add(pw, op);
  }
  // y = mode(x[, b[, t]]), computed in float32.
  void pointwise(cudnnPointwiseMode_t mode, const DescPtr& y, const DescPtr& x, const DescPtr& b = nullptr,
                 const DescPtr& t = nullptr) {
    pointwise_op(mode, y, x, b, t, CUDNN_DATA_FLOAT);
  }
  DescPtr pointwise(cudnnPointwiseMode_t mode, const Dims& dims, const DescPtr& x, const DescPtr& b = nullptr) {
    DescPtr y = virt(dims);
    pointwise(mode, y, x, b);
    return y;
  }

  // c = a @ b over the last two dims, batched over the first two; float32 accumulation.
  void matmul(const DescPtr& c, const DescPtr& a, const DescPtr& b, const Overrides& o = {}) {
    auto mm = std::make_shared<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm->set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    mm->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
    if (o.m) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *o.m);
    if (o.n) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *o.n);
    if (o.k) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *o.k);
    op->finalize();
    add(mm, op);
  }

  // y (.., 1) = reduce(x) over the last dim.
  DescPtr reduce(cudnnReduceTensorOp_t mode, const Dims& dims, const DescPtr& x, const DescPtr& given_y = nullptr) {
    DescPtr y = given_y ? given_y : virt({dims[0], dims[1], dims[2], 1});
    auto red = std::make_shared<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    red->set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    red->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *red);
    op->finalize();
    add(red, op);
    return y;
  }

  // The dropout keep mask: bernoulli(keep_prob) of shape dims from Philox (seed, offset).
  DescPtr rng(const Dims& dims, const DescPtr& seed, const DescPtr& offset, double keep_prob) {
    DescPtr y = virt(dims);
    auto dist = std::make_shared<Desc>(CUDNN_BACKEND_RNG_DESCRIPTOR);
    cudnnRngDistribution_t bernoulli = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    dist->set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &bernoulli);
    dist->set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &keep_prob);
    dist->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_RNG_YDESC, *y);
    op->set(CUDNN_ATTR_OPERATION_RNG_SEED, *seed);
    op->set(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, *offset);
    op->set(CUDNN_ATTR_OPERATION_RNG_DESC, *dist);
    op->finalize();
    add(dist, op);
    return y;
  }

  // y = x viewed with other dims/strides (a transpose the matmul reads in place).
  void reshape(const DescPtr& y, const DescPtr& x) {
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x);
    op->set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y);
    op->finalize();
    add(nullptr, op);
  }

  cudnnDataType_t io() const { return io_; }
  const std::vector<DescPtr>& ops() const { return ops_; }
  std::vector<DescPtr>& kept() { return keep_; }

 private:
  void add(const DescPtr& helper, const DescPtr& op) {
    if (helper) keep_.push_back(helper);
    keep_.push_back(op);
    ops_.push_back(op);
  }

  cudnnDataType_t io_;
  int64_t next_virtual_ = 1000;
  std::vector<DescPtr> ops_;
  std::vector<DescPtr> keep_;
};

// ---- plans ----------------------------------------------------------------------

// Finalizes the graph and the first engine configuration heuristics mode A
// (then the fallback list) offers that builds. nullptr: no engine supports it.
// The caller holds the handle's lock (Note [cuDNN handle lock], cuda/attention_cudnn.cpp).
std::unique_ptr<Plan> make_plan(cudnnHandle_t handle, GraphBuilder& g) {
  auto plan = std::make_unique<Plan>();
  auto graph = std::make_shared<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  for (const DescPtr& op : g.ops()) raw_ops.push_back(op->get());
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw_ops.size()),
             raw_ops.data());
  // A graph no engine can take may already be refused here.
  if (cudnnBackendFinalize(graph->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  // (Refusals below are answers, not errors: the caller falls back.)
  plan->descs = std::move(g.kept());
  plan->descs.push_back(graph);

  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    auto heur = std::make_shared<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur->set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph);
    heur->set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnBackendFinalize(heur->get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t count = 0;
    KILN_CUDNN_CHECK(
        cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr));
    if (count <= 0) continue;
    std::vector<DescPtr> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw_cfgs;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.push_back(std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw_cfgs.push_back(cfgs.back()->get());
    }
    int64_t got = 0;
    KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw_cfgs.data()));
    for (int64_t i = 0; i < got; ++i) {
      auto p = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[static_cast<size_t>(i)]);
      if (cudnnBackendFinalize(p->get()) != CUDNN_STATUS_SUCCESS) continue;  // this engine refuses: try the next
      int64_t ws = 0, n = 0;
      KILN_CUDNN_CHECK(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                1, &n, &ws));
      plan->descs.push_back(heur);
      plan->descs.insert(plan->descs.end(), cfgs.begin(), cfgs.end());
      plan->plan = p;
      plan->workspace = ws;
      return plan;
    }
  }
  return nullptr;
}

// The ragged offset tensors of q, k, v and o (dq, dk, dv and dO share them); all null unless ragged.
struct Ragged {
  DescPtr q, k, v, o;
};

Ragged ragged_tensors(GraphBuilder& g, const Problem& pr) {
  if (!pr.ragged) return {};
  const cudnnDataType_t t = pr.offset_bytes == 8 ? CUDNN_DATA_INT64 : CUDNN_DATA_INT32;
  auto offsets = [&](int64_t uid) { return g.tensor({pr.B + 1, 1, 1, 1}, {1, 1, 1, 1}, t, uid, false); };
  return {offsets(kRaggedQ), offsets(kRaggedK), offsets(kRaggedV), offsets(kRaggedO)};
}

// The masks' inputs: per-batch lengths (B, 1, 1, 1) int32 (null without a
// padding mask) and the float lowest (null without a padding or causal mask).
struct Padding {
  DescPtr seq_q, seq_kv, lowest;
  explicit operator bool() const { return seq_q != nullptr; }
};

Padding padding_tensors(GraphBuilder& g, const Problem& pr, bool padded) {
  Padding p;
  if (padded) {
    p.seq_q = g.tensor({pr.B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, kSeqQ, false);
    p.seq_kv = g.tensor({pr.B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, kSeqKV, false);
  }
  if (padded || pr.causal != CausalMask::None) p.lowest = g.scalar(kLowest);
  return p;
}

// The padding mask on scores s (S dims): row < seq_len_q and column < seq_len_kv keep their score, the rest
// becomes the float lowest.
DescPtr padding_select(GraphBuilder& g, const Dims& S, const DescPtr& s, const Padding& pad) {
  DescPtr row = g.virt(S, CUDNN_DATA_INT32), col = g.virt(S, CUDNN_DATA_INT32);
  g.pointwise_op(CUDNN_POINTWISE_GEN_INDEX, row, s, nullptr, nullptr, CUDNN_DATA_INT32, 2);
  g.pointwise_op(CUDNN_POINTWISE_GEN_INDEX, col, s, nullptr, nullptr, CUDNN_DATA_INT32, 3);
  DescPtr row_in = g.virt(S, CUDNN_DATA_BOOLEAN), col_in = g.virt(S, CUDNN_DATA_BOOLEAN);
  g.pointwise_op(CUDNN_POINTWISE_CMP_LT, row_in, row, pad.seq_q, nullptr, CUDNN_DATA_BOOLEAN);
  g.pointwise_op(CUDNN_POINTWISE_CMP_LT, col_in, col, pad.seq_kv, nullptr, CUDNN_DATA_BOOLEAN);
  DescPtr keep = g.virt(S, CUDNN_DATA_BOOLEAN);
  g.pointwise_op(CUDNN_POINTWISE_LOGICAL_AND, keep, row_in, col_in, nullptr, CUDNN_DATA_BOOLEAN);
  DescPtr y = g.virt(S);
  g.pointwise_op(CUDNN_POINTWISE_BINARY_SELECT, y, s, pad.lowest, keep, CUDNN_DATA_FLOAT);  // keep ? s : lowest
  return y;
}

// The causal mask on scores s (Note [cuDNN causal masks]): row [+ seq_len_kv - seq_len_q] >= column keeps its
// score, the rest becomes the float lowest.
DescPtr causal_select(GraphBuilder& g, const Dims& S, const DescPtr& s, const Padding& pad, CausalMask causal) {
  DescPtr row = g.virt(S, CUDNN_DATA_INT32), col = g.virt(S, CUDNN_DATA_INT32);
  g.pointwise_op(CUDNN_POINTWISE_GEN_INDEX, row, s, nullptr, nullptr, CUDNN_DATA_INT32, 2);
  g.pointwise_op(CUDNN_POINTWISE_GEN_INDEX, col, s, nullptr, nullptr, CUDNN_DATA_INT32, 3);
  if (causal == CausalMask::BottomRight) {  // the diagonal through (seq_len_q - 1, seq_len_kv - 1)
    DescPtr shifted = g.virt(S, CUDNN_DATA_INT32), aligned = g.virt(S, CUDNN_DATA_INT32);
    g.pointwise_op(CUDNN_POINTWISE_ADD, shifted, row, pad.seq_kv, nullptr, CUDNN_DATA_INT32, 3);
    g.pointwise_op(CUDNN_POINTWISE_SUB, aligned, shifted, pad.seq_q, nullptr, CUDNN_DATA_INT32, 3);
    row = aligned;
  }
  DescPtr keep = g.virt(S, CUDNN_DATA_BOOLEAN);
  g.pointwise_op(CUDNN_POINTWISE_CMP_GE, keep, row, col, nullptr, CUDNN_DATA_BOOLEAN);
  DescPtr y = g.virt(S);
  g.pointwise_op(CUDNN_POINTWISE_BINARY_SELECT, y, s, pad.lowest, keep, CUDNN_DATA_FLOAT);  // keep ? s : lowest
  return y;
}

// The scores' masks, in the frontend's order: padding, then causal.
DescPtr masked(GraphBuilder& g, const Problem& pr, const Dims& S, DescPtr s, const Padding& pad) {
  if (pad) s = padding_select(g, S, s, pad);
  if (pr.causal != CausalMask::None) s = causal_select(g, S, s, pad, pr.causal);
  return s;
}

}  // namespace

std::unique_ptr<Plan> build_forward(cudnnHandle_t h, const Problem& pr) {
  GraphBuilder g(pr.io);
  const Dims S = pr.scores();
  const Ragged rg = ragged_tensors(g, pr);
  const Padding pad = padding_tensors(g, pr, pr.fwd_padding);
  DescPtr q = g.tensor(pr.q_dims(), pr.bhsd(pr.q_b, pr.q_t), g.io(), kQ, false, false, rg.q);
  DescPtr kt = g.tensor(pr.kv_t_dims(), pr.bhds(pr.k_b, pr.k_t), g.io(), kK, false, false, rg.k);
  DescPtr v = g.tensor(pr.kv_dims(), pr.bhsd(pr.v_b, pr.v_t), g.io(), kV, false, false, rg.v);
  DescPtr o = g.tensor(pr.q_dims(), pr.out_strides(), g.io(), kO, false, false, rg.o);
  DescPtr stats = g.tensor(pr.stats_dims(), packed_strides(pr.stats_dims()), CUDNN_DATA_FLOAT, kStats, false);
  DescPtr scale = g.scalar(kScale);

  DescPtr s = g.virt(S);
  g.matmul(s, q, kt, {pad.seq_q, pad.seq_kv, nullptr});         // Q @ K^T
  s = g.pointwise(CUDNN_POINTWISE_MUL, S, s, scale);             // * scale
  if (pr.mask) {
    DescPtr bias = g.tensor(pr.bias_dims(), pr.bias_strides(), g.io(), kBias, false);
    s = g.pointwise(CUDNN_POINTWISE_ADD, S, s, bias);            // + bias
  }
  s = masked(g, pr, S, s, pad);                                  // padded rows and keys, causal: lowest
  DescPtr m = g.reduce(CUDNN_REDUCE_TENSOR_MAX, S, s);           // softmax with its statistics
  DescPtr e = g.pointwise(CUDNN_POINTWISE_EXP, S, g.pointwise(CUDNN_POINTWISE_SUB, S, s, m));
  DescPtr z = g.reduce(CUDNN_REDUCE_TENSOR_ADD, S, e);
  DescPtr logz = g.pointwise(CUDNN_POINTWISE_LOG, pr.stats_dims(), z);
  g.pointwise(CUDNN_POINTWISE_ADD, stats, m, logz);              // stats = max + log(sum)
  DescPtr probs;
  if (pr.dropout()) {
    DescPtr seed = g.scalar(kSeed, CUDNN_DATA_INT64, false), offset = g.scalar(kOffset, CUDNN_DATA_INT64, false);
    DescPtr keep = g.rng(S, seed, offset, 1.0 - pr.p);
    DescPtr pr0 = g.pointwise(CUDNN_POINTWISE_DIV, S, e, z);
    DescPtr pr1 = g.pointwise(CUDNN_POINTWISE_MUL, S, pr0, keep);
    probs = g.virt(S, g.io());                                   // the second GEMM reads the io dtype
    g.pointwise(CUDNN_POINTWISE_MUL, probs, pr1, g.scalar(kDropScale));
  } else {
    probs = g.virt(S, g.io());
    g.pointwise(CUDNN_POINTWISE_DIV, probs, e, z);
  }
  g.matmul(o, probs, v, {pad.seq_q, nullptr, pad.seq_kv});       // O = P @ V
  return make_plan(h, g);
}

std::unique_ptr<Plan> build_backward(cudnnHandle_t h, const Problem& pr) {
  GraphBuilder g(pr.io);
  const Dims S = pr.scores(), D = pr.q_dims(), DK = pr.kv_dims(), R = pr.stats_dims();
  const Ragged rg = ragged_tensors(g, pr);
  const Padding pad = padding_tensors(g, pr, pr.bwd_padding);
  // dq/dk/dv share q/k/v's layouts (ops/fused.cpp allocates them so); dO shares O's.
  DescPtr q = g.tensor(D, pr.bhsd(pr.q_b, pr.q_t), g.io(), kQ, false, false, rg.q);
  DescPtr kt = g.tensor(pr.kv_t_dims(), pr.bhds(pr.k_b, pr.k_t), g.io(), kK, false, false, rg.k);
  DescPtr vt = g.tensor(pr.kv_t_dims(), pr.bhds(pr.v_b, pr.v_t), g.io(), kV, false, false, rg.v);
  DescPtr o = g.tensor(D, pr.out_strides(), g.io(), kO, false, false, rg.o);
  DescPtr dout = g.tensor(D, pr.out_strides(), g.io(), kDO, false, false, rg.o);
  DescPtr stats = g.tensor(R, packed_strides(R), CUDNN_DATA_FLOAT, kStats, false);
  DescPtr dq = g.tensor(D, pr.bhsd(pr.q_b, pr.q_t), g.io(), kDQ, false, false, rg.q);
  DescPtr dk = g.tensor(DK, pr.bhsd(pr.k_b, pr.k_t), g.io(), kDK, false, false, rg.k);
  DescPtr dv = g.tensor(DK, pr.bhsd(pr.v_b, pr.v_t), g.io(), kDV, false, false, rg.v);
  DescPtr scale = g.scalar(kScale);
  DescPtr keep, drop_scale;
  if (pr.dropout()) {
    DescPtr seed = g.scalar(kSeed, CUDNN_DATA_INT64, false), offset = g.scalar(kOffset, CUDNN_DATA_INT64, false);
    keep = g.rng(S, seed, offset, 1.0 - pr.p);
    drop_scale = g.scalar(kDropScale);
  }
  const Overrides rows_by_keys = {pad.seq_q, pad.seq_kv, nullptr};  // (T_q, T_kv) products
  const Overrides keys_over_rows = {pad.seq_kv, nullptr, pad.seq_q};  // (T_kv, HS) = (T_kv, T_q) @ (T_q, HS)
  const Overrides rows_over_keys = {pad.seq_q, nullptr, pad.seq_kv};  // (T_q, HS) = (T_q, T_kv) @ (T_kv, HS)

  // sum = rowsum(dO * O) * (1 - p): a float32 workspace tensor.
  DescPtr dot = g.virt(D, {pr.NH * pr.T * pr.HS, pr.T * pr.HS, pr.NH * pr.HS, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dot, dout, o);
  DescPtr rowdot = g.reduce(CUDNN_REDUCE_TENSOR_ADD, D, dot);
  DescPtr softmax_sum = g.tensor(R, packed_strides(R), CUDNN_DATA_FLOAT, kSoftmaxSum, false);
  g.pointwise(CUDNN_POINTWISE_MUL, softmax_sum, rowdot, g.scalar(pr.dropout() ? kDropScaleInv : kOne));

  // E = exp(Q @ K^T * scale + bias [padded] - stats): the probabilities again.
  DescPtr s = g.virt(S);
  g.matmul(s, q, kt, rows_by_keys);
  s = g.pointwise(CUDNN_POINTWISE_MUL, S, s, scale);
  if (pr.mask) {
    DescPtr bias = g.tensor(pr.bias_dims(), pr.bias_strides(), g.io(), kBias, false);
    s = g.pointwise(CUDNN_POINTWISE_ADD, S, s, bias);
  }
  s = masked(g, pr, S, s, pad);
  DescPtr centred = g.pointwise(CUDNN_POINTWISE_SUB, S, s, stats);
  if (pr.bwd_repad) centred = padding_select(g, S, centred, pad);  // Note [cuDNN version rules]
  DescPtr e = g.pointwise(CUDNN_POINTWISE_EXP, S, centred);

  // dV = P_dropped^T @ dO
  DescPtr pd = e;
  if (pr.dropout()) pd = g.pointwise(CUDNN_POINTWISE_MUL, S, g.pointwise(CUDNN_POINTWISE_MUL, S, e, keep), drop_scale);
  DescPtr pt = g.virt(pr.scores_t(), pr.scores_t_strides(), g.io());  // (B, NH, S, T) view of (.., T, S)
  g.reshape(pt, pd);
  g.matmul(dv, pt, dout, keys_over_rows);

  // dS = ((dO @ V^T) [* keep] - sum) * E [* 1/(1-p)] * scale
  DescPtr dp = g.virt(S);
  g.matmul(dp, dout, vt, rows_by_keys);
  if (pr.dropout()) dp = g.pointwise(CUDNN_POINTWISE_MUL, S, dp, keep);
  DescPtr ds = g.pointwise(CUDNN_POINTWISE_MUL, S, g.pointwise(CUDNN_POINTWISE_SUB, S, dp, softmax_sum), e);
  if (pr.dropout()) ds = g.pointwise(CUDNN_POINTWISE_MUL, S, ds, drop_scale);
  ds = g.pointwise(CUDNN_POINTWISE_MUL, S, ds, scale);

  // dK = dS^T @ Q
  DescPtr dst = g.virt(pr.scores_t(), pr.scores_t_strides(), g.io());
  g.reshape(dst, ds);
  g.matmul(dk, dst, q, keys_over_rows);

  // dQ = dS @ K, accumulated in a float32 workspace tensor, then cast.
  DescPtr k = g.virt(DK, pr.bhsd(pr.k_b, pr.k_t), g.io(), rg.k);
  g.reshape(k, kt);
  DescPtr dq_accum = g.tensor(D, packed_strides(D), CUDNN_DATA_FLOAT, kDQAccum, false);
  g.matmul(dq_accum, ds, k, rows_over_keys);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq, dq_accum);
  return make_plan(h, g);
}

}  // namespace kiln::cuda::sdpa::internal

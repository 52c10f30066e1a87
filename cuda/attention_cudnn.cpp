// Scaled-dot-product attention (forward and backward) through cuDNN 9's fused
// flash-attention engines, built with the C backend (graph) API. CPU twin:
// the fused attention of core/cpu/ (Note [Fused attention], ops/fused.cpp).
//
// Note [cuDNN attention]
// ~~~~~~~~~~~~~~~~~~~~~~
// cuDNN has no single "attention" call for this case: its runtime fusion
// engines recognise an operation graph of a known shape and compile it into
// one flash-attention kernel. The graphs below are that shape, as the cuDNN
// frontend library lowers its SDPA nodes for cuDNN 9.x (composite softmax,
// dQ accumulated in float32):
//
//   forward   S  = (Q @ K^T) * scale + bias              (B, NH, T, T) float32, virtual
//             M  = rowmax(S);  E = exp(S - M);  Z = rowsum(E)
//             stats = M + log(Z)                          (B, NH, T, 1) float32, saved
//             P  = E / Z  [* bernoulli(1-p) * 1/(1-p)]    cast to the io dtype
//             O  = P @ V                                  (B, NH, T, HS) io dtype
//
//   backward  sum = rowsum(dO * O) * (1-p)                (B, NH, T, 1) float32, workspace
//             E  = exp((Q @ K^T) * scale + bias - stats)  (the probabilities, recomputed)
//             dV = (E [* mask / (1-p)])^T @ dO
//             dS = ((dO @ V^T) [* mask] - sum) * E [/ (1-p)] * scale
//             dK = dS^T @ Q;   dQ = dS @ K                (dQ through a float32 accumulator)
//
// Q, K, V, O and their gradients are (B, NH, T, HS) strided views of kiln's
// (B, T, C) tensors (or of one packed (B, T, 3C) projection): strides
// (batch, HS, row, 1); K^T and V^T are the same memory with the last two
// dims' strides swapped. The padding mask is the bias, (B, 1, T, T) with
// stride 0 over queries. Scalars (scale, 1/(1-p), 1-p, 1) are by-value
// tensors; the dropout seed and offset are device int64 scalars.
//
// Dropout: cuDNN's Philox draws the keep mask inside the kernel from (seed,
// offset); forward and backward with the same pair drop the same elements.
// kiln's generator state is (seed, call counter) (Note [Random numbers]); the
// counter is not a Philox element offset, so neighbouring calls would give
// shifted copies of one stream. Each call therefore hands cuDNN the seed
// philox4x32(counter = call, key = seed) and offset 0: independent streams
// per call that depend only on the generator state (exact resume holds). The
// mask differs from the CPU's bernoulli mask, so with dropout CUDA and CPU
// agree in distribution only.
//
// A problem (device, dtype, B, NH, T, HS, strides, mask, p; pointers 16-byte aligned) builds
// both graphs once and caches their execution plans; when cuDNN finds no
// engine for either graph, forward() says so (false) and the caller runs
// another path. Workspaces come from kiln's caching allocator on the current
// stream. float32 is not supported by these engines (ops/fused.cpp falls back).
#include "cuda/attention_cudnn.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/random.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.cuh"

namespace kiln::cuda::sdpa {
namespace {

constexpr int kMaxDevices = 64;
constexpr int64_t kAlignment = 16;  // bytes; every tensor pointer handed to cuDNN is checked against it

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mutex;
  static std::array<cudnnHandle_t, kMaxDevices> handles{};
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuDNN: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  cudnnHandle_t& h = handles[static_cast<size_t>(device)];
  if (!h) KILN_CUDNN_CHECK(cudnnCreate(&h));
  return h;  // kept for the process, like the cuBLASLt handles
}

// ---- backend descriptors ------------------------------------------------------

// One cuDNN backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, value));
  }
  void set(cudnnBackendAttributeName_t name, const Desc& d) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t t) { set(name, CUDNN_TYPE_DATA_TYPE, 1, &t); }
  void finalize() { KILN_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};
using DescPtr = std::shared_ptr<Desc>;

using Dims = std::array<int64_t, 4>;

Dims packed_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// Builds one operation graph: tensors and operations in creation order.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnDataType_t io) : io_(io) {}

  // A tensor the variant pack names (uid) or a virtual one (uid from 1000 on).
  DescPtr tensor(const Dims& dims, const Dims& strides, cudnnDataType_t dtype, int64_t uid, bool is_virtual,
                 bool by_value = false) {
    auto t = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t->set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dtype);
    t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
    t->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t->finalize();
    keep_.push_back(t);
    return t;
  }
  DescPtr virt(const Dims& dims, cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
    return tensor(dims, packed_strides(dims), dtype, next_virtual_++, true);
  }
  DescPtr virt(const Dims& dims, const Dims& strides, cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
    return tensor(dims, strides, dtype, next_virtual_++, true);
  }
  DescPtr scalar(int64_t uid, cudnnDataType_t dtype = CUDNN_DATA_FLOAT, bool by_value = true) {
    return tensor({1, 1, 1, 1}, {1, 1, 1, 1}, dtype, uid, false, by_value);
  }

  // y = mode(x[, b[, t]]), computed in float32.
  void pointwise(cudnnPointwiseMode_t mode, const DescPtr& y, const DescPtr& x, const DescPtr& b = nullptr,
                 const DescPtr& t = nullptr) {
    auto pw = std::make_shared<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw->set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
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
  DescPtr pointwise(cudnnPointwiseMode_t mode, const Dims& dims, const DescPtr& x, const DescPtr& b = nullptr) {
    DescPtr y = virt(dims);
    pointwise(mode, y, x, b);
    return y;
  }

  // c = a @ b over the last two dims, batched over the first two; float32 accumulation.
  void matmul(const DescPtr& c, const DescPtr& a, const DescPtr& b) {
    auto mm = std::make_shared<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm->set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    mm->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
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

// A finalized execution plan and everything it was built from.
struct Plan {
  std::vector<DescPtr> descs;  // graph, tensors, operations, engine configs: alive as long as the plan
  DescPtr plan;
  int64_t workspace = 0;
};

// Finalizes the graph and the first engine configuration heuristics mode A
// (then the fallback list) offers that builds. nullptr: no engine supports it.
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

// Variant-pack uids of the tensors kiln hands over.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kBias, kScale, kSeed, kOffset, kDropScale, kDropScaleInv, kOne,
  kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum,
};

// The problem one pair of plans is built for.
struct Problem {
  cudnnDataType_t io = CUDNN_DATA_HALF;
  int64_t B = 0, NH = 0, T = 0, HS = 0;
  int64_t q_b = 0, q_t = 0, k_b = 0, k_t = 0, v_b = 0, v_t = 0;  // batch and row strides (elements)
  bool mask = false;
  double p = 0.0;
  auto tie() const { return std::tie(io, B, NH, T, HS, q_b, q_t, k_b, k_t, v_b, v_t, mask, p); }
  bool operator<(const Problem& o) const { return tie() < o.tie(); }
  bool dropout() const { return p > 0.0; }

  // (B, NH, T, HS) views of (B, T, C) memory with the given batch and row strides.
  Dims bhsd(int64_t sb, int64_t st) const { return {sb, HS, st, 1}; }
  Dims bhds(int64_t sb, int64_t st) const { return {sb, HS, 1, st}; }  // the transpose (B, NH, HS, T)
  Dims qkv_dims() const { return {B, NH, T, HS}; }
  Dims t_dims() const { return {B, NH, HS, T}; }
  Dims scores() const { return {B, NH, T, T}; }
  Dims out_strides() const { return bhsd(T * NH * HS, NH * HS); }
  Dims stats_dims() const { return {B, NH, T, 1}; }
  Dims bias_strides() const { return {T, T, 0, 1}; }  // (B, 1, T, T), stride 0 over queries
};

std::unique_ptr<Plan> build_forward(cudnnHandle_t h, const Problem& pr) {
  GraphBuilder g(pr.io);
  const Dims S = pr.scores();
  DescPtr q = g.tensor(pr.qkv_dims(), pr.bhsd(pr.q_b, pr.q_t), g.io(), kQ, false);
  DescPtr kt = g.tensor(pr.t_dims(), pr.bhds(pr.k_b, pr.k_t), g.io(), kK, false);
  DescPtr v = g.tensor(pr.qkv_dims(), pr.bhsd(pr.v_b, pr.v_t), g.io(), kV, false);
  DescPtr o = g.tensor(pr.qkv_dims(), pr.out_strides(), g.io(), kO, false);
  DescPtr stats = g.tensor(pr.stats_dims(), packed_strides(pr.stats_dims()), CUDNN_DATA_FLOAT, kStats, false);
  DescPtr scale = g.scalar(kScale);

  DescPtr s = g.virt(S);
  g.matmul(s, q, kt);                                            // Q @ K^T
  s = g.pointwise(CUDNN_POINTWISE_MUL, S, s, scale);             // * scale
  if (pr.mask) {
    DescPtr bias = g.tensor({pr.B, 1, pr.T, pr.T}, pr.bias_strides(), g.io(), kBias, false);
    s = g.pointwise(CUDNN_POINTWISE_ADD, S, s, bias);            // + bias
  }
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
  g.matmul(o, probs, v);                                         // O = P @ V
  return make_plan(h, g);
}

std::unique_ptr<Plan> build_backward(cudnnHandle_t h, const Problem& pr) {
  GraphBuilder g(pr.io);
  const Dims S = pr.scores(), D = pr.qkv_dims(), R = pr.stats_dims();
  // dq/dk/dv share q/k/v's layouts (ops/fused.cpp allocates them so); dO shares O's.
  DescPtr q = g.tensor(D, pr.bhsd(pr.q_b, pr.q_t), g.io(), kQ, false);
  DescPtr kt = g.tensor(pr.t_dims(), pr.bhds(pr.k_b, pr.k_t), g.io(), kK, false);
  DescPtr vt = g.tensor(pr.t_dims(), pr.bhds(pr.v_b, pr.v_t), g.io(), kV, false);
  DescPtr o = g.tensor(D, pr.out_strides(), g.io(), kO, false);
  DescPtr dout = g.tensor(D, pr.out_strides(), g.io(), kDO, false);
  DescPtr stats = g.tensor(R, packed_strides(R), CUDNN_DATA_FLOAT, kStats, false);
  DescPtr dq = g.tensor(D, pr.bhsd(pr.q_b, pr.q_t), g.io(), kDQ, false);
  DescPtr dk = g.tensor(D, pr.bhsd(pr.k_b, pr.k_t), g.io(), kDK, false);
  DescPtr dv = g.tensor(D, pr.bhsd(pr.v_b, pr.v_t), g.io(), kDV, false);
  DescPtr scale = g.scalar(kScale);
  DescPtr keep, drop_scale;
  if (pr.dropout()) {
    DescPtr seed = g.scalar(kSeed, CUDNN_DATA_INT64, false), offset = g.scalar(kOffset, CUDNN_DATA_INT64, false);
    keep = g.rng(S, seed, offset, 1.0 - pr.p);
    drop_scale = g.scalar(kDropScale);
  }

  // sum = rowsum(dO * O) * (1 - p): a float32 workspace tensor.
  DescPtr dot = g.virt(D, {pr.NH * pr.T * pr.HS, pr.T * pr.HS, pr.NH * pr.HS, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dot, dout, o);
  DescPtr rowdot = g.reduce(CUDNN_REDUCE_TENSOR_ADD, D, dot);
  DescPtr softmax_sum = g.tensor(R, packed_strides(R), CUDNN_DATA_FLOAT, kSoftmaxSum, false);
  g.pointwise(CUDNN_POINTWISE_MUL, softmax_sum, rowdot, g.scalar(pr.dropout() ? kDropScaleInv : kOne));

  // E = exp(Q @ K^T * scale + bias - stats): the probabilities again.
  DescPtr s = g.virt(S);
  g.matmul(s, q, kt);
  s = g.pointwise(CUDNN_POINTWISE_MUL, S, s, scale);
  if (pr.mask) {
    DescPtr bias = g.tensor({pr.B, 1, pr.T, pr.T}, pr.bias_strides(), g.io(), kBias, false);
    s = g.pointwise(CUDNN_POINTWISE_ADD, S, s, bias);
  }
  DescPtr e = g.pointwise(CUDNN_POINTWISE_EXP, S, g.pointwise(CUDNN_POINTWISE_SUB, S, s, stats));

  // dV = P_dropped^T @ dO
  DescPtr pd = e;
  if (pr.dropout()) pd = g.pointwise(CUDNN_POINTWISE_MUL, S, g.pointwise(CUDNN_POINTWISE_MUL, S, e, keep), drop_scale);
  const Dims transposed = {pr.T * pr.T * pr.NH, pr.T * pr.T, 1, pr.T};  // (B, NH, T_kv, T_q) view of (.., T_q, T_kv)
  DescPtr pt = g.virt(S, transposed, g.io());
  g.reshape(pt, pd);
  g.matmul(dv, pt, dout);

  // dS = ((dO @ V^T) [* keep] - sum) * E [* 1/(1-p)] * scale
  DescPtr dp = g.virt(S);
  g.matmul(dp, dout, vt);
  if (pr.dropout()) dp = g.pointwise(CUDNN_POINTWISE_MUL, S, dp, keep);
  DescPtr ds = g.pointwise(CUDNN_POINTWISE_MUL, S, g.pointwise(CUDNN_POINTWISE_SUB, S, dp, softmax_sum), e);
  if (pr.dropout()) ds = g.pointwise(CUDNN_POINTWISE_MUL, S, ds, drop_scale);
  ds = g.pointwise(CUDNN_POINTWISE_MUL, S, ds, scale);

  // dK = dS^T @ Q
  DescPtr dst = g.virt(S, transposed, g.io());
  g.reshape(dst, ds);
  g.matmul(dk, dst, q);

  // dQ = dS @ K, accumulated in a float32 workspace tensor, then cast.
  DescPtr k = g.virt(D, pr.bhsd(pr.k_b, pr.k_t), g.io());
  g.reshape(k, kt);
  DescPtr dq_accum = g.tensor(D, packed_strides(D), CUDNN_DATA_FLOAT, kDQAccum, false);
  g.matmul(dq_accum, ds, k);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq, dq_accum);
  return make_plan(h, g);
}

// ---- the cache --------------------------------------------------------------------

struct Entry {
  std::unique_ptr<Plan> fwd, bwd;  // both null: cuDNN has no engine for this problem
};

std::mutex cache_mutex;
std::map<std::pair<int, Problem>, std::shared_ptr<Entry>>& cache() {
  static auto* c = new std::map<std::pair<int, Problem>, std::shared_ptr<Entry>>();  // never destroyed
  return *c;
}

// A (B, T, C) operand's batch and row strides, with those of size-1 dims made
// canonical (they address nothing, and kiln may give them any value).
std::pair<int64_t, int64_t> layout(const Tensor& t) {
  const int64_t st = t.size(1) == 1 ? t.size(2) : t.stride(1);
  const int64_t sb = t.size(0) == 1 ? t.size(1) * st : t.stride(0);
  return {sb, st};
}

bool aligned(const Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.raw_data()) % static_cast<uintptr_t>(kAlignment) == 0;
}

// The problem of a call; false when the layouts are not what the graphs describe.
bool describe(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, int64_t heads, double p,
              Problem& pr) {
  if (q.dtype() != DType::Float16 && q.dtype() != DType::BFloat16) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (t->dim() != 3 || t->stride(2) != 1 || !aligned(*t)) return false;
  if (mask.defined() && (!mask.is_contiguous() || !aligned(mask))) return false;
  pr.io = q.dtype() == DType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  pr.B = q.size(0);
  pr.T = q.size(1);
  pr.NH = heads;
  pr.HS = q.size(2) / heads;
  std::tie(pr.q_b, pr.q_t) = layout(q);
  std::tie(pr.k_b, pr.k_t) = layout(k);
  std::tie(pr.v_b, pr.v_t) = layout(v);
  pr.mask = mask.defined();
  pr.p = p;
  return true;
}

std::shared_ptr<Entry> plans_for(int device, const Problem& pr) {
  const auto key = std::make_pair(device, pr);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  // Built outside the lock (cuDNN may compile kernels); a racing thread builds the same.
  cudnnHandle_t h = cudnn_handle(device);
  auto entry = std::make_shared<Entry>();
  std::string why;
  try {
    entry->fwd = build_forward(h, pr);
    if (!entry->fwd) why = "no engine for the forward graph";
    if (entry->fwd) entry->bwd = build_backward(h, pr);
    if (entry->fwd && !entry->bwd) why = "no engine for the backward graph";
  } catch (const Error& e) {  // a descriptor cuDNN refuses to build: the same answer, said once below
    entry->bwd.reset();
    why = e.what();
  }
  if (!entry->bwd) {
    entry->fwd.reset();  // a problem runs on cuDNN both ways or not at all
    char last[512] = {0};
    cudnnGetLastErrorString(last, sizeof last);
    std::fprintf(stderr,
                 "kiln: cuDNN attention declined (B=%lld, heads=%lld, T=%lld, head size=%lld, %s, mask %d, p %g): "
                 "%s%s%s; using the other attention kernels\n",
                 static_cast<long long>(pr.B), static_cast<long long>(pr.NH), static_cast<long long>(pr.T),
                 static_cast<long long>(pr.HS), pr.io == CUDNN_DATA_HALF ? "float16" : "bfloat16", pr.mask ? 1 : 0,
                 pr.p, why.c_str(), last[0] ? ": " : "", last);
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  return cache().emplace(key, entry).first->second;
}

// cuDNN's (seed, offset) for kiln's Philox state (Note [cuDNN attention]).
std::array<int64_t, 2> cudnn_seed(PhiloxState st) {
  const std::array<uint32_t, 4> w = philox_words(st, 0);
  const uint64_t seed = (static_cast<uint64_t>(w[0]) << 32) | w[1];
  return {static_cast<int64_t>(seed & 0x7fffffffffffffffull), 0};
}

// Runs a plan: binds the variant pack (uids -> pointers) and a workspace.
void execute(int device, const Plan& plan, std::vector<int64_t> uids, std::vector<void*> ptrs) {
  cudnnHandle_t h = cudnn_handle(device);
  cudaStream_t stream = detail::current_cuda_stream(device);
  KILN_CUDNN_CHECK(cudnnSetStream(h, stream));
  // The workspace lives until the end of this call; the caching allocator
  // reuses it only in stream order (Note [Current stream]).
  Tensor ws = plan.workspace > 0
                  ? empty_tensor({(plan.workspace + 7) / 8}, DType::Int64, Device(DeviceType::CUDA, device))
                  : Tensor();
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ws_ptr = ws.defined() ? ws.raw_data() : nullptr;
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
           ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
  pack.finalize();
  KILN_CUDNN_CHECK(cudnnBackendExecute(h, plan.plan->get(), pack.get()));
}

// The dropout seed/offset pair in device memory, written on the current stream.
Tensor device_seed(int device, PhiloxState st) {
  const std::array<int64_t, 2> host = cudnn_seed(st);
  Tensor t = empty_tensor({2}, DType::Int64, Device(DeviceType::CUDA, device));
  // From pageable memory: staged by the driver before the call returns.
  KILN_CUDA_CHECK(cudaMemcpyAsync(t.raw_data(), host.data(), sizeof host, cudaMemcpyHostToDevice,
                                  detail::current_cuda_stream(device)));
  return t;
}

}  // namespace

bool supported(int device, DType dtype, int64_t T, int64_t head_size, bool has_mask, double p) {
  (void)has_mask;
  if (dtype != DType::Float16 && dtype != DType::BFloat16) return false;
  if (head_size % 8 != 0 || head_size > 128 || head_size <= 0 || T < 1 || p < 0.0 || p >= 1.0) return false;
  static std::once_flag once;
  static std::array<int, kMaxDevices> major{};
  std::call_once(once, [] {
    for (int d = 0; d < std::min(device_count(), kMaxDevices); ++d) {
      int m = 0;
      if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess) major[static_cast<size_t>(d)] = m;
    }
  });
  return device >= 0 && device < kMaxDevices && major[static_cast<size_t>(device)] >= 8;
}

bool forward(int device, const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& mask, int64_t heads, double scale, double p, PhiloxState st) {
  Problem pr;
  if (!describe(q, k, v, mask, heads, p, pr) || !out.is_contiguous() || !stats.is_contiguous() || !aligned(out) ||
      !aligned(stats))
    return false;
  detail::DeviceGuard guard(device);
  std::shared_ptr<Entry> entry = plans_for(device, pr);
  if (!entry->fwd) return false;
  float scale_f = static_cast<float>(scale), drop_scale = pr.dropout() ? static_cast<float>(1.0 / (1.0 - p)) : 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), stats.raw_data(), &scale_f};
  if (pr.mask) uids.push_back(kBias), ptrs.push_back(mask.raw_data());
  Tensor seed;
  if (pr.dropout()) {
    seed = device_seed(device, st);
    auto* s = static_cast<int64_t*>(seed.raw_data());
    uids.insert(uids.end(), {kSeed, kOffset, kDropScale});
    ptrs.insert(ptrs.end(), {s, s + 1, &drop_scale});
  }
  execute(device, *entry->fwd, uids, ptrs);
  return true;
}

void backward(int device, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& stats, const Tensor& mask,
              int64_t heads, double scale, double p, PhiloxState st) {
  Problem pr;
  KILN_CHECK(describe(q, k, v, mask, heads, p, pr) && out.is_contiguous() && dout.is_contiguous() &&
                 stats.is_contiguous() && aligned(dout) && aligned(dq) && aligned(dk) && aligned(dv),
             "internal: cuDNN attention backward got operands its forward would not take");
  KILN_CHECK(layout(dq) == std::make_pair(pr.q_b, pr.q_t) && layout(dk) == std::make_pair(pr.k_b, pr.k_t) &&
                 layout(dv) == std::make_pair(pr.v_b, pr.v_t) && dq.stride(2) == 1 && dk.stride(2) == 1 &&
                 dv.stride(2) == 1,
             "internal: cuDNN attention backward needs dq, dk, dv laid out as q, k, v");
  detail::DeviceGuard guard(device);
  std::shared_ptr<Entry> entry = plans_for(device, pr);
  KILN_CHECK(entry->bwd, "internal: cuDNN attention backward for a problem its forward did not run");
  const Device dev(DeviceType::CUDA, device);
  Tensor softmax_sum = empty_tensor({pr.B, pr.NH, pr.T}, DType::Float32, dev);
  Tensor dq_accum = empty_tensor({pr.B, pr.NH, pr.T, pr.HS}, DType::Float32, dev);
  // cuDNN >= 9.6 clears the accumulator itself; clearing it here costs one memset and holds for any 9.x.
  KILN_CUDA_CHECK(cudaMemsetAsync(dq_accum.raw_data(), 0, static_cast<size_t>(dq_accum.numel()) * sizeof(float),
                                  detail::current_cuda_stream(device)));
  float scale_f = static_cast<float>(scale), one = 1.f;
  float drop_scale = pr.dropout() ? static_cast<float>(1.0 / (1.0 - p)) : 1.f;
  float drop_scale_inv = pr.dropout() ? static_cast<float>(1.0 - p) : 1.f;
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kSoftmaxSum, kDQAccum};
  std::vector<void*> ptrs = {q.raw_data(),  k.raw_data(),  v.raw_data(),  out.raw_data(),
                             dout.raw_data(), stats.raw_data(), dq.raw_data(), dk.raw_data(),
                             dv.raw_data(), &scale_f, softmax_sum.raw_data(), dq_accum.raw_data()};
  if (pr.mask) uids.push_back(kBias), ptrs.push_back(mask.raw_data());
  Tensor seed;
  if (pr.dropout()) {
    seed = device_seed(device, st);
    auto* s = static_cast<int64_t*>(seed.raw_data());
    uids.insert(uids.end(), {kSeed, kOffset, kDropScale, kDropScaleInv});
    ptrs.insert(ptrs.end(), {s, s + 1, &drop_scale, &drop_scale_inv});
  } else {
    uids.push_back(kOne), ptrs.push_back(&one);
  }
  execute(device, *entry->bwd, uids, ptrs);
}

}  // namespace kiln::cuda::sdpa

// DistributedDataParallel on every rank: a small BERT trained for 5 steps
// with DDP (each rank on its DistributedSampler shard) matches one process
// trained on the whole batch at every step; any bucket size gives bitwise the
// same parameters; no_sync accumulation equals syncing every micro-step;
// buckets, unused parameters, mismatched modules and misuse are checked.
// DISABLED_DeadRank.* are run by tests/dist.cmake with KILN_DIST_TIMEOUT=10:
// one rank stops participating and the others must fail within the timeout.
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "../cuda_test_util.h"
#include "../test_util.h"
#include "../tiny_models.h"
#include "data/sampler.h"
#include "cuda/cuda.h"
#include "dist/ddp.h"
#include "nn/lora.h"
#include "nn/models/bert.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "tests/dist/dist_test_util.h"

namespace kiln::dist {
namespace {

using testing::pg;

constexpr int64_t kSeq = 12;
constexpr int64_t kVocab = 50;
constexpr int kSteps = 5;

BertConfig tiny_config() {
  BertConfig c = kiln::testing::tiny_bert_config();
  c.vocab_size = kVocab;
  return c;
}

optim::AdamWOptions adamw_options() {
  optim::AdamWOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  return o;
}

// Two rows per rank, so every rank's shard has the same number of labelled
// tokens and the mean of the ranks' mean losses is the global mean loss.
int64_t global_batch_size() { return 2 * pg().size(); }

struct Batch {
  Tensor ids, labels;  // (B, T) int64; labels -100 except 3 positions per row
};

// The global batch of (step, micro-step): the same on every rank.
Batch global_batch(int step, int micro) {
  const int64_t b = global_batch_size();
  Generator gen(1000 + 10 * step + micro);
  Tensor ids = randint(1, kVocab, {b, kSeq}, {}, &gen);
  Tensor targets = randint(1, kVocab, {b, kSeq}, {}, &gen);
  std::vector<int64_t> lab(static_cast<size_t>(b * kSeq), -100);
  const std::vector<int64_t> tv = targets.to_vector<int64_t>();
  for (int64_t row = 0; row < b; ++row)
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t pos = (step + micro + 3 * row + 4 * k) % kSeq;
      lab[row * kSeq + pos] = tv[row * kSeq + pos];
    }
  return {ids, tensor_from(lab, {b, kSeq})};
}

// This rank's rows, as data::DistributedSampler assigns them (no shuffle).
Batch shard(const Batch& global) {
  data::DistributedSampler sampler(static_cast<size_t>(global_batch_size()), pg().rank(), pg().size(), false);
  std::vector<int64_t> rows;
  for (size_t i : sampler.indices(0)) rows.push_back(static_cast<int64_t>(i));
  Tensor index = tensor_from(rows);
  return {index_select(global.ids, 0, index), index_select(global.labels, 0, index)};
}

Tensor loss_of(const nn::BertForMaskedLM& m, const Batch& b) { return m.forward(b.ids, Tensor(), Tensor(), b.labels).loss; }

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(t.detach().clone());
  return out;
}

std::vector<Tensor> grads_of(const nn::Module& m) {
  std::vector<Tensor> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(t.grad().clone());
  return out;
}

enum class Accumulate { None, NoSync, SyncEveryMicroStep };
using History = std::vector<std::vector<Tensor>>;  // [step][parameter]

// One process, the whole global batch: the reference.
// `grads`, when given, gets the gradients each optimizer step used.
History train_reference(Accumulate acc, DType dtype, History* grads = nullptr) {
  manual_seed(42);
  nn::BertForMaskedLM model(tiny_config());
  model.to(dtype);
  optim::AdamW opt(model.parameters(), adamw_options());
  History h;
  for (int step = 0; step < kSteps; ++step) {
    if (acc == Accumulate::None) {
      loss_of(model, global_batch(step, 0)).backward();
    } else {
      for (int micro = 0; micro < 2; ++micro) mul(loss_of(model, global_batch(step, micro)), 0.5).backward();
    }
    if (grads) grads->push_back(grads_of(model));
    opt.step();
    opt.zero_grad();
    h.push_back(snapshot(model));
  }
  return h;
}

// DDP on every rank, each on its shard. Rank r starts from its own random
// weights: DDP must broadcast rank 0's.
History train_ddp(const DDPOptions& options, Accumulate acc, DType dtype, int* num_buckets = nullptr,
                  History* grads = nullptr) {
  manual_seed(42 + 1000 * static_cast<uint64_t>(pg().rank()));
  nn::BertForMaskedLM model(tiny_config());
  model.to(dtype);
  DistributedDataParallel ddp(model, default_process_group(), options);
  if (num_buckets) *num_buckets = static_cast<int>(ddp.buckets().size());
  optim::AdamW opt(model.parameters(), adamw_options());
  History h;
  for (int step = 0; step < kSteps; ++step) {
    if (acc == Accumulate::None) {
      loss_of(model, shard(global_batch(step, 0))).backward();
      ddp.finish_gradient_sync();
    } else if (acc == Accumulate::NoSync) {
      {
        auto guard = ddp.no_sync();
        EXPECT_FALSE(ddp.sync_enabled());
        mul(loss_of(model, shard(global_batch(step, 0))), 0.5).backward();
        ddp.finish_gradient_sync();  // a no-op under no_sync
      }
      if (step == 0 && pg().size() > 1) {
        // Nothing was reduced: the ranks' gradients are still their own.
        EXPECT_FALSE(testing::same_on_all_ranks(model.parameters()[0].grad()));
      }
      mul(loss_of(model, shard(global_batch(step, 1))), 0.5).backward();
      ddp.finish_gradient_sync();
    } else {
      for (int micro = 0; micro < 2; ++micro) {
        mul(loss_of(model, shard(global_batch(step, micro))), 0.5).backward();
        ddp.finish_gradient_sync();
      }
    }
    if (grads) grads->push_back(grads_of(model));
    opt.step();
    opt.zero_grad();
    h.push_back(snapshot(model));
  }
  return h;
}

// max |a - b| / max |b| over one parameter tensor (a scale below 1e-6 counts
// as 1e-6: a parameter that stays at zero, like the attention key bias whose
// exact gradient is zero, is compared absolutely).
double relative_diff(const Tensor& a, const Tensor& b) {
  const double scale = amax(abs(to_dtype(b, DType::Float64))).item<double>();
  const double diff = amax(abs(sub(to_dtype(a, DType::Float64), to_dtype(b, DType::Float64)))).item<double>();
  return diff / std::max(scale, 1e-6);
}

void expect_close(const History& got, const History& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  const nn::BertForMaskedLM names_of(tiny_config());
  const nn::NamedTensors named = names_of.named_parameters();
  for (size_t s = 0; s < got.size(); ++s) {
    double worst = 0;
    std::string worst_name;
    for (size_t p = 0; p < got[s].size(); ++p) {
      const double d = relative_diff(got[s][p], want[s][p]);
      if (d <= worst) continue;
      worst = d;
      worst_name = p < named.size() ? named[p].first : std::to_string(p);  // LoRA runs have more parameters
    }
    EXPECT_LE(worst, tol) << what << ": step " << s + 1 << ", parameter " << worst_name;
  }
}

bool bitwise_equal(const History& a, const History& b) {
  if (a.size() != b.size()) return false;
  for (size_t s = 0; s < a.size(); ++s)
    for (size_t p = 0; p < a[s].size(); ++p)
      if (std::memcmp(a[s][p].raw_data(), b[s][p].raw_data(), a[s][p].numel() * a[s][p].element_size()) != 0)
        return false;
  return true;
}

// Note [Why float64]: in float32 the two runs round differently, and AdamW
// turns gradients that are pure rounding noise (the attention key bias has an
// exact gradient of zero: softmax ignores a shift shared by all keys) into
// full-size steps of either sign, so those parameters differ by ~lr after one
// step whatever DDP does (the others agree to ~1e-5). In float64 every
// parameter must agree to 1e-5 relative at every step, which any slip in
// averaging, bucketing or broadcasting fails by orders of magnitude.
TEST(DDP, MatchesOneProcessOnTheWholeBatch) {
  History ddp_grads, ref_grads;
  const History ddp = train_ddp({}, Accumulate::None, DType::Float64, nullptr, &ddp_grads);
  const History ref = train_reference(Accumulate::None, DType::Float64, &ref_grads);
  expect_close(ddp, ref, 1e-5, "DDP vs one process");
  // The averaged gradients themselves (AdamW's step hides a gradient scale).
  expect_close(ddp_grads, ref_grads, 1e-5, "DDP gradients vs one process");
  // The replicas stay bitwise identical.
  for (const Tensor& p : ddp.back()) EXPECT_TRUE(testing::same_on_all_ranks(p));
  // And training moved the weights (the comparison is not vacuous).
  manual_seed(42);
  const nn::BertForMaskedLM initial(tiny_config());
  EXPECT_GT(relative_diff(ddp.back()[0], initial.parameters()[0]), 1e-3);
}

// LoRA (Note [LoRA], nn/lora.h) under DDP: only the adapters (and nothing
// frozen) are reduced and updated, the frozen weights are rank 0's on every
// rank, and the adapters follow the one-process run on the whole batch.
History train_lora(bool distributed, int* num_buckets = nullptr) {
  manual_seed(42 + (distributed ? 1000 * static_cast<uint64_t>(pg().rank()) : 0));
  nn::BertForMaskedLM model(tiny_config());
  model.to(DType::Float64);
  manual_seed(7);  // the same adapters' initialisation on every rank (DDP broadcasts rank 0's anyway)
  nn::LoraConfig c;
  c.r = 4;
  c.target_modules = {"query", "value"};
  nn::add_lora(model, c);
  std::optional<DistributedDataParallel> ddp;
  DDPOptions tiny;
  tiny.bucket_cap_bytes = 1;  // one parameter per bucket: the count is the reduced parameters'
  if (distributed) ddp.emplace(model, default_process_group(), tiny);
  if (num_buckets) *num_buckets = static_cast<int>(ddp->buckets().size());
  optim::AdamW opt(optim::param_groups_no_decay(model, 0.0), adamw_options());
  History h;
  for (int step = 0; step < kSteps; ++step) {
    loss_of(model, distributed ? shard(global_batch(step, 0)) : global_batch(step, 0)).backward();
    if (ddp) ddp->finish_gradient_sync();
    opt.step();
    opt.zero_grad();
    h.push_back(snapshot(model));
  }
  return h;
}

TEST(DDP, LoraAdaptersReduceOnlyWhatTrains) {
  int buckets = 0;
  const History ddp = train_lora(true, &buckets);
  const History ref = train_lora(false);
  EXPECT_EQ(buckets, 2 * 2 * 2);  // A and B of query and value in two layers
  expect_close(ddp, ref, 1e-5, "DDP with LoRA vs one process");
  for (const Tensor& p : ddp.back()) EXPECT_TRUE(testing::same_on_all_ranks(p));
}

// Note [Sharded optimizer state]: the same steps with the optimizer state
// sharded; `lamb` picks LAMB (per-parameter trust ratios) over AdamW.
History train_sharded(int stage, bool lamb, int64_t* owned = nullptr, size_t* state_entries = nullptr) {
  manual_seed(42 + 1000 * static_cast<uint64_t>(pg().rank()));
  nn::BertForMaskedLM model(tiny_config());
  DDPOptions o;
  o.shard_stage = stage;
  o.bucket_cap_bytes = 16 << 10;  // several buckets, so segments cross bucket edges
  DistributedDataParallel ddp(model, default_process_group(), o);
  std::unique_ptr<optim::Optimizer> opt;
  if (lamb) opt = std::make_unique<optim::LAMB>(model.parameters(), optim::LAMBOptions{});
  else opt = std::make_unique<optim::AdamW>(model.parameters(), adamw_options());
  opt->set_owned(ddp.owned_mask(model.parameters()));
  History h;
  for (int step = 0; step < kSteps; ++step) {
    loss_of(model, shard(global_batch(step, 0))).backward();
    ddp.finish_gradient_sync();
    if (stage == 2 && pg().size() > 1) {
      for (const Tensor& p : model.parameters())  // only what this rank owns keeps a gradient
        EXPECT_EQ(p.grad().defined(), ddp.owner(p) == pg().rank());
    }
    opt->step();
    ddp.gather_parameters();
    opt->zero_grad();
    h.push_back(snapshot(model));
  }
  if (owned) *owned = ddp.owned_numel();
  if (state_entries) *state_entries = opt->state_dict().size();
  return h;
}

TEST(DDP, ShardedOptimizerStateTrainsBitwiseAsUnsharded) {
  for (bool lamb : {false, true}) {
    SCOPED_TRACE(lamb ? "LAMB" : "AdamW");
    int64_t owned = 0;
    size_t entries1 = 0, entries0 = 0;
    const History plain = train_sharded(0, lamb, nullptr, &entries0);
    const History one = train_sharded(1, lamb, &owned, &entries1);
    const History two = train_sharded(2, lamb);
    EXPECT_TRUE(bitwise_equal(one, plain)) << "stage 1";
    // Over 2 ranks a reduce-scatter adds a + b as the all-reduce does; over more, MPI may order the sum otherwise.
    if (pg().size() <= 2) {
      EXPECT_TRUE(bitwise_equal(two, plain)) << "stage 2";
    } else {
      expect_close(two, plain, 1e-5, "stage 2");
    }
    for (const Tensor& p : two.back()) EXPECT_TRUE(testing::same_on_all_ranks(p));
    // About 1/world of the elements (whole tensors: within the largest one), and state only for those.
    const nn::BertForMaskedLM m(tiny_config());
    int64_t total = 0, largest = 0;
    for (const Tensor& p : m.parameters()) {
      total += p.numel();
      largest = std::max(largest, p.numel());
    }
    Tensor all = pg().all_gather(tensor(std::vector<double>{static_cast<double>(owned)}));
    EXPECT_EQ(sum(all).item<double>(), static_cast<double>(total));
    EXPECT_LE(std::abs(static_cast<double>(owned) - static_cast<double>(total) / pg().size()), largest);
    if (pg().size() > 1) {
      EXPECT_LT(entries1, entries0);
    }
  }
}

TEST(DDP, BucketSizeDoesNotChangeOneBit) {
  DDPOptions tiny, small, large;
  tiny.bucket_cap_bytes = 1;  // one parameter per bucket
  small.bucket_cap_bytes = 8 << 10;
  int n_tiny = 0, n_small = 0, n_large = 0;
  const History a = train_ddp(tiny, Accumulate::None, DType::Float32, &n_tiny);
  const History b = train_ddp(small, Accumulate::None, DType::Float32, &n_small);
  const History c = train_ddp(large, Accumulate::None, DType::Float32, &n_large);
  const nn::BertForMaskedLM m(tiny_config());
  EXPECT_EQ(n_tiny, static_cast<int>(m.parameters().size()));
  EXPECT_GT(n_small, 1);
  EXPECT_LT(n_small, n_tiny);
  EXPECT_EQ(n_large, 1);
  EXPECT_TRUE(bitwise_equal(a, c)) << "1-byte buckets vs 25 MiB";
  EXPECT_TRUE(bitwise_equal(b, c)) << "8 KiB buckets vs 25 MiB";
}

TEST(DDP, NoSyncAccumulationEqualsSyncingEveryMicroStep) {
  const History no_sync = train_ddp({}, Accumulate::NoSync, DType::Float64);
  const History every = train_ddp({}, Accumulate::SyncEveryMicroStep, DType::Float64);
  const History ref = train_reference(Accumulate::NoSync, DType::Float64);
  expect_close(no_sync, every, 1e-5, "no_sync vs sync every micro-step");
  expect_close(no_sync, ref, 1e-5, "no_sync vs one process");
}

TEST(DDP, BucketsTakeParametersInReverseOrderUpToTheCap) {
  manual_seed(1);
  nn::BertForMaskedLM model(tiny_config());
  DDPOptions o;
  o.bucket_cap_bytes = 4096;
  DistributedDataParallel ddp(model, default_process_group(), o);
  std::vector<std::string> order;
  for (const auto& b : ddp.buckets()) {
    EXPECT_TRUE(b.bytes <= o.bucket_cap_bytes || b.names.size() == 1) << b.bytes << " bytes";
    EXPECT_EQ(b.dtype, DType::Float32);
    order.insert(order.end(), b.names.begin(), b.names.end());
  }
  std::vector<std::string> want;
  for (auto& [name, t] : model.named_parameters()) want.insert(want.begin(), name);
  EXPECT_EQ(order, want);
  EXPECT_GT(ddp.buckets().size(), 5u);
  // The word embeddings (vocab x hidden x 4 = 3200 bytes) are registered first, so they travel last.
  EXPECT_EQ(order.back(), "bert.embeddings.word_embeddings.weight");
}

TEST(DDP, ConstructionBroadcastsRankZerosWeights) {
  manual_seed(7 + static_cast<uint64_t>(pg().rank()));
  nn::BertForMaskedLM model(tiny_config());
  DistributedDataParallel ddp(model, default_process_group());
  for (auto& [name, t] : model.named_parameters()) EXPECT_TRUE(testing::same_on_all_ranks(t)) << name;
  manual_seed(7);
  nn::BertForMaskedLM rank0(tiny_config());
  EXPECT_EQ(relative_diff(model.parameters()[3], rank0.parameters()[3]), 0.0);
}

// Two parameters; forward can leave `b` out.
class Pair : public nn::Module {
 public:
  Pair(int64_t n) {
    register_parameter("a", a, randn({n}));
    register_parameter("b", b, randn({n}));
  }
  Tensor loss(bool use_b, double scale) const {
    Tensor l = mul(sum(mul(a, a)), scale);
    return use_b ? add(l, sum(b)) : l;
  }
  Tensor a, b;
};

TEST(DDP, UnusedParameterIsAnErrorNamingIt) {
  manual_seed(3);
  Pair m(4);
  DistributedDataParallel ddp(m, default_process_group());
  m.loss(false, 1.0).backward();
  EXPECT_KILN_ERROR(ddp.finish_gradient_sync(), "1 parameter(s) got no gradient", "finish_gradient_sync(): b.",
                    "UnusedParameters::Zero");
  // The DDP state was reset: the next step works.
  m.zero_grad();
  m.loss(true, 1.0).backward();
  ddp.finish_gradient_sync();
  EXPECT_TRUE(m.b.grad().defined());
}

TEST(DDP, UnusedParameterReducedAsZeros) {
  manual_seed(3);
  Pair m(4);
  DDPOptions o;
  o.unused_parameters = UnusedParameters::Zero;
  DistributedDataParallel ddp(m, default_process_group(), o);
  // Rank r's loss is (r + 1) * sum(a^2): the averaged gradient of a is
  // 2 a * mean(r + 1) = a * (world + 1).
  m.loss(false, pg().rank() + 1.0).backward();
  ddp.finish_gradient_sync();
  ASSERT_TRUE(m.b.grad().defined());
  EXPECT_EQ(amax(abs(m.b.grad())).item<double>(), 0.0);
  const std::vector<double> a = m.a.to_vector<double>(), g = m.a.grad().to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(g[i], a[i] * (pg().size() + 1), 1e-5) << i;
}

TEST(DDP, SecondSyncedBackwardWithoutFinishIsAnError) {
  manual_seed(3);
  Pair m(4);
  DistributedDataParallel ddp(m, default_process_group());
  m.loss(true, 1.0).backward();
  EXPECT_KILN_ERROR(m.loss(true, 1.0).backward(), "received a second gradient", "finish_gradient_sync");
  EXPECT_KILN_ERROR((void)ddp.no_sync(), "waiting for finish_gradient_sync");
  ddp.finish_gradient_sync();  // completes the bucket the first backward started
  EXPECT_EQ(pg().failure(), "");
}

TEST(DDP, DifferentModulesOnTheRanksAreAnError) {
  if (pg().size() == 1) GTEST_SKIP() << "needs two ranks";
  Pair m(pg().rank() == 0 ? 4 : 5);
  EXPECT_KILN_ERROR(DistributedDataParallel(m, default_process_group()), "holds a different module");
}

// DDP over a one-rank NCCL group on a GPU (tools/gpu_check.sh; skipped
// without NCCL or a GPU): construction gathers the module's fingerprint on
// the GPU (the check runs for NCCL groups too, not only for CPU ones), and
// a synced backward leaves the gradients of a plain backward (one rank: the
// average of one).
TEST(CudaNccl, DdpOnAOneRankGroupChecksTheModelAndSyncs) {
  KILN_REQUIRE_GPU_PART(nccl_built() && cuda::is_available(), "needs NCCL and a GPU");
  const Device gpu(DeviceType::CUDA, 0);
  ProcessGroupPtr nccl = new_nccl_group(new_single_group(30), 0, 30);
  manual_seed(7);
  nn::BertForMaskedLM plain(tiny_config());
  plain.to(gpu);
  manual_seed(7);
  nn::BertForMaskedLM model(tiny_config());
  model.to(gpu);
  Batch b = global_batch(0, 0);
  b = {b.ids.slice(0, 0, 2).to(gpu), b.labels.slice(0, 0, 2).to(gpu)};
  loss_of(plain, b).backward();
  DistributedDataParallel ddp(model, nccl);
  loss_of(model, b).backward();
  ddp.finish_gradient_sync();
  const std::vector<Tensor> want = grads_of(plain), got = grads_of(model);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i].to(kCPU).to_vector<double>(), want[i].to(kCPU).to_vector<double>()) << "parameter " << i;
  nccl->shutdown();
}

// ---- run by tests/dist.cmake only (KILN_DIST_TIMEOUT=10, two ranks) ---------

// The last rank stops participating at step 2 (sleeps or exits); the others
// must get a kiln::Error naming the collective within the timeout and end the
// job with a non-zero exit, as `kiln pretrain` does on an error.
void train_until_a_rank_dies(bool sleep) {
  ASSERT_GE(pg().size(), 2);
  manual_seed(42);
  nn::BertForMaskedLM model(tiny_config());
  DistributedDataParallel ddp(model, default_process_group());
  optim::AdamW opt(model.parameters(), adamw_options());
  for (int step = 0; step < kSteps; ++step) {
    if (step == 2 && pg().rank() == pg().size() - 1) {
      std::fprintf(stderr, "dead-rank test: rank %d stops participating (%s)\n", pg().rank(),
                   sleep ? "sleeps" : "exits");
      std::fflush(stderr);
      if (!sleep) std::_Exit(0);
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      loss_of(model, shard(global_batch(step, 0))).backward();
      ddp.finish_gradient_sync();
    } catch (const Error& e) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "dead-rank test: rank %d failed after %.1f s at step %d: %s\n", pg().rank(), waited, step,
                   e.what());
      const bool in_time = waited >= 0.9 * pg().timeout_seconds() && waited <= pg().timeout_seconds() + 5;
      abort_process_group(in_time ? 3 : 4);  // non-zero either way; 4 = not within the timeout
    }
    opt.step();
    opt.zero_grad();
  }
  ADD_FAILURE() << "rank " << pg().rank() << " finished although a peer stopped participating";
}

TEST(DeadRank, DISABLED_SleepingRank) { train_until_a_rank_dies(true); }
TEST(DeadRank, DISABLED_ExitingRank) { train_until_a_rank_dies(false); }

}  // namespace
}  // namespace kiln::dist

// ---- the training loop under data parallel (train/trainer.h) ---------------

#include <signal.h>

#include <filesystem>
#include <sstream>

#include "nn/layers.h"
#include "train/trainer.h"

namespace kiln::dist {
namespace {

using testing::pg;

// A regression task whose rank r holds 3 + 2r batches per epoch (uneven
// shards), optionally raising `signal` in its own process during step
// `signal_step` (on rank `signal_rank`).
class UnevenTask final : public train::TrainTask {
 public:
  explicit UnevenTask(int rank, int signal = 0, int64_t signal_step = 0, int signal_rank = 0)
      : rank_(rank), signal_(signal), signal_step_(signal_step), signal_rank_(signal_rank) {
    manual_seed(3);
    model_ = std::make_shared<nn::Linear>(4, 1);
  }
  nn::Module& model() override { return *model_; }
  const BertConfig& config() const override { return config_; }
  std::string kind() const override { return "uneven"; }
  size_t batches_per_epoch() const override { return static_cast<size_t>(3 + 2 * rank_); }
  data::LoaderState loader_state() const override { return state_; }
  void load_loader_state(const data::LoaderState& s) override { state_ = s; }
  void start_epoch(int64_t epoch) override { state_ = {epoch, 0}; }
  std::optional<train::MicroBatch> forward_next() override {
    if (state_.batches_consumed >= static_cast<int64_t>(batches_per_epoch())) return std::nullopt;
    ++forwards_;
    if (signal_ != 0 && rank_ == signal_rank_ && forwards_ == signal_step_) ::raise(signal_);
    max_batch_ = std::max(max_batch_, state_.batches_consumed);
    Generator gen(static_cast<uint64_t>(100 * state_.epoch + 10 * state_.batches_consumed + rank_));
    const Tensor x = randn({2, 4}, {}, &gen), y = randn({2, 1}, {}, &gen);
    ++state_.batches_consumed;
    const Tensor d = sub(model_->forward(x), y);
    train::MicroBatch mb;
    mb.loss = mean(mul(d, d));
    mb.tokens = 2;
    return mb;
  }
  std::map<std::string, double> evaluate() override { return {}; }
  double loader_wait_seconds() const override { return 0; }
  int64_t max_batch_index() const { return max_batch_; }

 private:
  int rank_, signal_;
  int64_t signal_step_;
  int signal_rank_;
  BertConfig config_;
  std::shared_ptr<nn::Linear> model_;
  data::LoaderState state_;
  int64_t forwards_ = 0, max_batch_ = -1;
};

train::TrainingArguments uneven_args(const std::string& name) {
  const std::string dir =
      std::string(KILN_BINARY_DIR) + "/ddp_trainer_" + name + "_np" + std::to_string(pg().size());
  if (pg().rank() == 0) std::filesystem::remove_all(dir);
  pg().barrier();
  train::TrainingArguments a;
  a.output_dir = dir;
  a.optimizer = "sgd";
  a.lr = 0.05;
  a.epochs = 2;
  a.save_steps = 0;
  a.logging_steps = 1;
  a.workers = 0;
  a.rank = pg().rank();
  a.world_size = pg().size();
  return a;
}

// Note [Agreed step counts]: ranks with 3 and 5 batches per epoch all run
// 2 epochs of 3 batches (6 steps) and end with the same weights; before the
// ranks agreed, rank 1 ran 10 steps and waited for rank 0 in its 7th
// gradient all-reduce until the collective timeout.
TEST(Trainer, AgreesOnStepsWithUnevenShards) {
  const train::TrainingArguments a = uneven_args("uneven");
  UnevenTask task(pg().rank());
  std::ostringstream log;
  const train::TrainResult r = train::train(a, task, log, default_process_group());
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.total_steps, 6);
  EXPECT_EQ(r.step, 6);
  EXPECT_EQ(task.max_batch_index(), 2);  // no rank read past the agreed 3 batches of an epoch
  EXPECT_TRUE(testing::same_on_all_ranks(task.model().named_parameters()[0].second));
  if (pg().size() > 1 && pg().rank() == 0) {
    EXPECT_NE(log.str().find("every rank runs 3 per epoch"), std::string::npos) << log.str();
  }
}

// Note [Preemption]: SIGTERM raised in the last rank's process during step 2
// stops every rank after step 2, with one checkpoint of that step.
TEST(Trainer, ASignalOnOneRankStopsEveryRankAtTheSameStep) {
  const train::TrainingArguments a = uneven_args("signal");
  UnevenTask task(pg().rank(), SIGTERM, /*signal_step=*/2, /*signal_rank=*/pg().size() - 1);
  std::ostringstream log;
  const train::TrainResult r = train::train(a, task, log, default_process_group());
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(r.step, 2);
  if (pg().rank() == 0) {
    EXPECT_TRUE(std::filesystem::exists(a.output_dir + "/checkpoint-2")) << log.str();
    EXPECT_NE(log.str().find("stopped by SIGTERM after step 2/6"), std::string::npos) << log.str();
  }
  EXPECT_TRUE(testing::same_on_all_ranks(task.model().named_parameters()[0].second));
}

}  // namespace
}  // namespace kiln::dist

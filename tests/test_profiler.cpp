// The profiler (Note [Profiler], core/profiler.h) and kiln::memory_summary():
// a traced training step of a tiny BERT is a valid Chrome trace whose spans
// nest per thread and name every op that ran, the backward nodes and the
// optimizer step; the table's self times add up to the step; the memory
// counters are the allocator's numbers; nothing is recorded when off.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "cuda_test_util.h"
#include "kiln.h"
#include "nn/models/bert.h"
#include "test_util.h"

namespace kiln {
namespace {

using profiler::Category;
using profiler::Event;
using profiler::Profile;
using profiler::RecordScope;

// bert-tiny's layers (hidden 128, 2 layers) over a 50-word vocabulary.
BertConfig tiny_config() {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = 50;
  c.max_position_embeddings = 24;
  return c;
}

// The names of the ops run on this thread (Note [Op observers]): what the
// trace must hold, gathered independently of the profiler.
class OpNames final : public OpObserver {
 public:
  OpNames() : prev_(set_thread_op_observer(this)) {}
  ~OpNames() override { set_thread_op_observer(prev_); }
  void op_finished(const OpRecord& r) override { names.insert(r.name); }
  std::set<std::string> names;

 private:
  OpObserver* prev_;
};

const Event* find_event(const Profile& p, const std::string& name) {
  for (const Event& e : p.events())
    if (e.name == name) return &e;
  return nullptr;
}

// One profiled step: forward, backward, AdamW, inside a "step" span.
struct ProfiledStep {
  std::set<std::string> ops;
  memory::AllocatorStats at_stop;
};

// The profile starts right before the step (set-up is not recorded), so
// every span on thread 0 lies in the step's tree.
ProfiledStep profiled_step(std::optional<Profile>& prof) {
  manual_seed(3);
  nn::BertForMaskedLM model(tiny_config());
  model.train();
  optim::AdamW opt(optim::param_groups_no_decay(model, 0.01), optim::AdamWOptions{.lr = 1e-3});
  Tensor ids = randint(1, 50, {2, 10});
  Tensor labels = to_dtype(where(lt(rand({2, 10}), 0.3), ids, -100.0), DType::Int64);
  ProfiledStep r;
  {
    OpNames names;
    prof.emplace();
    {
      RecordScope step("step", Category::Step);
      nn::MaskedLMOutput out = model.forward(ids, Tensor(), Tensor(), labels);
      opt.zero_grad();
      out.loss.backward();
      opt.step();
    }
    prof->stop();
    r.at_stop = cpu_memory_stats();
    r.ops = names.names;
  }
  return r;
}

TEST(Profiler, RecordsNothingWhenOff) {
  EXPECT_FALSE(profiler::is_active());
  {
    RecordScope scope("before", Category::User);  // no profile: nothing
    Tensor t = ones({3, 3}) * 2.0;
  }
  Profile prof;
  EXPECT_TRUE(profiler::is_active());
  prof.stop();
  EXPECT_FALSE(profiler::is_active());
  EXPECT_TRUE(prof.events().empty());
  {
    RecordScope scope("after", Category::User);  // stopped: nothing more
  }
  EXPECT_TRUE(prof.events().empty());
  // A span begun while profiling that ends after stop() is dropped; the next
  // profile does not see it.
  std::optional<Profile> first(std::in_place);
  std::optional<RecordScope> straddling(std::in_place, "straddling", Category::User);
  first->stop();
  Profile second;
  straddling.reset();
  second.stop();
  ASSERT_NE(find_event(*first, "straddling"), nullptr);
  EXPECT_TRUE(find_event(*first, "straddling")->unfinished);
  EXPECT_EQ(find_event(second, "straddling"), nullptr);
}

TEST(Profiler, ProfilesDoNotNest) {
  Profile a;
  EXPECT_THROW({ Profile b; }, Error);
  EXPECT_TRUE(profiler::is_active()) << "the refused profile must not stop the running one";
  a.stop();
  Profile c;  // fine once the first has stopped
  {
    RecordScope s("in c", Category::User);
  }
  c.stop();
  EXPECT_NE(find_event(c, "in c"), nullptr);
}

TEST(Profiler, OpHooksRecordShapesAndNesting) {
  OpRecord rec;  // hand-built records (the inputs made before profiling: ones() is an op too)
  rec.name = "matmul";
  rec.inputs = {ones({2, 3}), ones({3, 4}, TensorOptions(DType::Float64))};
  const Tensor five = ones({5});
  Profile prof;
  {
    RecordScope outer("outer", Category::User);
    const uint64_t token = profiler::detail::op_begin(rec);
    ASSERT_NE(token, 0u);
    {
      OpRecord inner;
      inner.name = "mul";
      inner.depth = 1;
      inner.inputs = {five};
      profiler::detail::op_end(inner, profiler::detail::op_begin(inner));
    }
    profiler::detail::op_end(rec, token);
  }
  prof.stop();
  ASSERT_EQ(prof.events().size(), 3u);
  const Event* outer = find_event(prof, "outer");
  const Event* matmul = find_event(prof, "matmul");
  const Event* mul = find_event(prof, "mul");
  ASSERT_TRUE(outer && matmul && mul);
  EXPECT_EQ(matmul->category, Category::Op);
  EXPECT_EQ(matmul->shapes, "[2, 3], [3, 4]");
  EXPECT_EQ(matmul->dtypes, "float32, float64");
  EXPECT_EQ(matmul->device, "cpu");
  EXPECT_EQ(mul->op_depth, 1);
  EXPECT_EQ(&prof.events()[static_cast<size_t>(mul->parent)], matmul);
  EXPECT_EQ(&prof.events()[static_cast<size_t>(matmul->parent)], outer);
  EXPECT_EQ(outer->parent, -1);
  EXPECT_LE(outer->begin_ns, matmul->begin_ns);
  EXPECT_LE(mul->end_ns, matmul->end_ns);
  EXPECT_LE(matmul->end_ns, outer->end_ns);
  EXPECT_EQ(outer->thread, 0);
}

// Spans of several threads at once: each thread's own track, each nested in
// its thread's enclosing spans only, none lost.
TEST(Profiler, ThreadsRecordTheirOwnNestedSpans) {
  constexpr int kThreads = 3, kRounds = 50;
  const Tensor x = ones({8, 8});
  Profile prof;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&x] {
      for (int i = 0; i < kRounds; ++i) {
        RecordScope outer("worker round", Category::User);
        Tensor y = matmul(x, x);  // an op span inside it
      }
    });
  for (std::thread& t : threads) t.join();
  {
    RecordScope mine("main", Category::User);
  }
  prof.stop();
  std::map<int, int> rounds;  // thread -> "worker round" spans
  for (const Event& e : prof.events()) {
    if (e.name == "worker round") {
      ++rounds[e.thread];
      EXPECT_EQ(e.parent, -1);
    }
    if (e.name == "matmul") {
      ASSERT_GE(e.parent, 0);
      const Event& p = prof.events()[static_cast<size_t>(e.parent)];
      EXPECT_EQ(p.name, "worker round");
      EXPECT_EQ(p.thread, e.thread) << "a span's parent is on its own thread";
      EXPECT_LE(p.begin_ns, e.begin_ns);
      EXPECT_LE(e.end_ns, p.end_ns);
    }
    if (e.name == "main") {
      EXPECT_EQ(e.thread, 0) << "thread 0 is the one that started the profile";
    }
  }
  ASSERT_EQ(rounds.size(), static_cast<size_t>(kThreads));
  for (const auto& [thread, n] : rounds) {
    EXPECT_NE(thread, 0);
    EXPECT_EQ(n, kRounds);
  }
}

TEST(Profiler, TracedTrainingStepIsAValidNestedChromeTrace) {
  std::optional<Profile> profile;
  const ProfiledStep step = profiled_step(profile);
  const Profile& prof = *profile;
  ASSERT_GT(step.ops.size(), 20u) << "the ops report themselves (Note [Op observers])";
  const auto path = testing::fresh_dir("profiler", "trace") / "trace.json";
  std::filesystem::create_directories(path.parent_path());
  prof.export_chrome_trace(path.string());
  const nlohmann::json trace = nlohmann::json::parse(testing::read_bytes(path));  // throws if invalid
  ASSERT_TRUE(trace.contains("traceEvents"));

  // Per thread, in file order (the writer's order): each span either lies
  // inside the innermost open one or starts after it ended.
  std::map<int, std::vector<std::pair<double, double>>> open;  // tid -> stack of (begin, end)
  std::set<std::string> names, thread_names;
  std::map<std::string, std::string> category_of;
  int steps = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "M") {
      if (e.at("name") == "thread_name") thread_names.insert(e.at("args").at("name"));
      continue;
    }
    if (ph != "X") continue;
    const double b = e.at("ts"), d = e.at("dur");
    ASSERT_GE(d, 0.0);
    auto& stack = open[e.at("tid").get<int>()];
    while (!stack.empty() && b >= stack.back().second) stack.pop_back();
    if (!stack.empty()) {
      EXPECT_GE(b, stack.back().first);
      EXPECT_LE(b + d, stack.back().second + 1e-3) << e.at("name") << " overlaps its enclosing span";
    }
    stack.push_back({b, b + d});
    names.insert(e.at("name"));
    category_of[e.at("name")] = e.at("cat");
    if (e.at("name") == "step") ++steps;
  }
  EXPECT_EQ(steps, 1);
  EXPECT_TRUE(thread_names.count("profiled thread"));
  for (const std::string& op : step.ops) {
    EXPECT_TRUE(names.count(op)) << "op " << op << " ran but is not in the trace";
    EXPECT_EQ(category_of[op], "op");
  }
  // Backward nodes and the optimizer step, whatever the ops report.
  int backward = 0;
  for (const auto& [name, cat] : category_of) backward += cat == "backward";
  EXPECT_GT(backward, 5) << "a BERT backward runs many nodes";
  EXPECT_TRUE(names.count("embedding_backward"));
  EXPECT_EQ(category_of["AdamW.step"], "optimizer");

  // The table: self times on the stepping thread add up to the step's
  // duration (exact in integer ns by construction; tolerance 0.1% or 1 us).
  const int64_t step_ns = prof.step_ns(0);
  ASSERT_GT(step_ns, 0);
  EXPECT_EQ(step_ns, find_event(prof, "step")->duration_ns());
  int64_t self_sum = 0;
  for (const profiler::KeyAverage& r : prof.key_average_rows({.thread = 0})) {
    EXPECT_GE(r.self_ns, 0) << r.name;
    EXPECT_LE(r.self_ns, r.total_ns) << r.name;
    self_sum += r.self_ns;
  }
  EXPECT_NEAR(static_cast<double>(self_sum), static_cast<double>(step_ns),
              std::max(1000.0, 1e-3 * static_cast<double>(step_ns)));
  const std::vector<profiler::KeyAverage> rows = prof.key_average_rows();
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].self_ns, rows[i].self_ns) << "sorted by self time";
  const std::string table = prof.key_averages();
  EXPECT_NE(table.find("Self ms"), std::string::npos);
  EXPECT_NE(table.find("AdamW.step"), std::string::npos);

  // Memory counters: the last CPU sample is the allocator's state at stop().
  const profiler::MemorySample* last = nullptr;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.at("ph") == "C") {
      EXPECT_EQ(e.at("name"), "memory cpu");
    }
  }
  for (const profiler::MemorySample& m : prof.memory_samples())
    if (m.device == "cpu") last = &m;
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->allocated_bytes, step.at_stop.allocated_bytes);
  EXPECT_EQ(last->reserved_bytes, step.at_stop.reserved_bytes);
  std::filesystem::remove_all(path.parent_path());
}

// Note [Profiler]: profiling reads, never changes, what is computed: the same
// seeded step (dropout on) gives bitwise the same loss and weights.
TEST(Profiler, ProfilingChangesNoValue) {
  auto run = [](bool profile) {
    manual_seed(11);
    nn::BertForMaskedLM model(tiny_config());
    model.train();
    optim::AdamW opt(optim::param_groups_no_decay(model, 0.01), optim::AdamWOptions{.lr = 1e-3});
    Tensor ids = randint(1, 50, {2, 10});
    std::optional<Profile> prof;
    if (profile) prof.emplace();
    nn::MaskedLMOutput out = model.forward(ids, Tensor(), Tensor(), ids);
    out.loss.backward();
    opt.step();
    if (prof) {
      prof->stop();
      EXPECT_GT(prof->events().size(), 100u);
    }
    std::vector<std::vector<float>> values{{out.loss.item<float>()}};
    for (const Tensor& p : model.parameters()) values.push_back(p.contiguous().to_vector<float>());
    return values;
  };
  EXPECT_EQ(run(false), run(true));
}

// The phases outside ops: an all-reduce (its start and its wait) and a
// checkpoint save are spans of their categories.
TEST(Profiler, AllReduceAndCheckpointSaveAreSpans) {
  const dist::ProcessGroupPtr group = dist::new_single_group(10);
  const Tensor t = ones({4});
  nn::Linear layer(2, 2);
  train::CheckpointData data;
  data.model = layer.state_dict();
  data.trainer_state = {{"step", 1}};
  const auto dir = testing::fresh_dir("profiler", "checkpoint");
  Profile prof;
  group->all_reduce(t);
  train::save_checkpoint(dir.string(), 1, data, 0);
  prof.stop();
  const Event* reduce = find_event(prof, "all_reduce");
  const Event* wait = find_event(prof, "Work::wait");
  const Event* save = find_event(prof, "save_checkpoint");
  ASSERT_TRUE(reduce && wait && save);
  EXPECT_EQ(reduce->category, Category::AllReduce);
  EXPECT_EQ(wait->category, Category::AllReduce);
  EXPECT_EQ(save->category, Category::Checkpoint);
  EXPECT_LE(reduce->end_ns, save->begin_ns);
  std::filesystem::remove_all(dir);
}

TEST(Profiler, MemoryCountersFollowTheAllocator) {
  Profile prof;
  memory::AllocatorStats inside;
  Tensor keep;
  {
    RecordScope scope("alloc", Category::User);
    keep = empty({1 << 19});  // 2 MiB: a large-pool block
    inside = cpu_memory_stats();
  }
  keep = Tensor();
  const memory::AllocatorStats after = cpu_memory_stats();
  prof.stop();
  const Event* e = find_event(prof, "alloc");
  ASSERT_NE(e, nullptr);
  // The counter in force at the scope's end is the allocator's state then.
  const profiler::MemorySample* at_end = nullptr;
  for (const profiler::MemorySample& m : prof.memory_samples())
    if (m.device == "cpu" && m.ts_ns <= e->end_ns) at_end = &m;
  ASSERT_NE(at_end, nullptr);
  EXPECT_EQ(at_end->allocated_bytes, inside.allocated_bytes);
  EXPECT_EQ(at_end->reserved_bytes, inside.reserved_bytes);
  EXPECT_EQ(prof.memory_samples().back().allocated_bytes, after.allocated_bytes);
  EXPECT_GE(inside.allocated_bytes, prof.memory_samples().front().allocated_bytes + (std::size_t{2} << 20));
}

TEST(Profiler, SaveNeverReplacesAFile) {
  Profile prof;
  {
    RecordScope s("x", Category::User);
  }
  prof.stop();
  const auto dir = testing::fresh_dir("profiler", "save");
  const std::string first = profiler::save_profile(prof, dir.string(), "trace");
  const std::string second = profiler::save_profile(prof, dir.string(), "trace");
  EXPECT_EQ(first, (dir / "trace.json").string());
  EXPECT_EQ(second, (dir / "trace-2.json").string());
  EXPECT_TRUE(std::filesystem::exists(dir / "trace.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "trace-2.txt"));
  EXPECT_NE(testing::read_bytes(dir / "trace.txt").find("Self ms"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Profiler, ProfileStepsFlag) {
  EXPECT_EQ(train::parse_profile_steps("2:3"), std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(train::parse_profile_steps("5:5"), std::make_pair(int64_t{5}, int64_t{5}));
  for (const char* bad : {"3:2", "0:1", "2", "a:b", "-1:2", ":3", "2:", "1:2:3"})
    EXPECT_THROW(train::parse_profile_steps(bad), Error) << bad;
  try {
    train::parse_profile_steps("3:2");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-steps '3:2': A is after B"), std::string::npos) << e.what();
  }
}

TEST(CudaProfiler, OpsGetDeviceTime) {  // Cuda*: run by tools/gpu_check.sh
  KILN_REQUIRE_CUDA();
  Tensor a = randn({256, 256}).to(Device::parse("cuda")), b = randn({256, 256}).to(Device::parse("cuda"));
  Profile prof;
  Tensor c = matmul(a, b);  // its OpScope records the CUDA events
  prof.stop();
  const Event* e = find_event(prof, "matmul");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->device, "cuda:0");
  EXPECT_GE(e->device_ms, 0.0);
  bool cuda_counter = false;
  for (const profiler::MemorySample& m : prof.memory_samples()) cuda_counter |= m.device == "cuda:0";
  EXPECT_TRUE(cuda_counter);
}

TEST(MemorySummary, PoolsAddUpAndEveryAllocatorIsListed) {
  Tensor small = empty({1000});       // small pool
  Tensor large = empty({1 << 20});    // 4 MiB: large pool
  const memory::AllocatorStats s = cpu_memory_stats();
  EXPECT_EQ(s.small_pool_allocated_bytes + s.large_pool_allocated_bytes, s.allocated_bytes);
  EXPECT_EQ(s.small_pool_reserved_bytes + s.large_pool_reserved_bytes, s.reserved_bytes);
  EXPECT_GT(s.small_pool_allocated_bytes, 0u);
  EXPECT_GE(s.large_pool_allocated_bytes, std::size_t{4} << 20);
  const std::string text = memory_summary();
  EXPECT_NE(text.find("CPU host allocator"), std::string::npos);
  EXPECT_NE(text.find("from large pool"), std::string::npos);
  EXPECT_NE(text.find("OOM retries"), std::string::npos);
  EXPECT_NE(text.find("Fragmentation"), std::string::npos);
  if (cuda::is_available()) {
    EXPECT_NE(text.find("cuda:0"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln

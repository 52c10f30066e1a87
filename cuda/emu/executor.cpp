// Emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): runs a
// kernel's grid. Blocks run one after another on the draining host thread;
// each CUDA thread of a block is a fiber on its own stack, switched with
// Boost.Context's fcontext. A thread runs until it ends or blocks at a
// barrier or a shuffle; the block's scheduler then runs the next runnable
// thread, in index order or (KILN_EMU_SCHEDULE=shuffle:SEED) a seeded random
// order. A barrier opens when every thread of the block waits at it; a
// shuffle completes when every lane its mask names waits at it. Anything
// else (a thread that left, another barrier, nothing runnable) is a fault.
#include <boost/context/detail/fcontext.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/emu/emu.h"
#include "cuda/emu/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define KILN_EMU_ASAN 1
#else
#define KILN_EMU_ASAN 0
#endif

namespace kiln::emu {
namespace {

namespace ctx = boost::context::detail;

#if KILN_EMU_ASAN
constexpr size_t kStackBytes = size_t{256} << 10;  // ASan's frames are larger
#else
constexpr size_t kStackBytes = size_t{64} << 10;
#endif

enum class State : uint8_t { Runnable, AtBarrier, AtShuffle, Done };

struct Fiber {
  ThreadIndex index{};
  unsigned linear = 0;
  State state = State::Runnable;
  ctx::fcontext_t context = nullptr;
  const char* site = nullptr;  // barrier or shuffle waited at
  // shuffle operands and result
  int op = 0, arg = 0, width = 32;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  void* fake_stack = nullptr;
};

// A stack per thread slot, kept for the host thread's later blocks. Each has
// a guard page below it, so an overflow is a crash, not a corruption.
struct StackPool {
  std::vector<char*> stacks;
  ~StackPool() {
    for (char* s : stacks) munmap(s, kStackBytes + page());
  }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  char* get(size_t i) {
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, kStackBytes + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "emulated CUDA: cannot map a fiber stack\n");
        std::abort();
      }
      mprotect(p, page(), PROT_NONE);
      stacks.push_back(static_cast<char*>(p));
    }
    return stacks[i];
  }
  char* bottom(size_t i) { return get(i) + page(); }
};

struct Block {
  const LaunchConfig* cfg = nullptr;
  const std::function<void()>* body = nullptr;
  BlockIndex index{};
  std::vector<Fiber> fibers;
  std::string fault;
  const char* barrier_site = nullptr;
  unsigned at_barrier = 0, done = 0;
};

thread_local Block* t_block = nullptr;
thread_local Fiber* t_fiber = nullptr;
thread_local ctx::fcontext_t t_scheduler = nullptr;
thread_local StackPool t_stacks;
#if KILN_EMU_ASAN
thread_local const void* t_sched_bottom = nullptr;
thread_local size_t t_sched_size = 0;
#endif

std::string where(const Fiber& f) {
  const uint3 t = f.index.thread_idx, b = t_block->index.block_idx;
  return "thread (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) + ") of block (" +
         std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

void set_fault(const std::string& what) {
  if (t_block->fault.empty()) t_block->fault = what;
}

// From a fiber back to its block's scheduler; returns when resumed.
void yield_to_scheduler(bool final) {
  Fiber* self = t_fiber;
  (void)final;
#if KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &self->fake_stack, t_sched_bottom, t_sched_size);
#endif
  ctx::transfer_t t = ctx::jump_fcontext(t_scheduler, nullptr);
  t_scheduler = t.fctx;
#if KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(self->fake_stack, &t_sched_bottom, &t_sched_size);
#endif
  t_fiber = self;
}

void try_open_barrier();

void fiber_main(ctx::transfer_t t) {
  t_scheduler = t.fctx;
  Fiber* self = static_cast<Fiber*>(t.data);
  t_fiber = self;
#if KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &t_sched_bottom, &t_sched_size);
#endif
  (*t_block->body)();
  self->state = State::Done;
  ++t_block->done;
  try_open_barrier();  // the others may wait at one this thread never reaches
  yield_to_scheduler(true);
  std::abort();  // a finished fiber is never resumed
}

void resume(Fiber& f, size_t slot) {
  t_fiber = &f;
  void* sched_fake = nullptr;
#if KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(&sched_fake, t_stacks.bottom(slot), kStackBytes);
#else
  (void)slot;
#endif
  ctx::transfer_t t = ctx::jump_fcontext(f.context, &f);
  f.context = t.fctx;
#if KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
  (void)sched_fake;
  t_fiber = nullptr;
}

const char* state_name(State s) {
  switch (s) {
    case State::Runnable: return "runnable";
    case State::AtBarrier: return "at __syncthreads";
    case State::AtShuffle: return "at a shuffle";
    case State::Done: return "exited";
  }
  return "?";
}

// Opens the barrier if every thread waits at it; a thread that left while
// others wait is a fault (CUDA: a barrier in conditional code must be reached
// by the whole block).
void try_open_barrier() {
  Block& b = *t_block;
  if (b.at_barrier == 0 || b.at_barrier + b.done < b.fibers.size()) return;
  if (b.done > 0) {
    for (const Fiber& f : b.fibers)
      if (f.state == State::Done) {
        set_fault("__syncthreads at " + std::string(b.barrier_site) + " is waited at by " +
                  std::to_string(b.at_barrier) + " of " + std::to_string(b.fibers.size()) + " threads, but " +
                  where(f) + " has exited");
        return;
      }
  }
  for (Fiber& f : b.fibers)
    if (f.state == State::AtBarrier) f.state = State::Runnable;
  b.at_barrier = 0;
  b.barrier_site = nullptr;
}

// Completes a shuffle once every lane the mask names waits at it.
void try_complete_shuffle(unsigned warp_base) {
  Block& b = *t_block;
  const size_t n = b.fibers.size();
  Fiber& first = *t_fiber;
  const unsigned mask = first.mask;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    const size_t i = warp_base + lane;
    if (i >= n) {
      set_fault(std::string("shuffle at ") + first.site + " names lane " + std::to_string(lane) + " in mask 0x" +
                [&] { char s[16]; std::snprintf(s, sizeof s, "%08x", mask); return std::string(s); }() +
                ", which does not exist (block of " + std::to_string(n) + " threads)");
      return;
    }
    const Fiber& f = b.fibers[i];
    if (f.state == State::Done) {
      set_fault(std::string("shuffle at ") + first.site + " waits for " + where(f) + ", which has exited");
      return;
    }
    if (f.state != State::AtShuffle) return;  // not there yet
    if (f.site != first.site || f.mask != mask || f.op != first.op || f.width != first.width) {
      set_fault(std::string("shuffle at ") + first.site + " and shuffle at " + f.site + " (" + where(f) +
                ") meet in one warp with different masks, kinds or widths");
      return;
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1u)) continue;
    Fiber& f = b.fibers[warp_base + lane];
    const int w = f.width;
    const int seg = static_cast<int>(lane) / w * w, in_seg = static_cast<int>(lane) % w;
    int src = static_cast<int>(lane);
    switch (f.op) {
      case 0: src = in_seg + f.arg < w ? static_cast<int>(lane) + f.arg : static_cast<int>(lane); break;
      case 1: src = in_seg - f.arg >= 0 ? static_cast<int>(lane) - f.arg : static_cast<int>(lane); break;
      case 2: src = (static_cast<int>(lane) ^ f.arg) < seg + w ? static_cast<int>(lane) ^ f.arg : static_cast<int>(lane); break;
      default: src = seg + ((f.arg % w) + w) % w; break;
    }
    if (!(mask >> src & 1u)) {
      set_fault(std::string("shuffle at ") + f.site + ": " + where(f) + " reads lane " + std::to_string(src) +
                ", which is not in the mask");
      return;
    }
    f.result = b.fibers[warp_base + static_cast<unsigned>(src)].value;
  }
  for (unsigned lane = 0; lane < 32; ++lane)
    if (mask >> lane & 1u) b.fibers[warp_base + lane].state = State::Runnable;
}

uint64_t schedule_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("KILN_EMU_SCHEDULE");
    if (!s || std::strncmp(s, "shuffle", 7) != 0) return uint64_t{0};
    return s[7] == ':' ? static_cast<uint64_t>(std::strtoull(s + 8, nullptr, 10)) | 1u : uint64_t{1};
  }();
  return seed;
}

std::string run_block(Block& b, uint64_t launch_no) {
  const dim3 bd = b.index.block_dim;
  const size_t n = static_cast<size_t>(bd.x) * bd.y * bd.z;
  b.fibers.assign(n, Fiber{});
  b.done = b.at_barrier = 0;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.linear = static_cast<unsigned>(i);
    f.index.thread_idx = uint3{static_cast<unsigned>(i % bd.x), static_cast<unsigned>(i / bd.x % bd.y),
                               static_cast<unsigned>(i / (static_cast<size_t>(bd.x) * bd.y))};
    f.context = ctx::make_fcontext(t_stacks.bottom(i) + kStackBytes, kStackBytes, fiber_main);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  const uint64_t seed = schedule_seed();
  std::mt19937_64 rng(seed ^ (launch_no * 0x9e3779b97f4a7c15ull) ^ b.index.block_idx.x);
  while (b.fault.empty() && b.done < n) {
    if (seed) std::shuffle(order.begin(), order.end(), rng);
    bool ran = false;
    for (size_t i : order) {
      if (b.fibers[i].state != State::Runnable) continue;
      resume(b.fibers[i], i);
      ran = true;
      if (!b.fault.empty()) break;
    }
    if (!ran && b.fault.empty()) {
      // A shuffle that waits for a lane which has left names it.
      for (Fiber& f : b.fibers)
        if (f.state == State::AtShuffle && b.fault.empty()) {
          t_fiber = &f;
          try_complete_shuffle(f.linear - f.linear % 32);
          t_fiber = nullptr;
        }
      if (!b.fault.empty()) break;
      std::string s = "deadlock: no thread can run (";
      for (size_t i = 0; i < n && i < 64; ++i) {
        const Fiber& f = b.fibers[i];
        if (f.state == State::Done) continue;
        s += where(f) + " " + state_name(f.state) + (f.site ? std::string(" ") + f.site : std::string()) + "; ";
      }
      set_fault(s + ")");
    }
  }
  return b.fault;
}

}  // namespace

const ThreadIndex& current_thread() {
  if (!t_fiber) {
    std::fprintf(stderr, "emulated CUDA: threadIdx read outside a kernel\n");
    std::abort();
  }
  return t_fiber->index;
}

const BlockIndex& current_block() {
  if (!t_block) {
    std::fprintf(stderr, "emulated CUDA: blockIdx/blockDim/gridDim read outside a kernel\n");
    std::abort();
  }
  return t_block->index;
}

void sync_threads(const char* site) {
  Block& b = *t_block;
  Fiber& self = *t_fiber;
  if (b.barrier_site && b.barrier_site != site && std::strcmp(b.barrier_site, site) != 0) {
    set_fault("threads of one block wait at two different barriers: " + std::string(b.barrier_site) + " and " +
              site + " (" + where(self) + ")");
  } else {
    b.barrier_site = site;
    self.state = State::AtBarrier;
    self.site = site;
    ++b.at_barrier;
    try_open_barrier();
  }
  while (self.state != State::Runnable || !b.fault.empty()) yield_to_scheduler(false);
  self.site = nullptr;
}

uint64_t warp_shuffle(int op, unsigned mask, uint64_t value, int arg, int width, const char* site) {
  Block& b = *t_block;
  Fiber& self = *t_fiber;
  const unsigned lane = self.linear % 32, warp_base = self.linear - lane;
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    set_fault(std::string("shuffle at ") + site + ": width " + std::to_string(width) + " is not a power of 2 up to 32");
  } else if (!(mask >> lane & 1u)) {
    set_fault(std::string("shuffle at ") + site + ": " + where(self) + " is not in its own mask");
  } else {
    self.state = State::AtShuffle;
    self.site = site;
    self.op = op;
    self.mask = mask;
    self.value = value;
    self.arg = arg;
    self.width = width;
    try_complete_shuffle(warp_base);
  }
  while (self.state != State::Runnable || !b.fault.empty()) yield_to_scheduler(false);
  self.site = nullptr;
  return self.result;
}

std::string run_grid(const LaunchConfig& cfg, const std::function<void()>& body, uint64_t launch_no) {
  Block b;
  b.cfg = &cfg;
  b.body = &body;
  b.index.block_dim = cfg.block;
  b.index.grid_dim = cfg.grid;
  Block* const outer = t_block;
  t_block = &b;
  std::string fault;
  for (unsigned z = 0; z < cfg.grid.z && fault.empty(); ++z)
    for (unsigned y = 0; y < cfg.grid.y && fault.empty(); ++y)
      for (unsigned x = 0; x < cfg.grid.x && fault.empty(); ++x) {
        b.index.block_idx = uint3{x, y, z};
        b.fault.clear();
        fault = run_block(b, launch_no);
        if (!fault.empty())
          fault = std::string(cfg.kernel) + ", block (" + std::to_string(x) + "," + std::to_string(y) + "," +
                  std::to_string(z) + "): " + fault;
      }
  t_block = outer;
  return fault;
}

}  // namespace kiln::emu

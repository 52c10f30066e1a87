// CUDA gather/scatter along one dim: index_select and a deterministic
// index_add (the embedding lookup and its backward), and the deferred index
// range check of embedding and cross_entropy. CPU twins: core/cpu/index.cpp;
// Backend::check_index (core/cpu/cpu_backend.cpp). Tensors are viewed as
// (outer, dim, inner) blocks of contiguous memory (ops/ passes contiguous
// operands).
//
// Note [Deterministic index_add]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Several index entries may name the same output row (a token that occurs
// twice in a batch). Float atomics would add their rows in whatever order the
// hardware runs them, so the result would change from run to run. Instead the
// index is sorted with its positions by a stable radix sort (cub), which
// groups equal targets and keeps each group in index order. A group of at
// most kChunk entries is added by one thread per (group, column) in that
// order, rounding to the element type after each add exactly as the CPU twin
// does: the result is the CPU's, bit for bit, and the same on every run.
//
// A longer group would leave a few hundred threads adding thousands of rows
// each in series (BERT's token_type_ids are all 0: one group of B*T entries).
// So it is cut, from its first entry, into chunks of kChunk entries: one
// thread per (chunk, column) sums its chunk in order, in the accumulation
// type, into a scratch slot, and a second kernel adds the slots to the output
// row in chunk order and rounds once. Every sum still has one fixed order, so
// the bits are the same on every run, independent of timing; they differ from
// the CPU's serial order by rounding only (integers not at all).
// tests/test_cuda_index.cpp replays this order on the CPU and expects the
// device's bits. The scratch slot of a chunk starting at sorted position p is
// 2 * (p / kChunk) + (p starts its group): a kChunk-aligned window of
// positions holds at most one chunk that starts a long group (the group is
// longer than the window) and at most one that continues one (the chunks of a
// group lie kChunk apart, and a second group would have to start and run
// kChunk entries inside the window).
//
// Entries outside [0, rows) sort last under one sentinel key and are dropped
// (Note [Lazy index checks]).
//
// Note [Lazy index checks]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// embedding and cross_entropy reject an index outside [0, rows). Reading the
// indices back to test them on the host would drain the GPU's queue twice a
// training step, so on CUDA the check (Backend::check_index) is a kernel
// queued like any other, and nothing is read back there. An offending entry
// claims the device's error record (one per device, in device memory) for its
// check, by the check's sequence number, and adds itself to the record's
// count, smallest position and value range with integer atomics; entries of a
// later check find the record taken and leave it alone.
//
// The record is read where the host waits for the device anyway: every copy of
// a CUDA tensor to the host (.item(), .cpu(), to_vector(): the backend's
// copy_to_cpu) queues a copy of the record just ahead of its data on the same
// stream and looks at it once that stream has drained; raise_deferred_errors()
// does the same on demand. A claimed record is reset and becomes a kiln::Error
// naming the op, the offending values and the first position. So a bad id in
// a training step surfaces at the next host read, typically the loss's
// .item() in the same step, instead of in the embedding call; on the CPU the
// check stays eager. Until then nothing reads out of bounds: index_select
// writes zeros for an offending entry, index_add drops it, cross_entropy gives
// its row a NaN loss. A check queued on another stream is seen by a read on
// this one once that stream's work has run (if not by this read, by a later
// one); a failure on the same device while the record is taken is not counted.
#include <cub/device/device_radix_sort.cuh>

#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda.h"
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

constexpr int kMaxDevices = 64;
constexpr int64_t kChunk = 128;  // index_add: entries one thread adds in series

struct Blocks {
  int64_t outer = 1, inner = 1;
};

Blocks blocks_of(const Tensor& t, int64_t dim) {
  Blocks b;
  for (int64_t d = 0; d < dim; ++d) b.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) b.inner *= t.size(d);
  return b;
}

// out[o, j, c] = in[o, idx[j], c] with elements moved as W-byte words; zero
// for an idx[j] outside [0, n_in) (Note [Lazy index checks]).
template <typename W>
__global__ void index_select_kernel(W* out, const W* in, const int64_t* idx, int64_t n_idx, int64_t n_in,
                                    int64_t inner, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t j = t % n_idx, o = t / n_idx;
    const int64_t r = idx[j];
    out[i] = r >= 0 && r < n_in ? in[(o * n_in + r) * inner + c] : W(0);
  }
}

// keys[i] = idx[i], or n_out (the sentinel, sorted last) outside [0, n_out); pos[i] = i.
__global__ void index_keys_kernel(uint64_t* keys, int64_t* pos, const int64_t* idx, int64_t n, int64_t n_out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t k = idx[i];
    keys[i] = static_cast<uint64_t>(k >= 0 && k < n_out ? k : n_out);
    pos[i] = i;
  }
}

// starts[p] = the first sorted position holding keys[p] (keys ascending).
__global__ void group_starts_kernel(int64_t* starts, const uint64_t* keys, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const uint64_t key = keys[p];
    int64_t lo = 0, hi = p;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    starts[p] = lo;
  }
}

// Does the group of sorted position p run past the chunk that starts at p?
__device__ __forceinline__ bool runs_past_chunk(const uint64_t* keys, int64_t p, int64_t n_idx) {
  return p + kChunk < n_idx && keys[p + kChunk] == keys[p];
}

// Thread (o, p, c) with p the start of a chunk (Note [Deterministic index_add]):
// a group of at most kChunk entries is added to out[o, key, c] in order with
// the CPU's rounding; a chunk of a longer group is summed into its slot of
// partials (outer, slots, inner).
template <typename T>
__global__ void index_add_chunks_kernel(T* out, acc_t<T>* partials, const T* src, const uint64_t* keys,
                                        const int64_t* pos, const int64_t* starts, int64_t n_idx, int64_t n_out,
                                        int64_t inner, int64_t slots, int64_t total) {
  using A = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t p = t % n_idx, o = t / n_idx;
    const uint64_t key = keys[p];
    const int64_t off = p - starts[p];
    if (key == static_cast<uint64_t>(n_out) || off % kChunk != 0) continue;
    const T* s = src + o * n_idx * inner + c;
    if (off == 0 && !runs_past_chunk(keys, p, n_idx)) {
      T* dst = out + (o * n_out + static_cast<int64_t>(key)) * inner + c;
      T v = *dst;
      for (int64_t q = p; q < n_idx && keys[q] == key; ++q) v = from_acc<T>(to_acc(v) + to_acc(s[pos[q] * inner]));
      *dst = v;
      continue;
    }
    A a = A(0);
    const int64_t end = p + kChunk < n_idx ? p + kChunk : n_idx;
    for (int64_t q = p; q < end && keys[q] == key; ++q) a = a + to_acc(s[pos[q] * inner]);
    partials[(o * slots + 2 * (p / kChunk) + (off == 0 ? 1 : 0)) * inner + c] = a;
  }
}

// Thread (o, p, c) with p the start of a group longer than kChunk:
// out[o, key, c] += its chunks' partials in chunk order, rounded once.
template <typename T>
__global__ void index_add_long_kernel(T* out, const acc_t<T>* partials, const uint64_t* keys, const int64_t* starts,
                                      int64_t n_idx, int64_t n_out, int64_t inner, int64_t slots, int64_t total) {
  using A = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t p = t % n_idx, o = t / n_idx;
    const uint64_t key = keys[p];
    if (key == static_cast<uint64_t>(n_out) || starts[p] != p || !runs_past_chunk(keys, p, n_idx)) continue;
    T* dst = out + (o * n_out + static_cast<int64_t>(key)) * inner + c;
    A a = to_acc(*dst);
    for (int64_t q = p; q < n_idx && keys[q] == key; q += kChunk)
      a = a + partials[(o * slots + 2 * (q / kChunk) + (q == p ? 1 : 0)) * inner + c];
    *dst = from_acc<T>(a);
  }
}

int bits_for(int64_t n) {
  int b = 1;
  while (b < 63 && (int64_t{1} << b) < n) ++b;
  return b;
}

// ---- Note [Lazy index checks] ------------------------------------------------

// The error record of one device. Fields are the atomics' types.
struct IndexErrorRecord {
  unsigned long long claim;  // sequence number of the check that holds the record; 0: none
  unsigned long long site;   // that check's names (IndexChecks::sites)
  long long limit;           // its bound
  unsigned long long count;  // offending entries
  unsigned long long first;  // smallest offending position
  long long lo, hi;          // smallest and largest offending value
};
constexpr IndexErrorRecord kCleanRecord{0, 0, 0, 0, ULLONG_MAX, LLONG_MAX, LLONG_MIN};
constexpr int64_t kRecordWords = sizeof(IndexErrorRecord) / sizeof(int64_t);
static_assert(sizeof(IndexErrorRecord) == kRecordWords * sizeof(int64_t));

__global__ void check_index_kernel(const int64_t* idx, int64_t n, int64_t limit, bool has_ignore, int64_t ignore,
                                   unsigned long long seq, unsigned long long site, IndexErrorRecord* rec,
                                   unsigned long long* counted) {
  unsigned long long kept = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t v = idx[i];
    if (has_ignore && v == ignore) continue;
    ++kept;
    if (v >= 0 && v < limit) continue;
    const unsigned long long owner = atomicCAS(&rec->claim, 0ull, seq);
    if (owner != 0ull && owner != seq) continue;  // an earlier check's error holds the record
    if (owner == 0ull) {
      rec->site = site;
      rec->limit = limit;
    }
    atomicAdd(&rec->count, 1ull);
    atomicMin(&rec->first, static_cast<unsigned long long>(i));
    atomicMin(&rec->lo, static_cast<long long>(v));
    atomicMax(&rec->hi, static_cast<long long>(v));
  }
  if (!counted) return;
  for (int o = 16; o > 0; o >>= 1) kept += __shfl_down_sync(0xffffffffu, kept, o);
  if (threadIdx.x % 32 == 0 && kept != 0) atomicAdd(counted, kept);  // integer adds: any order, same sum
}

struct DeviceChecks {
  std::once_flag once;
  IndexErrorRecord* record = nullptr;     // device memory, kept for the process
  std::atomic<unsigned long long> seq{0};  // checks queued so far on this device
};

struct IndexChecks {
  static constexpr size_t kMaxSites = 64;
  std::mutex mutex;
  std::vector<IndexCheck> sites;  // the distinct names checks were queued with (literals)
  std::array<DeviceChecks, kMaxDevices> devices;
};

IndexChecks& index_checks() {
  static IndexChecks* checks = new IndexChecks;  // never destroyed (used until exit)
  return *checks;
}

DeviceChecks& device_checks(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "index check: device index ", device, " out of range");
  return index_checks().devices[static_cast<size_t>(device)];
}

// The site number of `what`; -1 when the table is full.
int64_t site_of(const IndexCheck& what) {
  IndexChecks& c = index_checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (size_t i = 0; i < c.sites.size(); ++i) {
    const IndexCheck& s = c.sites[i];
    if (std::strcmp(s.op, what.op) == 0 && std::strcmp(s.entry, what.entry) == 0 && std::strcmp(s.unit, what.unit) == 0)
      return static_cast<int64_t>(i);
  }
  if (c.sites.size() >= IndexChecks::kMaxSites) return -1;
  c.sites.push_back(what);
  return static_cast<int64_t>(c.sites.size() - 1);
}

IndexCheck site_names(uint64_t site) {
  IndexChecks& c = index_checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (site < c.sites.size()) return c.sites[site];
  return IndexCheck{"index check", "index", "entries"};
}

[[noreturn]] void report(int device, const IndexErrorRecord& r) {
  const IndexCheck w = site_names(r.site);
  const char* where = " (found on the device by a check queued earlier, reported at this host read: Note [Lazy "
                      "index checks])";
  if (r.count == 1)
    fail(w.op, ": ", w.entry, " ", r.lo, " at position ", r.first, " is out of range for ", r.limit, " ", w.unit,
         " on cuda:", device, where);
  fail(w.op, ": ", r.count, " ", w.entry, "s out of range for ", r.limit, " ", w.unit, " on cuda:", device,
       ": values in [", r.lo, ", ", r.hi, "], the first at position ", r.first, where);
}

}  // namespace

void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const Blocks b = blocks_of(in, dim);
  const int64_t n_in = in.size(dim), n_idx = index.numel();
  const int64_t total = b.outer * n_idx * b.inner;
  if (total == 0) return;
  const cudaStream_t stream = stream_of(out);
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  auto launch = [&](auto word) {
    using W = decltype(word);
    KILN_LAUNCH(grid_for(total), kThreads, 0, stream, index_select_kernel<W>)(
        static_cast<W*>(out.raw_data()), static_cast<const W*>(in.raw_data()), idx, n_idx, n_in, b.inner, total);
    KILN_CUDA_CHECK_LAUNCH();
  };
  switch (in.element_size()) {
    case 1: return launch(uint8_t{});
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
    default: fail("index_select: unsupported element size ", in.element_size());
  }
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Blocks b = blocks_of(out, dim);
  const int64_t n_out = out.size(dim), n_idx = index.numel();
  const int64_t total = b.outer * n_idx * b.inner;
  if (total == 0) return;
  KILN_CHECK(out.dtype() != DType::Bool, "index_add: not defined for bool tensors");
  KILN_CHECK(n_idx < (int64_t{1} << 31), "index_add: index of ", n_idx, " entries is too long for one sort");
  const Device dev = out.device();
  const cudaStream_t stream = stream_of(out);
  // Sort (target, position) pairs by target, stably (Note [Deterministic index_add]).
  Tensor keys = empty_tensor({n_idx}, DType::Int64, dev), positions = empty_tensor({n_idx}, DType::Int64, dev);
  Tensor keys_sorted = empty_tensor({n_idx}, DType::Int64, dev), pos_sorted = empty_tensor({n_idx}, DType::Int64, dev);
  auto* keys_in = static_cast<uint64_t*>(keys.raw_data());
  auto* keys_out = static_cast<uint64_t*>(keys_sorted.raw_data());
  auto* pos_in = static_cast<int64_t*>(positions.raw_data());
  auto* pos_out = static_cast<int64_t*>(pos_sorted.raw_data());
  KILN_LAUNCH(grid_for(n_idx), kThreads, 0, stream, index_keys_kernel)(keys_in, pos_in,
                                                              static_cast<const int64_t*>(index.raw_data()), n_idx,
                                                              n_out);
  KILN_CUDA_CHECK_LAUNCH();
  const int end_bit = bits_for(n_out + 1);  // the sentinel n_out included
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  Tensor temp = empty_tensor({static_cast<int64_t>((temp_bytes + 7) / 8)}, DType::Int64, dev);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  Tensor starts = empty_tensor({n_idx}, DType::Int64, dev);
  auto* st = static_cast<int64_t*>(starts.raw_data());
  KILN_LAUNCH(grid_for(n_idx), kThreads, 0, stream, group_starts_kernel)(st, keys_out, n_idx);
  KILN_CUDA_CHECK_LAUNCH();
  // Long groups (more than kChunk entries) exist only when n_idx > kChunk.
  const bool long_groups = n_idx > kChunk;
  const int64_t slots = 2 * ((n_idx + kChunk - 1) / kChunk);
  dispatch_device(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using A = acc_t<T>;
      Tensor scratch;
      A* partials = nullptr;
      if (long_groups) {
        const int64_t bytes = b.outer * slots * b.inner * static_cast<int64_t>(sizeof(A));
        scratch = empty_tensor({(bytes + 7) / 8}, DType::Int64, dev);
        partials = static_cast<A*>(scratch.raw_data());
      }
      T* o = static_cast<T*>(out.raw_data());
      KILN_LAUNCH(grid_for(total), kThreads, 0, stream, index_add_chunks_kernel<T>)(
          o, partials, static_cast<const T*>(src.raw_data()), keys_out, pos_out, st, n_idx, n_out, b.inner, slots,
          total);
      KILN_CUDA_CHECK_LAUNCH();
      if (long_groups) {
        KILN_LAUNCH(grid_for(total), kThreads, 0, stream, index_add_long_kernel<T>)(o, partials, keys_out, st, n_idx, n_out,
                                                                           b.inner, slots, total);
        KILN_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

bool check_index(const Tensor& index, int64_t limit, std::optional<int64_t> ignore, const IndexCheck& what,
                 const Tensor& counted) {
  const int device = index.device().index;
  const int64_t site = site_of(what);
  if (site < 0) return false;  // the caller checks on the host instead
  DeviceChecks& d = device_checks(device);
  std::call_once(d.once, [&] {
    KILN_CUDA_CHECK(cudaMalloc(&d.record, sizeof(IndexErrorRecord)));
    KILN_CUDA_CHECK(cudaMemcpy(d.record, &kCleanRecord, sizeof kCleanRecord, cudaMemcpyHostToDevice));
  });
  const cudaStream_t stream = stream_of(index);
  auto* count = counted.defined() ? static_cast<unsigned long long*>(counted.raw_data()) : nullptr;
  if (count) KILN_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), stream));
  const int64_t n = index.numel();
  if (n == 0) return true;
  const unsigned long long seq = d.seq.fetch_add(1) + 1;
  KILN_LAUNCH(grid_for(n), kThreads, 0, stream, check_index_kernel)(static_cast<const int64_t*>(index.raw_data()), n, limit,
                                                           ignore.has_value(), ignore.value_or(0), seq,
                                                           static_cast<unsigned long long>(site), d.record, count);
  KILN_CUDA_CHECK_LAUNCH();
  return true;
}

Tensor index_errors_probe(int device) {
  DeviceChecks& d = device_checks(device);
  if (d.seq.load() == 0) return Tensor();  // no check queued here yet: nothing to read
  Tensor snapshot = empty_pinned({kRecordWords}, DType::Int64);
  KILN_CUDA_CHECK(cudaMemcpyAsync(snapshot.raw_data(), d.record, sizeof(IndexErrorRecord), cudaMemcpyDeviceToHost,
                                  detail::current_cuda_stream(device)));
  return snapshot;
}

void index_errors_raise(int device, const Tensor& snapshot) {
  if (!snapshot.defined()) return;
  IndexErrorRecord r;
  std::memcpy(&r, snapshot.raw_data(), sizeof r);
  if (r.claim == 0) return;
  // Reset before reporting, so the next failure is reported in its turn; and
  // waited for, so a check queued next on another stream finds it reset.
  const cudaStream_t stream = detail::current_cuda_stream(device);
  KILN_CUDA_CHECK(cudaMemcpyAsync(device_checks(device).record, &kCleanRecord, sizeof kCleanRecord,
                                  cudaMemcpyHostToDevice, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  report(device, r);
}

void raise_index_errors(int device) {
  const Tensor snapshot = index_errors_probe(device);
  if (!snapshot.defined()) return;
  KILN_CUDA_CHECK(cudaStreamSynchronize(detail::current_cuda_stream(device)));
  index_errors_raise(device, snapshot);
}

}  // namespace kiln::cuda::kernels

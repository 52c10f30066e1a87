// Emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): the runtime
// API on the host. One device (cuda:0), H200-like. Device memory is one host
// allocation per cudaMalloc, registered by address range; streams are
// queues of deferred work that run, in order, when something waits on them.
// One recursive mutex guards the whole emulated device: work runs on the
// host thread that waits for it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/emu/internal.h"

struct CUstream_st {
  struct Op {
    const char* what = "";
    std::function<void()> work;
    CUstream_st* wait_stream = nullptr;  // cudaStreamWaitEvent: run `wait_stream` up to `wait_seq` first
    uint64_t wait_seq = 0;
  };
  unsigned flags = 0;
  int priority = 0;
  bool live = true;
  bool draining = false;
  std::deque<Op> ops;
  uint64_t queued = 0, done = 0;  // ops ever queued, ops run
};

struct CUevent_st {
  unsigned flags = 0;
  bool live = true;
  CUstream_st* stream = nullptr;  // of the last record; null: never recorded
  uint64_t seq = 0;               // that stream's ops before the record
  double time_ms = -1;            // when the record's marker ran (timing events)
};

namespace kiln::emu {
namespace {

constexpr int kDeviceSms = 132;
constexpr size_t kDefaultMemory = size_t{4} << 30;

struct Alloc {
  size_t bytes;
  bool pinned;
};

struct Device {
  std::recursive_mutex mu;
  std::map<uintptr_t, Alloc> allocs;  // by start address
  size_t used = 0;
  size_t cap = kDefaultMemory;
  CUstream_st legacy;  // stream handle 0
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_message;
  uint64_t launches = 0;
  std::mt19937_64 stream_rng;
  bool random_streams = false;
  bool abort_on_fault = false;
  std::map<std::string, uint64_t> kernels_run, api_calls;
  std::string coverage_path;

  Device() {
    if (const char* m = std::getenv("KILN_EMU_DEVICE_MEMORY")) cap = std::strtoull(m, nullptr, 10);
    if (const char* s = std::getenv("KILN_EMU_STREAMS"); s && std::strncmp(s, "random", 6) == 0) {
      random_streams = true;
      stream_rng.seed(s[6] == ':' ? std::strtoull(s + 7, nullptr, 10) : 1);
    }
    const char* a = std::getenv("KILN_EMU_ABORT");
    abort_on_fault = a && *a && *a != '0';
    if (const char* c = std::getenv("KILN_EMU_COVERAGE")) coverage_path = c;
  }
};

void write_coverage();

// Immortal: kiln's own statics (the caching allocator) may call the runtime
// while the program exits.
Device& dev() {
  static Device* d = [] {
    Device* p = new Device;
    if (!p->coverage_path.empty()) std::atexit(write_coverage);
    return p;
  }();
  return *d;
}

void write_coverage() {
  Device& d = dev();
  std::lock_guard<std::recursive_mutex> lock(d.mu);
  if (FILE* f = std::fopen(d.coverage_path.c_str(), "a")) {
    for (const auto& [k, n] : d.kernels_run)
      std::fprintf(f, "kernel %s %llu\n", k.c_str(), static_cast<unsigned long long>(n));
    for (const auto& [k, n] : d.api_calls)
      std::fprintf(f, "api %s %llu\n", k.c_str(), static_cast<unsigned long long>(n));
    std::fclose(f);
  }
}

thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;

using Lock = std::lock_guard<std::recursive_mutex>;

cudaError_t answer(cudaError_t err) {
  if (err != cudaSuccess) t_last = err;
  return err;
}

// Every API call: counts itself; a sticky fault answers every later call.
#define KILN_EMU_API(name)                            \
  Device& d = dev();                                  \
  Lock lock(d.mu);                                    \
  ++d.api_calls[name];                                \
  if (d.sticky != cudaSuccess) return answer(d.sticky)

void set_sticky(Device& d, cudaError_t err, const std::string& message) {
  if (d.sticky != cudaSuccess) return;
  d.sticky = err;
  d.sticky_message = "emulated CUDA: " + message;
  std::fprintf(stderr, "%s\n", d.sticky_message.c_str());
  if (d.abort_on_fault) std::abort();
}

CUstream_st* resolve(Device& d, cudaStream_t s) { return s ? s : &d.legacy; }

bool live_stream(Device& d, cudaStream_t s) {
  if (!s) return true;
  for (const auto& p : d.streams)
    if (p.get() == s) return p->live;
  return false;
}

bool live_event(Device& d, cudaEvent_t e) {
  for (const auto& p : d.events)
    if (p.get() == e) return p->live;
  return false;
}

void drain(Device& d, CUstream_st* s, uint64_t upto);

void run_one(Device& d, CUstream_st* s) {
  CUstream_st::Op op = std::move(s->ops.front());
  s->ops.pop_front();
  if (op.wait_stream) drain(d, op.wait_stream, op.wait_seq);
  if (d.sticky == cudaSuccess && op.work) op.work();
  ++s->done;
}

// Runs `s` until `upto` of its ops have run. Under KILN_EMU_STREAMS=random,
// other streams' work may run first, at random: any order CUDA allows.
void drain(Device& d, CUstream_st* s, uint64_t upto) {
  if (s->done >= upto) return;
  if (s->draining) {
    set_sticky(d, cudaErrorLaunchFailure, "streams wait on each other in a cycle (a stream waits for an event "
                                          "recorded after work that waits on it)");
    return;
  }
  s->draining = true;
  while (s->done < upto && !s->ops.empty()) {
    if (d.random_streams && (d.stream_rng() & 1u)) {
      std::vector<CUstream_st*> others;
      if (&d.legacy != s && !d.legacy.ops.empty() && !d.legacy.draining) others.push_back(&d.legacy);
      for (const auto& p : d.streams)
        if (p.get() != s && !p->ops.empty() && !p->draining) others.push_back(p.get());
      if (!others.empty()) {
        CUstream_st* o = others[d.stream_rng() % others.size()];
        o->draining = true;
        run_one(d, o);
        o->draining = false;
      }
    }
    run_one(d, s);
  }
  s->draining = false;
}

void drain_all(Device& d) {
  drain(d, &d.legacy, d.legacy.queued);
  for (const auto& p : d.streams)
    if (p->live) drain(d, p.get(), p->queued);
}

void push(Device&, CUstream_st* s, const char* what, std::function<void()> work) {
  CUstream_st::Op op;
  op.what = what;
  op.work = std::move(work);
  s->ops.push_back(std::move(op));
  ++s->queued;
}

// The allocation holding [p, p + n), or null.
const std::pair<const uintptr_t, Alloc>* find(Device& d, const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = d.allocs.upper_bound(a);
  if (it == d.allocs.begin()) return nullptr;
  --it;
  if (a + n > it->first + it->second.bytes || (n == 0 && a >= it->first + it->second.bytes)) return nullptr;
  return &*it;
}

enum class Where { Host, Pinned, Device, Bad };

// Where [p, p + n) lies; Bad when it starts in an allocation but runs past it.
Where where(Device& d, const void* p, size_t n) {
  const auto* a = find(d, p, 1);
  if (!a) return Where::Host;
  if (!find(d, p, n)) return Where::Bad;
  return a->second.pinned ? Where::Pinned : Where::Device;
}

cudaError_t bad_range(Device&, const char* call, const void* p, size_t n) {
  char msg[256];
  std::snprintf(msg, sizeof msg, "%s: %zu bytes at %p are not inside one allocation", call, n, p);
  std::fprintf(stderr, "emulated CUDA: %s\n", msg);
  return answer(cudaErrorInvalidValue);
}

// Queues (or, to pageable host memory, performs) a copy on `s`.
cudaError_t copy(Device& d, const char* call, void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                 CUstream_st* s, bool blocking) {
  if (n == 0) return cudaSuccess;
  const Where wd = where(d, dst, n), ws = where(d, src, n);
  if (wd == Where::Bad) return bad_range(d, call, dst, n);
  if (ws == Where::Bad) return bad_range(d, call, src, n);
  const bool dev_dst = wd == Where::Device, dev_src = ws == Where::Device;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dev_dst && !dev_src; break;
    case cudaMemcpyDeviceToHost: ok = dev_src && !dev_dst; break;
    case cudaMemcpyDeviceToDevice: ok = dev_src && dev_dst; break;
    case cudaMemcpyHostToHost: ok = !dev_src && !dev_dst; break;
    case cudaMemcpyDefault: break;
    default: return answer(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) {
    std::fprintf(stderr, "emulated CUDA: %s: the pointers (dst %s, src %s) do not match the copy's kind %d\n", call,
                 dev_dst ? "device" : "host", dev_src ? "device" : "host", static_cast<int>(kind));
    return answer(cudaErrorInvalidValue);
  }
  if (ws == Where::Host && !blocking) {
    // From pageable memory the source is staged at the call, as CUDA does.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    push(d, s, call, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    push(d, s, call, [dst, src, n] { std::memmove(dst, src, n); });
  }
  // To pageable memory (or a blocking copy) the call returns when it is done.
  if (blocking || wd == Where::Host) drain(d, s, s->queued);
  return d.sticky != cudaSuccess ? answer(d.sticky) : cudaSuccess;
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

thread_local std::string t_config_message;

}  // namespace

void enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  Device& d = dev();
  Lock lock(d.mu);
  ++d.api_calls[what];
  if (d.sticky != cudaSuccess) return;
  push(d, resolve(d, stream), what, std::move(work));
}

bool check_launch(const LaunchConfig& c) {
  const auto fail = [&](const std::string& why) {
    t_config_message = "emulated CUDA: launch of " + std::string(c.kernel) + ": " + why + " (sm_90)";
    std::fprintf(stderr, "%s\n", t_config_message.c_str());
    answer(cudaErrorInvalidConfiguration);
    return false;
  };
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || threads == 0) return fail("an empty grid or block");
  if (threads > 1024) return fail("a block of " + std::to_string(threads) + " threads, more than 1024");
  if (c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64) return fail("blockDim over (1024, 1024, 64)");
  if (c.grid.x > 2147483647u) return fail("gridDim.x over 2^31 - 1");
  if (c.grid.y > 65535u) return fail("gridDim.y = " + std::to_string(c.grid.y) + ", over 65535");
  if (c.grid.z > 65535u) return fail("gridDim.z = " + std::to_string(c.grid.z) + ", over 65535");
  if (c.shared_bytes > (size_t{48} << 10)) return fail("more than 48 KiB of dynamic shared memory");
  Device& d = dev();
  Lock lock(d.mu);
  if (!live_stream(d, c.stream)) {
    t_config_message.clear();
    answer(cudaErrorInvalidResourceHandle);
    return false;
  }
  return true;
}

void queue_kernel(const LaunchConfig& cfg, std::function<void()> body) {
  Device& d = dev();
  Lock lock(d.mu);
  ++d.kernels_run[cfg.kernel];
  if (d.sticky != cudaSuccess) return;
  const uint64_t no = ++d.launches;
  push(d, resolve(d, cfg.stream), cfg.kernel, [&d, cfg, body = std::move(body), no] {
    const std::string fault = run_grid(cfg, body, no);
    if (!fault.empty()) set_sticky(d, cudaErrorLaunchFailure, "kernel " + fault);
  });
}

}  // namespace kiln::emu

using namespace kiln::emu;  // NOLINT: the C API below is global, as CUDA's

// ---- errors and versions -------------------------------------------------------
cudaError_t cudaGetLastError() {
  Device& d = dev();
  Lock lock(d.mu);
  ++d.api_calls["cudaGetLastError"];
  if (d.sticky != cudaSuccess) return d.sticky;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  Device& d = dev();
  Lock lock(d.mu);
  return d.sticky != cudaSuccess ? d.sticky : t_last;
}
const char* cudaGetErrorName(cudaError_t err) {
  Device& d = dev();
  Lock lock(d.mu);
  ++d.api_calls["cudaGetErrorName"];
  return error_name(err);
}
const char* cudaGetErrorString(cudaError_t err) {
  Device& d = dev();
  Lock lock(d.mu);
  ++d.api_calls["cudaGetErrorString"];
  if (err == d.sticky && !d.sticky_message.empty()) return d.sticky_message.c_str();
  if (err == cudaErrorInvalidConfiguration && !t_config_message.empty()) return t_config_message.c_str();
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (emulated device)";
    case cudaErrorNotReady: return "device not ready";
    default: return error_name(err);
  }
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  KILN_EMU_API("cudaRuntimeGetVersion");
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  KILN_EMU_API("cudaDriverGetVersion");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// ---- devices ---------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  KILN_EMU_API("cudaGetDeviceCount");
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  KILN_EMU_API("cudaGetDevice");
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  KILN_EMU_API("cudaSetDevice");
  if (device != 0) return answer(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  KILN_EMU_API("cudaGetDeviceProperties");
  if (device != 0) return answer(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "NVIDIA H200 (kiln emulated)");
  p->totalGlobalMem = d.cap;
  p->sharedMemPerBlock = size_t{48} << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->major = 9, p->minor = 0;
  p->multiProcessorCount = kDeviceSms;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = size_t{228} << 10;
  p->regsPerMultiprocessor = 65536;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  KILN_EMU_API("cudaDeviceGetAttribute");
  if (device != 0) return answer(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = kDeviceSms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    default: return answer(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  KILN_EMU_API("cudaDeviceGetStreamPriorityRange");
  *least = 0, *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  KILN_EMU_API("cudaDeviceSynchronize");
  drain_all(d);
  return d.sticky != cudaSuccess ? answer(d.sticky) : cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  KILN_EMU_API("cudaMemGetInfo");
  *total_bytes = d.cap;
  *free_bytes = d.cap - std::min(d.cap, d.used);
  return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  KILN_EMU_API("cudaMalloc");
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > d.cap - std::min(d.cap, d.used)) return answer(cudaErrorMemoryAllocation);
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return answer(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, bytes);  // device memory starts as garbage: NaN, not zero
  d.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, false};
  d.used += bytes;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  KILN_EMU_API("cudaFree");
  if (!ptr) return cudaSuccess;
  auto it = d.allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == d.allocs.end() || it->second.pinned) return answer(cudaErrorInvalidValue);
  drain_all(d);  // cudaFree synchronises the device
  d.used -= it->second.bytes;
  d.allocs.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  KILN_EMU_API("cudaHostAlloc");
  *ptr = nullptr;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) return answer(cudaErrorMemoryAllocation);
  d.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes ? bytes : 1, true};
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  KILN_EMU_API("cudaFreeHost");
  if (!ptr) return cudaSuccess;
  auto it = d.allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == d.allocs.end() || !it->second.pinned) return answer(cudaErrorInvalidValue);
  drain_all(d);
  d.allocs.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  KILN_EMU_API("cudaPointerGetAttributes");
  *attr = cudaPointerAttributes{};
  const auto* a = find(d, ptr, 1);
  attr->type = !a ? cudaMemoryTypeUnregistered : a->second.pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  attr->device = a ? 0 : -2;
  attr->devicePointer = a ? const_cast<void*>(ptr) : nullptr;
  attr->hostPointer = a && a->second.pinned ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  KILN_EMU_API("cudaMemcpy");
  return copy(d, "cudaMemcpy", dst, src, bytes, kind, &d.legacy, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  KILN_EMU_API("cudaMemcpyAsync");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  return copy(d, "cudaMemcpyAsync", dst, src, bytes, kind, resolve(d, stream), false);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  KILN_EMU_API("cudaMemcpy2DAsync");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  if (width > dpitch || width > spitch) return answer(cudaErrorInvalidValue);
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e = copy(d, "cudaMemcpy2DAsync", static_cast<char*>(dst) + r * dpitch,
                               static_cast<const char*>(src) + r * spitch, width, kind, resolve(d, stream), false);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  KILN_EMU_API("cudaMemcpyPeerAsync");
  if (dst_device != 0 || src_device != 0) return answer(cudaErrorInvalidDevice);
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  return copy(d, "cudaMemcpyPeerAsync", dst, src, bytes, cudaMemcpyDeviceToDevice, resolve(d, stream), false);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  KILN_EMU_API("cudaMemsetAsync");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (where(d, ptr, bytes) != Where::Device) return bad_range(d, "cudaMemsetAsync", ptr, bytes);
  push(d, resolve(d, stream), "cudaMemsetAsync", [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

// ---- streams and events ------------------------------------------------------------
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  KILN_EMU_API("cudaStreamCreateWithPriority");
  if (flags != cudaStreamNonBlocking) {
    // kiln's streams never synchronise with the legacy stream; the implicit
    // synchronisation of blocking streams is not emulated.
    std::fprintf(stderr, "emulated CUDA: only non-blocking streams are emulated\n");
    return answer(cudaErrorNotSupported);
  }
  d.streams.push_back(std::make_unique<CUstream_st>());
  d.streams.back()->flags = flags;
  d.streams.back()->priority = priority;
  *stream = d.streams.back().get();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  KILN_EMU_API("cudaStreamDestroy");
  if (!stream || !live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  drain(d, stream, stream->queued);  // its work still completes, as on a device
  stream->live = false;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  KILN_EMU_API("cudaStreamSynchronize");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(d, stream);
  drain(d, s, s->queued);
  return d.sticky != cudaSuccess ? answer(d.sticky) : cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  KILN_EMU_API("cudaStreamQuery");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(d, stream);
  return s->done == s->queued ? cudaSuccess : cudaErrorNotReady;  // queued work runs only when waited for
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  KILN_EMU_API("cudaStreamWaitEvent");
  if (!live_stream(d, stream) || !live_event(d, event)) return answer(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(d, stream);
  if (!event->stream || event->stream == s) return cudaSuccess;
  CUstream_st::Op op;
  op.what = "cudaStreamWaitEvent";
  op.wait_stream = event->stream;
  op.wait_seq = event->seq;
  s->ops.push_back(std::move(op));
  ++s->queued;
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  KILN_EMU_API("cudaLaunchHostFunc");
  if (!live_stream(d, stream)) return answer(cudaErrorInvalidResourceHandle);
  push(d, resolve(d, stream), "cudaLaunchHostFunc", [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  KILN_EMU_API("cudaEventCreateWithFlags");
  d.events.push_back(std::make_unique<CUevent_st>());
  d.events.back()->flags = flags;
  *event = d.events.back().get();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  KILN_EMU_API("cudaEventDestroy");
  if (!live_event(d, event)) return answer(cudaErrorInvalidResourceHandle);
  event->live = false;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  KILN_EMU_API("cudaEventRecord");
  if (!live_stream(d, stream) || !live_event(d, event)) return answer(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(d, stream);
  event->time_ms = -1;
  if (!(event->flags & cudaEventDisableTiming)) {
    push(d, s, "cudaEventRecord", [event] {
      event->time_ms = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now().time_since_epoch()).count();
    });
  }
  event->stream = s;
  event->seq = s->queued;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  KILN_EMU_API("cudaEventQuery");
  if (!live_event(d, event)) return answer(cudaErrorInvalidResourceHandle);
  return !event->stream || event->stream->done >= event->seq ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  KILN_EMU_API("cudaEventSynchronize");
  if (!live_event(d, event)) return answer(cudaErrorInvalidResourceHandle);
  if (event->stream) drain(d, event->stream, event->seq);
  return d.sticky != cudaSuccess ? answer(d.sticky) : cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  KILN_EMU_API("cudaEventElapsedTime");
  if (!live_event(d, start) || !live_event(d, end)) return answer(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return answer(cudaErrorInvalidResourceHandle);
  if (!start->stream || !end->stream) return answer(cudaErrorInvalidResourceHandle);
  if (start->stream->done < start->seq || end->stream->done < end->seq) return answer(cudaErrorNotReady);
  *ms = static_cast<float>(end->time_ms - start->time_ms);
  return cudaSuccess;
}

// Pinned staging and side-stream copies for loader batches (Note [Batch
// staging] in data/device_staging.h).
#include "data/device_staging.h"

#include <map>
#include <mutex>

#include "core/error.h"
#include "cuda/cuda.h"

namespace kiln::data {
namespace {

// One copy stream per CUDA device for the whole process, made on first use.
cuda::Stream copy_stream(int device) {
  static std::mutex mutex;
  static std::map<int, cuda::Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, cuda::Stream::create(device)).first;
  return it->second;
}

}  // namespace

void check_staging_device(Device device) {
  if (device.is_cpu()) return;
  KILN_CHECK(cuda_built(), "DataLoader staging for ", device.str(), ": ", cuda_unavailable_reason());
  KILN_CHECK(device.index >= 0 && device.index < cuda::device_count(), "DataLoader staging for ", device.str(),
             ": no such CUDA device (", cuda::device_count(), " visible)");
}

Tensor pin_tensor(const Tensor& t) {
  if (!t.defined() || cuda::is_pinned(t)) return t;
  return cuda::pin_memory(t.contiguous());
}

Tensor stage_to_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  KILN_CHECK(t.device().is_cpu(), "DataLoader staging: a batch tensor is on ", t.device().str(), ", expected the CPU");
  const Tensor src = t.contiguous();
  const cuda::Stream compute = cuda::current_stream(device.index);
  const cuda::Stream side = copy_stream(device.index);
  Tensor dst;
  {
    cuda::StreamGuard guard(side);  // dst's memory belongs to the copy stream
    dst = empty_tensor(src.sizes(), src.dtype(), device);
    cuda::copy(dst, src, /*non_blocking=*/cuda::is_pinned(src));
  }
  cuda::Event ready;
  ready.record(side);
  compute.wait(ready);
  cuda::record_stream(dst, compute);
  return dst;
}

}  // namespace kiln::data

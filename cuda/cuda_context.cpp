// Compiled only in CUDA builds: reports that the backend is built in. Device
// kernels register themselves through register_cuda_backend() (core/backend.h).
#include "core/device.h"

namespace kiln {
bool cuda_built() { return true; }
}  // namespace kiln

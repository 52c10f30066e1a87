// Built when the CUDA backend is not: keeps the library whole and makes every
// CUDA request a clear error.
#include "core/device.h"

namespace kiln {
bool cuda_built() { return false; }
}  // namespace kiln

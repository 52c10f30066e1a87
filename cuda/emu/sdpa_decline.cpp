// Emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): cuDNN cannot
// run on the CPU, so its fused attention (cuda/attention_cudnn.cpp, not built
// in the emulated flavour) declines every problem, as it does on a GPU or a
// cuDNN version without a graph for it, and the composite attention path
// (matmuls and kiln's own softmax kernels) runs instead.
#include "core/error.h"
#include "cuda/attention_cudnn.h"

namespace kiln::cuda::sdpa {

bool supported(int, DType, int64_t, int64_t, int64_t, bool, double, bool) { return false; }

bool forward(int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
             double, double, PhiloxState, bool) {
  return false;
}

void backward(int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
              const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double, double, PhiloxState, bool) {
  fail("internal: cuDNN attention backward called on the emulated device, whose forward declines every problem");
}

bool buckets_enabled(int) { return false; }

int64_t cached_problems() { return 0; }

}  // namespace kiln::cuda::sdpa

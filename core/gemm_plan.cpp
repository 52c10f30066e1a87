// gemm_view and matrix_as_batch (core/gemm_plan.h): the operand analysis the
// CPU and CUDA GEMMs share.
#include "core/gemm_plan.h"

#include <algorithm>

namespace kiln {

bool gemm_view(const Tensor& t, GemmOperand& v) {
  const int64_t rows = t.size(1), cols = t.size(2), s_r = t.stride(1), s_c = t.stride(2);
  v.batch_stride = t.size(0) == 1 ? 0 : t.stride(0);
  if ((s_c == 1 || cols == 1) && s_r >= std::max<int64_t>(cols, 1)) {
    v.trans = false;
    v.ld = std::max<int64_t>(s_r, 1);
    return true;
  }
  if ((s_r == 1 || rows == 1) && s_c >= std::max<int64_t>(rows, 1)) {
    v.trans = true;
    v.ld = std::max<int64_t>(s_c, 1);
    return true;
  }
  return false;
}

Tensor matrix_as_batch(const Tensor& t) {
  return make_tensor(t.storage(), {1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset(), t.dtype());
}

}  // namespace kiln

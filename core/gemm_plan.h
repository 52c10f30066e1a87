// How a matmul operand is handed to a BLAS-style GEMM, decided once for every
// device (internal, not installed): the CPU (core/cpu/gemm.cpp, OpenBLAS) and
// CUDA (cuda/gemm_lt.cpp, cuBLASLt) bodies of Backend::matmul and addmm both
// take their operands through gemm_operand().
//
// Backend::matmul multiplies 3-D (batch, rows, cols) operands that may be
// transposed or broadcast views. A GEMM library takes each operand as a
// row-major matrix with a leading dimension, or as the transpose of one (a
// view with unit stride along its rows), and batch entries a fixed stride
// apart (0: one entry for the whole batch). Only operands with no unit-stride
// dimension among the last two, or of another dtype than the product, are
// copied first.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// One (batch, rows, cols) operand as a GEMM takes it.
struct GemmOperand {
  bool trans = false;        // stored as the transpose of a row-major (cols, rows) matrix
  int64_t ld = 1;            // leading dimension, in elements
  int64_t batch_stride = 0;  // elements between batch entries; 0 when size(0) == 1
};

// v for t (3-D); false when neither of the last two dims has unit stride.
bool gemm_view(const Tensor& t, GemmOperand& v);

// t itself when it has `dtype` and a GEMM view, else a contiguous copy in
// `dtype` made with the device's copy kernel copy(dst, src); v describes the
// tensor returned.
template <typename Copy>
Tensor gemm_operand(const Tensor& t, DType dtype, GemmOperand& v, Copy&& copy) {
  if (t.dtype() == dtype && gemm_view(t, v)) return t;
  Tensor c = empty_tensor(t.sizes(), dtype, t.device());
  copy(c, t);
  gemm_view(c, v);
  return c;
}

// A 2-D (R, C) tensor as the batch of one (1, R, C) that matmul takes.
Tensor matrix_as_batch(const Tensor& t);

}  // namespace kiln

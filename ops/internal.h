// Helpers shared by the op files: argument checks and autograd-free building
// blocks (raw_*) that run a kernel without recording history.
#pragma once

#include "autograd/record.h"
#include "core/op_scope.h"
#include "core/backend.h"
#include "ops/op_registry.h"
#include "ops/ops.h"

namespace kiln::detail {

void check_defined(const Tensor& t, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
// kiln::Error for in-place ops that autograd cannot follow
// (Note [In-place ops and autograd] in copy_ops.cpp).
void check_inplace(const Tensor& self, const TensorList& others, const char* op);

Tensor raw_cast(const Tensor& t, DType dtype);            // no history; returns t when equal
Tensor raw_expand(const Tensor& t, const Shape& shape);   // broadcast view, stride 0
Tensor raw_contiguous(const Tensor& t);
Tensor raw_view(const Tensor& t, const Shape& shape);     // t must be viewable
Tensor raw_zeros(const Shape& shape, DType dtype, Device device);
// Normalises a list of dims for x (wraps, sorts, rejects duplicates); empty = all.
Shape reduce_dims(const Tensor& x, const Shape& dims, const char* op);
// Shape of x with `dims` set to 1.
Shape keepdim_shape(const Tensor& x, const Shape& dims);

// A float64 tensor of `shape` with values in [lo, hi), seeded for samples.
Tensor sample_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace kiln::detail

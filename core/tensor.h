// Tensor: a cheap handle (shared pointer) to a TensorImpl, which is a view
// (sizes, strides, offset, dtype) into shared Storage plus an optional autograd
// record. Copying a Tensor shares the impl, as in PyTorch; views share Storage.
//
// Invariants:
//  - sizes.size() == strides.size() == dim(); sizes >= 0; strides in elements.
//  - every element addressed by (offset + sum(i_d * stride_d)) lies inside the
//    storage (checked by the view ops that build such tensors).
//  - an undefined Tensor (default constructed) has no impl; using it in an op
//    is a kiln::Error.
//
// The methods below that compute (views, math) are thin forwards to the free
// functions in ops/ (see ops/ops.h), which record autograd history.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/storage.h"

namespace kiln {

using Shape = std::vector<int64_t>;

struct AutogradMeta;  // autograd/autograd_meta.h
class Node;           // autograd/node.h

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  bool is_view = false;  // shares storage with a tensor it was made from
  std::shared_ptr<AutogradMeta> autograd;  // null: no autograd state yet

  int64_t numel() const;
};

std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);    // checks overflow; negative sizes are an error
Shape contiguous_strides(const Shape& sizes);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl().numel(); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  size_t element_size() const { return kiln::element_size(dtype()); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_view() const { return impl().is_view; }
  uint32_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }
  const Storage& storage() const { return impl().storage; }
  bool shares_storage_with(const Tensor& o) const { return impl().storage == o.impl().storage; }
  std::string str() const;  // "Tensor[2, 3] float32 cpu"

  // Pointer to the first element (offset applied). T must match dtype().
  template <typename T> T* data_ptr() const {
    KILN_CHECK(dtype_of<T>() == dtype(), "data_ptr: tensor is ", dtype_name(dtype()),
               ", asked for ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  // The single value of a one-element tensor, converted to T (copies from device).
  template <typename T> T item() const;
  // All values in logical (row-major) order, converted to T (copies from device).
  template <typename T> std::vector<T> to_vector() const;

  // ---- autograd (autograd/) ----------------------------------------------
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r = true);
  Tensor& requires_grad_(bool r = true) { return set_requires_grad(r); }
  const Tensor& grad() const;  // undefined until backward accumulates into it
  Tensor& mutable_grad();
  void zero_grad();            // drops the gradient (as set_to_none)
  std::shared_ptr<Node> grad_fn() const;
  bool is_leaf() const;
  void retain_grad() const;
  // Gradient of this (scalar, or given `gradient` of the same shape).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Runs fn on the gradient before it is accumulated or passed on; a defined
  // return value replaces the gradient. Returns a handle for removal.
  int register_hook(std::function<Tensor(const Tensor&)> fn) const;
  void remove_hook(int handle) const;
  // Leaf tensors: fn runs after the gradient was accumulated into .grad().
  int register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  Tensor detach() const;  // shares storage, no history

  // ---- views and shape (ops/view_ops.cpp) ---------------------------------
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& o) const { return expand(o.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }

  // ---- math forwards (ops/) -----------------------------------------------
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& o) const;

  // ---- in-place (bump the version; see Note [In-place ops and autograd]) --
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& o, double alpha = 1.0);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(double s);
  Tensor& masked_fill_(const Tensor& mask, double value);

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Wraps a dimension index: d in [-ndim, ndim) → [0, ndim); else kiln::Error naming op.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);

// A new contiguous tensor with uninitialised memory (no autograd).
Tensor empty_tensor(const Shape& sizes, DType dtype, Device device);

// Builds a tensor over existing storage (no checks beyond bounds).
Tensor make_tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

}  // namespace kiln

#include "core/tensor.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/backend.h"

namespace kiln {

int64_t TensorImpl::numel() const {
  // A zero size anywhere makes 0, whatever the other sizes' product would be.
  for (int64_t s : sizes)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : sizes)
    KILN_CHECK(!__builtin_mul_overflow(n, s, &n), "numel: element count of shape ", shape_str(sizes),
               " overflows int64");
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  bool has_zero = false;
  for (int64_t d : s) {
    KILN_CHECK(d >= 0, "invalid shape ", shape_str(s), ": sizes must be non-negative");
    has_zero = has_zero || d == 0;
  }
  if (has_zero) return 0;  // whatever the product of the other sizes
  int64_t n = 1;
  for (int64_t d : s)
    KILN_CHECK(!__builtin_mul_overflow(n, d, &n), "invalid shape ", shape_str(s), ": element count overflows int64");
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  // Row-major strides, a size-0 dim counted as 1 (as PyTorch). Only strides
  // are multiplied, never the product past the first dim: a shape with a zero
  // size has few elements however large its other sizes, yet its strides can
  // still overflow ([0, 2^32, 2^32] needs 2^64): that is a kiln::Error, as
  // PyTorch's "Stride calculation overflowed".
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    if (i > 0 && __builtin_mul_overflow(acc, std::max<int64_t>(sizes[i], 1), &acc))
      fail("contiguous_strides: the strides of shape ", shape_str(sizes), " overflow int64");
  }
  return st;
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  KILN_CHECK(d >= lo && d <= hi, op, ": dimension ", d, " out of range for a tensor of ", ndim,
             " dims (expected ", lo, " to ", hi, ")");
  return d < 0 ? d + std::max<int64_t>(ndim, 1) : d;
}

TensorImpl& Tensor::impl() const {
  KILN_CHECK(impl_ != nullptr, "operation on an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const {
  KILN_CHECK(dim() > 0, "size: a 0-dim tensor has no dimension ", d);
  return impl().sizes[static_cast<size_t>(wrap_dim(d, dim(), "size"))];
}
int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK(dim() > 0, "stride: a 0-dim tensor has no dimension ", d);
  return impl().strides[static_cast<size_t>(wrap_dim(d, dim(), "stride"))];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  // An empty tensor lays nothing out: contiguous whatever its strides, as in
  // PyTorch (a [5, 9, 0] topk result failed the CUDA host copy's check;
  // found on the emulated device, docs/gpu.md "Findings").
  for (int64_t s : t.sizes)
    if (s == 0) return true;
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(kiln::element_size(t.dtype));
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return "Tensor" + shape_str(sizes()) + " " + dtype_name(dtype()) + " " + device().str();
}

Tensor make_tensor(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_tensor(const Shape& sizes, DType dtype, Device device) {
  const int64_t n = shape_numel(sizes);
  const size_t es = element_size(dtype);
  KILN_CHECK(static_cast<uint64_t>(n) <= std::numeric_limits<size_t>::max() / es, "empty: shape ",
             shape_str(sizes), " is too large");
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(n) * es, device);
  return make_tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

// Contiguous CPU copy of t in dtype `want`.
static Tensor cpu_copy_as(const Tensor& t, DType want) {
  Tensor host = t;
  if (!t.device().is_cpu()) {
    Tensor staged = empty_tensor(t.sizes(), t.dtype(), t.device());
    backend(t.device()).copy(staged, t);
    host = empty_tensor(t.sizes(), t.dtype(), kCPU);
    backend(t.device()).copy_to_cpu(host, staged);
  }
  Tensor out = empty_tensor(t.sizes(), want, kCPU);
  cpu_backend().copy(out, host);
  return out;
}

template <typename T>
T Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(sizes()));
  return cpu_copy_as(*this, dtype_of<T>()).template data_ptr<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = cpu_copy_as(*this, dtype_of<T>());
  const T* p = c.template data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

#define KILN_INSTANTIATE(T)                        \
  template T Tensor::item<T>() const;              \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(Half)
KILN_INSTANTIATE(BFloat16)
#undef KILN_INSTANTIATE
template bool Tensor::item<bool>() const;
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  Tensor c = cpu_copy_as(*this, DType::Bool);
  const bool* p = c.data_ptr<bool>();
  return std::vector<bool>(p, p + c.numel());
}

// ---- printing -----------------------------------------------------------
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

void print_values(std::ostream& os, const Tensor& t, const std::vector<double>& v, int64_t dim, int64_t offset,
                  const Shape& strides, bool summarize, int indent) {
  const int64_t n = t.size(dim);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (dim + 1 == t.dim() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - kEdgeItems;
    }
    const int64_t off = offset + i * strides[static_cast<size_t>(dim)];
    if (dim + 1 == t.dim()) {
      const double x = v[static_cast<size_t>(off)];
      if (t.dtype() == DType::Bool) os << (x != 0 ? "True" : "False");
      else if (!t.is_floating_point()) os << static_cast<int64_t>(x);
      else if (std::isnan(x) || std::isinf(x)) os << x;
      else {
        char buf[32];
        std::snprintf(buf, sizeof buf, std::abs(x) >= 1e5 || (x != 0 && std::abs(x) < 1e-4) ? "%.4e" : "%.4f", x);
        os << buf;
      }
    } else {
      print_values(os, t, v, dim + 1, off, strides, summarize, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const std::vector<double> v = t.to_vector<double>();
  os << "tensor(";
  if (t.dim() == 0) {
    std::ostringstream one;
    print_values(one, t.view({1}), v, 0, 0, {1}, false, 7);
    const std::string s = one.str();
    os << s.substr(1, s.size() - 2);  // the value without its brackets
  } else {
    print_values(os, t, v, 0, 0, contiguous_strides(t.sizes()), t.numel() > kSummarizeAbove, 7);
  }
  os << ", shape=" << shape_str(t.sizes()) << ", dtype=" << dtype_name(t.dtype()) << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ")";
}

}  // namespace kiln

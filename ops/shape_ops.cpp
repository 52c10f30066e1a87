// Joining and indexing: cat, stack, split, chunk, index_select.
#include "ops/internal.h"

namespace kiln {
using namespace detail;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  OpScope scope("cat", tensors);
  scope.attr("dim", dim_in);
  KILN_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  const Tensor& first = tensors[0];
  KILN_CHECK(first.dim() > 0, "cat: zero-dim tensors cannot be concatenated");
  const int64_t dim = wrap_dim(dim_in, first.dim(), "cat");
  DType dt = first.dtype();
  Shape shape = first.sizes();
  shape[static_cast<size_t>(dim)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same_device(first, t, "cat");
    KILN_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has ", t.dim(), " dims, tensor 0 has ", first.dim());
    for (int64_t d = 0; d < t.dim(); ++d)
      KILN_CHECK(d == dim || t.size(d) == first.size(d), "cat: sizes must match except in dimension ", dim,
                 "; tensor ", i, " has shape ", shape_str(t.sizes()), ", tensor 0 has ", shape_str(first.sizes()));
    dt = promote_types(dt, t.dtype());
    shape[static_cast<size_t>(dim)] += t.size(dim);
  }
  Tensor out = empty_tensor(shape, dt, first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    Shape st = out.strides();
    Shape part = out.sizes();
    part[static_cast<size_t>(dim)] = t.size(dim);
    Tensor dst = make_tensor(out.storage(), part, st, at * out.stride(dim), dt);
    if (t.numel() > 0) backend(out.device()).copy(dst, t);
    at += t.size(dim);
    sizes.push_back(t.size(dim));
  }
  if (should_record(tensors)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    record("cat", tensors, {out}, [=](const TensorList& g) {
      TensorList gs;
      int64_t pos = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        gs.push_back(raw_cast(narrow(g[0], dim, pos, sizes[i]), dtypes[i]));
        pos += sizes[i];
      }
      return gs;
    });
  }
  return scope.out(out);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  OpScope scope("stack", tensors);
  scope.attr("dim", dim);
  KILN_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    KILN_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: all tensors must have the same shape; tensor ", i,
               " has ", shape_str(tensors[i].sizes()), ", tensor 0 has ", shape_str(tensors[0].sizes()));
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return scope.out(cat(parts, d));
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  OpScope scope("split", x);
  scope.attr("sizes", sizes);
  scope.attr("dim", dim_in);
  check_defined(x, "split", "x");
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split: negative section size ", s);
    total += s;
  }
  KILN_CHECK(total == x.size(dim), "split: section sizes ", shape_str(sizes), " sum to ", total, " but dimension ",
             dim, " has size ", x.size(dim));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, dim, at, s));
    at += s;
  }
  return scope.out(out);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined(x, "split", "x");
  KILN_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "split"));
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  OpScope scope("chunk", x);
  scope.attr("chunks", chunks);
  scope.attr("dim", dim);
  check_defined(x, "chunk", "x");
  KILN_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  KILN_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  return scope.out(split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim));
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  OpScope scope("index_select", x, index);
  scope.attr("dim", dim_in);
  check_defined(x, "index_select", "x");
  check_defined(index, "index_select", "index");
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", shape_str(index.sizes()));
  KILN_CHECK(is_integral(index.dtype()), "index_select: index must be int64 or int32, got ",
             dtype_name(index.dtype()));
  check_same_device(x, index, "index_select");
  KILN_CHECK(x.dim() > 0, "index_select: cannot index a 0-dim tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "index_select");
  const int64_t n = x.size(dim);
  Tensor idx = raw_contiguous(raw_cast(reshape(index.detach(), {-1}), DType::Int64));
  {
    const Tensor host = idx.device().is_cpu() ? idx : to_device(idx, kCPU);
    const int64_t* p = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < host.numel(); ++i)
      KILN_CHECK(p[i] >= 0 && p[i] < n, "index_select: index ", p[i], " at position ", i,
                 " is out of range for dimension ", dim, " of size ", n);
  }
  Shape shape = x.sizes();
  shape[static_cast<size_t>(dim)] = idx.numel();
  Tensor out = empty_tensor(shape, x.dtype(), x.device());
  if (out.numel() > 0) backend(x.device()).index_select(out, raw_contiguous(x), dim, idx);
  if (should_record({x})) {
    const Shape in = x.sizes();
    const DType dt = x.dtype();
    const Device dev = x.device();
    record("index_select", {x}, {out}, [=](const TensorList& g) {
      Tensor gx = raw_zeros(in, dt, dev);
      if (g[0].numel() > 0) backend(dev).index_add(gx, dim, idx, raw_contiguous(raw_cast(g[0], dt)));
      return TensorList{gx};
    });
  }
  return scope.out(out);
}

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("cat", true, [] {
  return S{{"dim 1", {sample_tensor({2, 3}, 110), sample_tensor({2, 1}, 111), sample_tensor({2, 2}, 112)},
            [](const L& x) { return cat({x[0], x[1], x[2]}, 1); }}};
});
KILN_REGISTER_OP("stack", true, [] {
  return S{{"dim 1", {sample_tensor({2, 3}, 113), sample_tensor({2, 3}, 114)},
            [](const L& x) { return stack({x[0], x[1]}, 1); }}};
});
KILN_REGISTER_OP("split", true, [] {
  return S{{"uneven sizes", {sample_tensor({5, 3}, 115)}, [](const L& x) {
              auto p = split(x[0], 2, 0);  // 2, 2, 1 rows
              return cat({mul(p[0], 2.0), p[1], mul(p[2], -1.0)}, 0);
            }}};
});
KILN_REGISTER_OP("chunk", true, [] {
  return S{{"3 chunks of dim 1", {sample_tensor({2, 6}, 116)}, [](const L& x) {
              auto p = chunk(x[0], 3, 1);
              return add(mul(p[0], p[1]), p[2]);
            }}};
});
KILN_REGISTER_OP("index_select", true, [] {
  return S{{"repeated indices dim 1", {sample_tensor({3, 4}, 117)},
            [](const L& x) { return index_select(x[0], 1, tensor_from({3, 0, 3, 1})); }}};
});

}  // namespace kiln

// Neural-network ops with fused kernels: softmax, log_softmax, layer_norm,
// cross_entropy; and composites: embedding (index_select + index_add backward)
// and dropout (Philox mask). tests/test_nn_ops.cpp checks each fused kernel
// against the same op composed from primitives.
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// Moves `dim` last and makes the result contiguous: the (R, C) row layout the
// row kernels take. Returns the permutation used (empty if none).
Tensor rows_last(const Tensor& x, int64_t dim, Shape& perm) {
  perm.clear();
  if (dim == x.dim() - 1 || x.dim() == 0) return raw_contiguous(x);
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != dim) perm.push_back(i);
  perm.push_back(dim);
  Shape s, st;
  for (int64_t d : perm) { s.push_back(x.size(d)); st.push_back(x.stride(d)); }
  return raw_contiguous(make_tensor(x.storage(), s, st, x.offset(), x.dtype()));
}

Tensor undo_perm(const Tensor& y, const Shape& perm) {
  if (perm.empty()) return y;
  Shape inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  Shape s, st;
  for (int64_t d : inv) { s.push_back(y.size(d)); st.push_back(y.stride(d)); }
  return make_tensor(y.storage(), s, st, y.offset(), y.dtype());
}

Tensor softmax_impl(const Tensor& x, int64_t dim_in, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(x, name, "x");
  KILN_CHECK(is_floating(x.dtype()), name, ": expected a floating-point tensor, got ", dtype_name(x.dtype()));
  const int64_t dim = wrap_dim(dim_in, x.dim(), name);
  if (x.dim() == 0) return reshape(softmax_impl(reshape(x, {1}), 0, log), {});
  Shape perm;
  Tensor rows = rows_last(x, x.dim() == 0 ? 0 : dim, perm);
  Tensor y_rows = empty_tensor(rows.sizes(), x.dtype(), x.device());
  if (rows.numel() > 0) backend(x.device()).softmax(y_rows, rows.dim() == 0 ? raw_view(rows, {1}) : rows, log);
  Tensor out = undo_perm(y_rows, perm);
  if (should_record({x})) {
    SavedTensor sy(y_rows, name);
    record(name, {x}, {out}, [=](const TensorList& g) {
      Shape p2;
      Tensor dy = rows_last(g[0], x.dim() == 0 ? 0 : dim, p2);
      Tensor y = sy.get();
      Tensor dx = empty_tensor(y.sizes(), y.dtype(), y.device());
      if (y.numel() > 0) backend(y.device()).softmax_backward(dx, y, raw_cast(dy, y.dtype()), log);
      return TensorList{undo_perm(dx, perm)};
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x_in, int64_t dim) {
  OpScope scope("softmax", x_in);
  scope.attr("dim", dim);
  Tensor x = x_in;
  autocast::cast_inputs("softmax", x);  // Note [Autocast policy]
  return scope.out(softmax_impl(x, dim, false));
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  OpScope scope("log_softmax", x_in);
  scope.attr("dim", dim);
  Tensor x = x_in;
  autocast::cast_inputs("log_softmax", x);
  return scope.out(softmax_impl(x, dim, true));
}

namespace {

// mask as the fused kernel takes it, (Rm, C) rows of x's last dim with x's
// R rows a multiple of Rm: a contiguous mask of x's dtype whose leading dims
// are either all 1 or x's leading dims up to some point and 1 after it
// ((B, 1, 1, T) for x (B, NH, T, T)). Undefined when the kernel cannot take it.
Tensor mask_rows(const Tensor& x, const Tensor& mask) {
  if (mask.dim() != x.dim() || mask.dtype() != x.dtype() || !mask.is_contiguous() || mask.size(-1) != x.size(-1))
    return Tensor();
  int64_t d = 0, rows = 1;
  while (d < x.dim() - 1 && mask.size(d) == x.size(d)) rows *= mask.size(d++);
  for (int64_t e = d; e < x.dim() - 1; ++e)
    if (mask.size(e) != 1) return Tensor();
  return raw_view(mask, {rows, x.size(-1)});
}

}  // namespace

Tensor scaled_masked_softmax(const Tensor& x_in, double scale, const Tensor& mask_in) {
  OpScope scope("scaled_masked_softmax", x_in, mask_in);
  scope.attr("scale", scale);
  Tensor x = x_in, mask = mask_in;
  autocast::cast_inputs("scaled_masked_softmax", x, mask);  // Note [Autocast policy]
  check_defined(x, "scaled_masked_softmax", "x");
  KILN_CHECK(is_floating(x.dtype()) && x.dim() >= 1, "scaled_masked_softmax: expected a floating-point tensor of at "
             "least one dim, got ", x.str());
  if (mask.defined()) check_same_device(x, mask, "scaled_masked_softmax");
  Backend& be = backend(x.device());
  const Tensor mrows = mask.defined() ? mask_rows(x, mask) : Tensor();
  const bool fused = be.has_masked_softmax() && x.numel() > 0 && (!mask.defined() || mrows.defined()) &&
                     !(mask.defined() && grad_enabled() && mask.requires_grad());
  if (!fused) {  // the composition (the CPU; the oracle of the fused kernels)
    Tensor s = mul(x, scale);
    return scope.out(softmax(mask.defined() ? add(s, mask) : s, -1));
  }
  const int64_t C = x.size(-1);
  Tensor xr = raw_view(raw_contiguous(x), {x.numel() / C, C});
  Tensor y = empty_tensor(xr.sizes(), x.dtype(), x.device());
  be.scaled_masked_softmax(y, xr, mrows, scale);
  Tensor out = raw_view(y, x.sizes());
  if (should_record({x})) {
    SavedTensor sy(y, "scaled_masked_softmax");
    record("scaled_masked_softmax", {x}, {out}, [=](const TensorList& g) {
      // dx = scale * softmax_backward(y, dy): the composition's two steps in its order.
      Tensor yy = sy.get();
      Tensor dy = raw_view(raw_contiguous(raw_cast(g[0], yy.dtype())), yy.sizes());
      Tensor dx = empty_tensor(yy.sizes(), yy.dtype(), yy.device());
      backend(yy.device()).softmax_backward(dx, yy, dy, false);
      return TensorList{raw_view(mul(dx, scale), x.sizes())};
    });
  }
  return scope.out(out);
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  OpScope scope("layer_norm", x_in, weight_in, bias_in);
  scope.attr("normalized_shape", normalized_shape);
  scope.attr("eps", eps);
  Tensor x = x_in, weight = weight_in, bias = bias_in;
  autocast::cast_inputs("layer_norm", x, weight, bias);  // Note [Autocast policy]
  check_defined(x, "layer_norm", "x");
  KILN_CHECK(is_floating(x.dtype()), "layer_norm: expected a floating-point tensor, got ", dtype_name(x.dtype()));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim(), "layer_norm: normalized_shape ", shape_str(normalized_shape),
             " does not fit input of shape ", shape_str(x.sizes()));
  int64_t C = 1;
  for (int64_t i = 0; i < k; ++i) {
    KILN_CHECK(x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)], "layer_norm: normalized_shape ",
               shape_str(normalized_shape), " does not match the trailing dims of input ", shape_str(x.sizes()));
    C *= normalized_shape[static_cast<size_t>(i)];
  }
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) {
      KILN_CHECK(p->sizes() == normalized_shape, "layer_norm: weight/bias of shape ", shape_str(p->sizes()),
                 " for normalized_shape ", shape_str(normalized_shape));
      check_same_device(x, *p, "layer_norm");
    }
  KILN_CHECK(eps > 0, "layer_norm: eps must be positive, got ", eps);
  const int64_t R = C == 0 ? 0 : x.numel() / C;
  const DType stat = x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor xr = raw_view(x, {R, C});
  Tensor w = weight.defined() ? raw_contiguous(raw_cast(weight, x.dtype())) : Tensor();
  Tensor b = bias.defined() ? raw_contiguous(raw_cast(bias, x.dtype())) : Tensor();
  Tensor y = empty_tensor({R, C}, x.dtype(), x.device());
  Tensor mean = empty_tensor({R}, stat, x.device()), rstd = empty_tensor({R}, stat, x.device());
  if (R > 0 && C > 0) backend(x.device()).layer_norm(y, mean, rstd, xr, w, b, eps);
  Tensor out = raw_view(y, x.sizes());
  if (should_record({x, weight, bias})) {
    const auto need = grad_mask({x, weight, bias});
    SavedTensor sx(xr, "layer_norm"), sw(w, "layer_norm");
    const Tensor m = mean, r = rstd;
    const Shape xs = x.sizes();
    const DType wd = weight.defined() ? weight.dtype() : x.dtype();
    record("layer_norm", {x, weight, bias}, {out}, [=](const TensorList& g) {
      Tensor xv = sx.get();
      Tensor dy = raw_contiguous(raw_cast(raw_view(g[0], {R, C}), xv.dtype()));
      Tensor dx = empty_tensor({R, C}, xv.dtype(), xv.device());
      Tensor dw = need[1] ? empty_tensor({C}, xv.dtype(), xv.device()) : Tensor();
      Tensor db = need[2] ? empty_tensor({C}, xv.dtype(), xv.device()) : Tensor();
      backend(xv.device()).layer_norm_backward(dx, dw, db, dy, xv, m, r, sw.get());
      return TensorList{need[0] ? raw_view(dx, xs) : Tensor(),
                        need[1] ? raw_cast(raw_view(dw, normalized_shape), wd) : Tensor(),
                        need[2] ? raw_cast(raw_view(db, normalized_shape), wd) : Tensor()};
    });
  }
  return scope.out(out);
}

Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx) {
  OpScope scope("embedding", weight, ids);
  scope.attr("padding_idx", padding_idx);
  check_defined(weight, "embedding", "weight");
  check_defined(ids, "embedding", "ids");
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be (num_embeddings, dim), got ", shape_str(weight.sizes()));
  KILN_CHECK(is_integral(ids.dtype()), "embedding: ids must be int64 or int32, got ", dtype_name(ids.dtype()));
  check_same_device(weight, ids, "embedding");
  const int64_t V = weight.size(0), C = weight.size(1);
  Tensor flat = raw_contiguous(raw_cast(reshape(ids.detach(), {-1}), DType::Int64));
  // On the CPU at once; on CUDA reported at the next host read (Note [Lazy index checks]).
  if (flat.numel() > 0)
    backend(flat.device()).check_index(flat, V, std::nullopt, {"embedding", "id", "embeddings"}, Tensor());
  if (padding_idx) KILN_CHECK(*padding_idx >= 0 && *padding_idx < V, "embedding: padding_idx ", *padding_idx,
                              " out of range for ", V, " embeddings");
  Tensor rows = empty_tensor({flat.numel(), C}, weight.dtype(), weight.device());
  if (rows.numel() > 0) backend(weight.device()).index_select(rows, raw_contiguous(weight), 0, flat);
  Shape out_shape = ids.sizes();
  out_shape.push_back(C);
  Tensor out = raw_view(rows, out_shape);
  if (should_record({weight})) {
    const DType wd = weight.dtype();
    const Device dev = weight.device();
    record("embedding", {weight}, {out}, [=](const TensorList& g) {
      Tensor gr = raw_contiguous(raw_view(g[0], {flat.numel(), C}));
      if (padding_idx) {
        Tensor keep = raw_view(ne(flat, static_cast<double>(*padding_idx)), {flat.numel(), 1});
        gr = raw_contiguous(where(keep, gr, 0.0));
      }
      Tensor gw = raw_zeros({V, C}, wd, dev);
      if (gr.numel() > 0) backend(dev).index_add(gw, 0, flat, raw_cast(gr, wd));
      return TensorList{gw};
    });
  }
  return scope.out(out);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  OpScope scope("dropout", x);
  scope.attr("p", p);
  scope.attr("training", training);
  check_defined(x, "dropout", "x");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return scope.out(x);
  if (p == 1.0) return scope.out(mul(x, 0.0));
  Tensor keep = bernoulli(x.sizes(), 1.0 - p, TensorOptions(x.dtype(), x.device()), gen);
  return scope.out(mul(x, mul(keep, 1.0 / (1.0 - p))));
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     const std::string& reduction) {
  OpScope scope("cross_entropy", logits_in, target);
  scope.attr("ignore_index", ignore_index);
  scope.attr("label_smoothing", label_smoothing);
  scope.attr("reduction", reduction);
  Tensor logits = logits_in;
  autocast::cast_inputs("cross_entropy", logits);  // Note [Autocast policy]
  check_defined(logits, "cross_entropy", "logits");
  check_defined(target, "cross_entropy", "target");
  KILN_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating-point, got ",
             dtype_name(logits.dtype()));
  KILN_CHECK(is_integral(target.dtype()), "cross_entropy: target must hold class indices (int64), got ",
             dtype_name(target.dtype()));
  KILN_CHECK(logits.dim() >= 1, "cross_entropy: logits need a class dim");
  Shape lead(logits.sizes().begin(), logits.sizes().end() - 1);
  KILN_CHECK(target.sizes() == lead, "cross_entropy: target of shape ", shape_str(target.sizes()),
             " does not match logits ", shape_str(logits.sizes()), " (expected ", shape_str(lead), ")");
  KILN_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none",
             "cross_entropy: reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ",
             label_smoothing);
  check_same_device(logits, target, "cross_entropy");
  const int64_t C = logits.size(-1), N = target.numel();
  Tensor t = raw_contiguous(raw_cast(reshape(target.detach(), {-1}), DType::Int64));
  // The targets other than ignore_index, counted where they live: the CPU
  // checks them at once, CUDA at the next host read (Note [Lazy index checks]).
  Tensor counted;  // for the mean
  if (reduction == "mean")
    counted = N > 0 ? empty_tensor({}, DType::Int64, t.device()) : raw_zeros({}, DType::Int64, t.device());
  if (N > 0)
    backend(t.device()).check_index(t, C, ignore_index, {"cross_entropy", "target", "classes"}, counted);
  Tensor x = raw_contiguous(raw_view(logits, {N, C}));
  Tensor loss = empty_tensor({N}, logits.dtype(), logits.device());
  Tensor lse = empty_tensor({N}, logits.dtype(), logits.device());
  if (N > 0) backend(logits.device()).cross_entropy(loss, lse, x, t, ignore_index, label_smoothing);
  if (should_record({logits})) {
    SavedTensor sx(x, "cross_entropy");
    const Shape ls = logits.sizes();
    record("cross_entropy", {logits}, {loss}, [=](const TensorList& g) {
      Tensor xv = sx.get();
      Tensor dl = empty_tensor({N, C}, xv.dtype(), xv.device());
      if (N > 0)
        backend(xv.device()).cross_entropy_backward(dl, raw_contiguous(raw_cast(g[0], xv.dtype())), xv, lse, t,
                                                    ignore_index, label_smoothing);
      return TensorList{raw_view(dl, ls)};
    });
  }
  if (reduction == "none") return scope.out(reshape(loss, lead));
  Tensor total = sum(loss);
  if (reduction == "sum") return scope.out(total);
  // NaN when every target is ignored, as PyTorch. The same quotient either way
  // (the count rounded to total's dtype once); a device count is never read back.
  if (counted.device().is_cpu()) return scope.out(div(total, static_cast<double>(counted.item<int64_t>())));
  return scope.out(div(total, raw_cast(counted, total.dtype())));
}

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("softmax", true, [] {
  return S{{"last dim", {sample_tensor({3, 5}, 90, -3, 3)}, [](const L& x) { return softmax(x[0], -1); }},
           {"dim 0 of 3-D", {sample_tensor({4, 2, 3}, 91, -3, 3)}, [](const L& x) { return softmax(x[0], 0); }}};
});
KILN_REGISTER_OP("log_softmax", true, [] {
  return S{{"last dim", {sample_tensor({3, 5}, 92, -3, 3)}, [](const L& x) { return log_softmax(x[0], 1); }},
           {"dim 1 of 3-D", {sample_tensor({2, 4, 3}, 93, -3, 3)}, [](const L& x) { return log_softmax(x[0], 1); }}};
});
KILN_REGISTER_OP("scaled_masked_softmax", true, [] {
  return S{{"no mask", {sample_tensor({3, 5}, 80, -3, 3)}, [](const L& x) { return scaled_masked_softmax(x[0], 0.5); }},
           {"key mask (B, 1, 1, T)", {sample_tensor({2, 3, 4, 5}, 81, -3, 3)}, [](const L& x) {
              Tensor mask = tensor_from({0, 0, -10000, 0, -10000, 0, 0, 0, 0, -10000}, {2, 1, 1, 5}, x[0].dtype());
              return scaled_masked_softmax(x[0], 0.125, mask);
            }}};
});
KILN_REGISTER_OP("layer_norm", true, [] {
  return S{{"affine", {sample_tensor({3, 6}, 94), sample_tensor({6}, 95), sample_tensor({6}, 96)},
            [](const L& x) { return layer_norm(x[0], {6}, x[1], x[2], 1e-5); }},
           {"no affine, 2 dims", {sample_tensor({2, 3, 4}, 97)}, [](const L& x) { return layer_norm(x[0], {3, 4}); }}};
});
KILN_REGISTER_OP("embedding", true, [] {
  // padding_idx deliberately breaks the true gradient; tests/test_nn_ops.cpp covers it.
  return S{{"repeated ids", {sample_tensor({5, 3}, 98)}, [](const L& x) {
              Tensor ids = tensor_from({1, 0, 3, 1, 4, 2}, {2, 3});
              return embedding(x[0], ids);
            }}};
});
KILN_REGISTER_OP("dropout", true, [] {
  return S{{"p=0.3 fixed seed", {sample_tensor({4, 5}, 99)}, [](const L& x) {
              Generator gen(1234);
              return dropout(x[0], 0.3, true, &gen);
            }}};
});
KILN_REGISTER_OP("cross_entropy", true, [] {
  return S{{"mean, ignore_index", {sample_tensor({4, 5}, 100, -2, 2)}, [](const L& x) {
              return cross_entropy(x[0], tensor_from({1, -100, 4, 0}), -100);
            }},
           {"label smoothing, 3-D, none", {sample_tensor({2, 3, 4}, 101, -2, 2)}, [](const L& x) {
              return cross_entropy(x[0], tensor_from({0, 3, 2, 1, 1, 0}, {2, 3}), -100, 0.1, "none");
            }}};
});

}  // namespace kiln

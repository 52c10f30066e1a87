// Factories: new tensors filled with constants, ranges, given values or
// random numbers from a Philox generator (Note [Random numbers]).
#include <cmath>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.set_requires_grad(true);
  return t;
}

DType dtype_or(const TensorOptions& o, DType d) { return o.dtype.value_or(d); }

void check_shape(const Shape& shape, const char* op) {
  for (int64_t s : shape) KILN_CHECK(s >= 0, op, ": invalid shape ", shape_str(shape), ": negative size ", s);
}

PhiloxState next_state(Generator* gen) { return (gen ? *gen : default_generator()).next(); }

}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) {
  OpScope scope("empty");
  scope.attr("shape", shape);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "empty");
  return scope.out(finish(empty_tensor(shape, dtype_or(opts, DType::Float32), opts.device), opts));
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  OpScope scope("full");
  scope.attr("shape", shape);
  scope.attr("value", value);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "full");
  Tensor t = empty_tensor(shape, dtype_or(opts, DType::Float32), opts.device);
  backend(opts.device).fill(t, value);
  return scope.out(finish(t, opts));
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

Tensor arange(double end, TensorOptions opts) { return arange(0.0, end, 1.0, opts); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  OpScope scope("arange");
  scope.attr("start", start);
  scope.attr("end", end);
  scope.attr("step", step);
  scope.attr("dtype", opts.dtype);
  KILN_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             "arange: invalid range start=", start, " end=", end, " step=", step);
  KILN_CHECK((end - start) / step >= 0, "arange: step ", step, " has the wrong sign for start=", start,
             " end=", end);
  const bool integral = start == std::floor(start) && end == std::floor(end) && step == std::floor(step);
  const DType dt = dtype_or(opts, integral ? DType::Int64 : DType::Float32);
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty_tensor({n}, dt, opts.device);
  backend(opts.device).arange(t, start, step);
  return scope.out(finish(t, opts));
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  const Shape s = shape.empty() && values.size() != 1 ? Shape{static_cast<int64_t>(values.size())} : shape;
  KILN_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape_str(s));
  Tensor host = empty_tensor(s, DType::Float64, kCPU);
  std::copy(values.begin(), values.end(), host.data_ptr<double>());
  Tensor out = to_device(raw_cast(host, dtype_or(opts, DType::Float32)), opts.device);
  return finish(out, opts);
}

Tensor tensor_from(const std::vector<int64_t>& values, const Shape& shape, TensorOptions opts) {
  const Shape s = shape.empty() && values.size() != 1 ? Shape{static_cast<int64_t>(values.size())} : shape;
  KILN_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape_str(s));
  Tensor host = empty_tensor(s, DType::Int64, kCPU);
  std::copy(values.begin(), values.end(), host.data_ptr<int64_t>());
  Tensor out = to_device(raw_cast(host, dtype_or(opts, DType::Int64)), opts.device);
  return finish(out, opts);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  OpScope scope("rand");
  scope.attr("shape", shape);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "rand");
  const DType dt = dtype_or(opts, DType::Float32);
  KILN_CHECK(is_floating(dt), "rand: dtype must be floating-point, got ", dtype_name(dt));
  Tensor t = empty_tensor(shape, dt, opts.device);
  backend(opts.device).uniform(t, 0.0, 1.0, next_state(gen));
  return scope.out(finish(t, opts));
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  OpScope scope("randn");
  scope.attr("shape", shape);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "randn");
  const DType dt = dtype_or(opts, DType::Float32);
  KILN_CHECK(is_floating(dt), "randn: dtype must be floating-point, got ", dtype_name(dt));
  Tensor t = empty_tensor(shape, dt, opts.device);
  backend(opts.device).normal(t, 0.0, 1.0, next_state(gen));
  return scope.out(finish(t, opts));
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  OpScope scope("randint");
  scope.attr("low", low);
  scope.attr("high", high);
  scope.attr("shape", shape);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "randint");
  KILN_CHECK(low < high, "randint: empty range [", low, ", ", high, ")");
  Tensor t = empty_tensor(shape, dtype_or(opts, DType::Int64), opts.device);
  backend(opts.device).randint(t, low, high, next_state(gen));
  return scope.out(finish(t, opts));
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions opts, Generator* gen) {
  OpScope scope("bernoulli");
  scope.attr("shape", shape);
  scope.attr("p", p);
  scope.attr("dtype", opts.dtype);
  check_shape(shape, "bernoulli");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: probability must be in [0, 1], got ", p);
  Tensor t = empty_tensor(shape, dtype_or(opts, DType::Float32), opts.device);
  backend(opts.device).bernoulli(t, p, next_state(gen));
  return scope.out(finish(t, opts));
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions(t.dtype(), t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions(t.dtype(), t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions(t.dtype(), t.device())); }
Tensor full_like(const Tensor& t, double v) { return full(t.sizes(), v, TensorOptions(t.dtype(), t.device())); }
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.sizes(), TensorOptions(t.dtype(), t.device()), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) {
  return randn(t.sizes(), TensorOptions(t.dtype(), t.device()), gen);
}

}  // namespace kiln

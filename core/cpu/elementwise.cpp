// CPU elementwise kernels: copy/cast, fill, arange, unary, binary, where.
// Each kernel picks a functor once per call; the strided loop (loops.h) hands
// it runs along the innermost dim, and the contiguous case is a plain loop the
// compiler vectorises.
#include <cmath>
#include <utility>

#include "core/activation_math.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/vec_math.h"

namespace kiln::cpu {
namespace {

template <typename T> inline constexpr bool is_low_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Converts between any two kiln element types (bool: nonzero -> true).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(v) != compute_t<From>(0);
  } else if constexpr (is_low_float<To>) {
    return To(static_cast<float>(static_cast<compute_t<From>>(v)));
  } else if constexpr (is_low_float<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// One run of out[i] = f(in0[i], ...): a plain loop when every operand is
// contiguous, else byte strides (0 for broadcast operands).
template <typename TOut, typename... TIn, typename F, size_t... I>
inline void map_run(char* const* p, const int64_t* s, int64_t n, const F& f, std::index_sequence<I...>) {
  const bool contiguous = s[0] == static_cast<int64_t>(sizeof(TOut)) &&
                          ((s[I + 1] == static_cast<int64_t>(sizeof(TIn))) && ...);
  if (contiguous) {
    TOut* out = reinterpret_cast<TOut*>(p[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = f(reinterpret_cast<const TIn*>(p[I + 1])[i]...);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<TOut*>(p[0] + i * s[0]) = f(*reinterpret_cast<const TIn*>(p[I + 1] + i * s[I + 1])...);
}

template <typename TOut, typename... TIn, typename F>
void map_typed(const StridedLoop<1 + sizeof...(TIn)>& L, F f) {
  for_each_chunk(L, [&](char* const* p, const int64_t* s, int64_t n) {
    map_run<TOut, TIn...>(p, s, n, f, std::index_sequence_for<TIn...>{});
  });
}

template <typename T> using C = compute_t<T>;

template <typename T>
inline T from_c(C<T> v) { return static_cast<T>(v); }

template <typename T>
void unary_typed(UnaryOp op, const StridedLoop<2>& L) {
  using A = C<T>;
  auto go = [&](auto f) { map_typed<T, T>(L, [f](T x) { return from_c<T>(f(static_cast<A>(x))); }); };
  if constexpr (std::is_same_v<T, bool>) {
    fail("unary ", static_cast<int>(op), ": not defined for bool");
  } else if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case UnaryOp::Neg: return go([](A x) { return static_cast<A>(-x); });
      case UnaryOp::Abs: return go([](A x) { return x < 0 ? static_cast<A>(-x) : x; });
      case UnaryOp::Relu: return go([](A x) { return x > 0 ? x : A(0); });
      default: fail("unary op needs a floating-point tensor, got ", dtype_name(dtype_of<T>()));
    }
  } else {
    switch (op) {
      case UnaryOp::Neg: return go([](A x) { return -x; });
      case UnaryOp::Exp: return go([](A x) { return vexp(x); });
      case UnaryOp::Log: return go([](A x) { return std::log(x); });
      case UnaryOp::Sqrt: return go([](A x) { return std::sqrt(x); });
      case UnaryOp::Rsqrt: return go([](A x) { return A(1) / std::sqrt(x); });
      case UnaryOp::Tanh: return go([](A x) { return vtanh(x); });
      case UnaryOp::Erf: return go([](A x) { return verf(x); });
      case UnaryOp::Sigmoid: return go([](A x) { return act::sigmoid<VecMath>(x); });
      case UnaryOp::Relu: return go([](A x) { return x > A(0) ? x : A(0); });
      case UnaryOp::Abs: return go([](A x) { return std::abs(x); });
      case UnaryOp::Gelu: return go([](A x) { return act::gelu<VecMath>(x); });
      case UnaryOp::GeluTanh: return go([](A x) { return act::gelu_tanh<VecMath>(x); });
      case UnaryOp::LogicalNot: break;
    }
    fail("unary: unsupported op");
  }
}

template <typename T>
void binary_typed(BinaryOp op, const StridedLoop<3>& L) {
  using A = C<T>;
  auto go = [&](auto f) {
    map_typed<T, T, T>(L, [f](T a, T b) { return from_c<T>(f(static_cast<A>(a), static_cast<A>(b))); });
  };
  auto cmp = [&](auto f) {
    map_typed<bool, T, T>(L, [f](T a, T b) { return f(static_cast<A>(a), static_cast<A>(b)); });
  };
  switch (op) {
    case BinaryOp::Eq: return cmp([](A a, A b) { return a == b; });
    case BinaryOp::Ne: return cmp([](A a, A b) { return a != b; });
    case BinaryOp::Lt: return cmp([](A a, A b) { return a < b; });
    case BinaryOp::Le: return cmp([](A a, A b) { return a <= b; });
    case BinaryOp::Gt: return cmp([](A a, A b) { return a > b; });
    case BinaryOp::Ge: return cmp([](A a, A b) { return a >= b; });
    default: break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinaryOp::Mul: case BinaryOp::Minimum: return go([](A a, A b) { return a && b; });
      case BinaryOp::Add: case BinaryOp::Maximum: return go([](A a, A b) { return a || b; });
      default: fail("binary op not defined for bool tensors");
    }
  } else {
    switch (op) {
      case BinaryOp::Add: return go([](A a, A b) { return static_cast<A>(a + b); });
      case BinaryOp::Sub: return go([](A a, A b) { return static_cast<A>(a - b); });
      case BinaryOp::Mul: return go([](A a, A b) { return static_cast<A>(a * b); });
      case BinaryOp::Maximum:
        return go([](A a, A b) { return (a != a || a > b) ? a : b; });  // NaN propagates
      case BinaryOp::Minimum:
        return go([](A a, A b) { return (a != a || a < b) ? a : b; });
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case BinaryOp::Div:
          // integer division by zero is a caller error (ops/ checks); guard anyway
          return go([](A a, A b) { return b == 0 ? A(0) : static_cast<A>(a / b); });
        default: fail("binary op needs floating-point tensors, got ", dtype_name(dtype_of<T>()));
      }
    } else {
      switch (op) {
        case BinaryOp::Div: return go([](A a, A b) { return a / b; });
        case BinaryOp::Pow: return go([](A a, A b) { return std::pow(a, b); });
        case BinaryOp::ReluBackward: return go([](A x, A dy) { return x > A(0) ? dy : A(0); });
        case BinaryOp::GeluBackward: return go([](A x, A dy) { return dy * act::gelu_grad<VecMath>(x); });
        case BinaryOp::GeluTanhBackward: return go([](A x, A dy) { return dy * act::gelu_tanh_grad<VecMath>(x); });
        case BinaryOp::TanhBackward: return go([](A y, A dy) { return dy * (A(1) - y * y); });
        case BinaryOp::SigmoidBackward: return go([](A y, A dy) { return dy * y * (A(1) - y); });
        default: break;
      }
      fail("binary: unsupported op");
    }
  }
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  StridedLoop<2> L = make_loop<2>({&dst, &src});
  dispatch_all(dst.dtype(), "copy", [&](auto to) {
    using To = typename decltype(to)::type;
    dispatch_all(src.dtype(), "copy", [&](auto from) {
      using From = typename decltype(from)::type;
      map_typed<To, From>(L, [](From v) { return convert<To, From>(v); });
    });
  });
}

void fill(const Tensor& dst, double value) {
  StridedLoop<1> L = make_loop<1>({&dst});
  dispatch_all(dst.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T, double>(value);
    for_each_chunk(L, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

void arange(const Tensor& out, double start, double step) {
  dispatch_all(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    parallel_for(out.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = convert<T, double>(start + static_cast<double>(i) * step);
    });
  });
}

void unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  StridedLoop<2> L = make_loop<2>({&out, &in});
  if (op == UnaryOp::LogicalNot) {
    dispatch_all(in.dtype(), "logical_not", [&](auto tag) {
      using T = typename decltype(tag)::type;
      map_typed<bool, T>(L, [](T v) { return !convert<bool, T>(v); });
    });
    return;
  }
  dispatch_all(in.dtype(), "unary", [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, L); });
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  StridedLoop<3> L = make_loop<3>({&out, &a, &b});
  dispatch_all(a.dtype(), "binary", [&](auto tag) { binary_typed<typename decltype(tag)::type>(op, L); });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  StridedLoop<4> L = make_loop<4>({&out, &cond, &a, &b});
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_typed<T, bool, T, T>(L, [](bool c, T x, T y) { return c ? x : y; });
  });
}

}  // namespace kiln::cpu

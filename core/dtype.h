// Element types, their sizes and names, 16-bit float storage types, type
// promotion and the dtype dispatch helper used by every kernel.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/core/error.h"

namespace kiln {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };
inline constexpr int kNumDTypes = 7;

// IEEE binary16 storage; arithmetic happens in float (Note [Low-precision compute]).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a numeric type
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// bfloat16 storage: the top 16 bits of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

// Note [Low-precision compute]: float16 and bfloat16 are storage types. Every
// kernel loads them into float, computes and accumulates in float, and rounds
// once on store. compute_t<T> names that arithmetic type.
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <typename T> using compute_t = typename ComputeType<T>::type;

size_t element_size(DType t);
const char* dtype_name(DType t);  // "float32", "int64", ...
bool is_floating(DType t);        // float32/64/16, bfloat16
bool is_integral(DType t);        // int32, int64 (not bool)

// NumPy/PyTorch-style promotion of two tensor dtypes: bool < ints < floats;
// float16 with bfloat16 gives float32.
DType promote_types(DType a, DType b);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

template <typename T> struct TypeTag { using type = T; };

// dispatch(dtype, op, f): calls f(TypeTag<T>{}) with T the C++ type of dtype.
template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Float16: return f(TypeTag<Half>{});
    case DType::BFloat16: return f(TypeTag<BFloat16>{});
    case DType::Int32: return f(TypeTag<int32_t>{});
    case DType::Int64: return f(TypeTag<int64_t>{});
    case DType::Bool: return f(TypeTag<bool>{});
  }
  fail(op, ": unknown dtype");
}

// Floating dtypes only; anything else is an error naming the op.
template <typename F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Float16: return f(TypeTag<Half>{});
    case DType::BFloat16: return f(TypeTag<BFloat16>{});
    default: break;
  }
  fail(op, ": expected a floating-point tensor, got ", dtype_name(t));
}

}  // namespace kiln

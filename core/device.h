// Devices: where a tensor's storage lives. CUDA is a backend behind one
// interface (core/backend.h, internal) in a library of its own; a build
// without CUDA answers every CUDA request with kiln::Error("... built without
// CUDA").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT
  // Parses "cpu", "cuda", "cuda:1"; anything else is a kiln::Error.
  static Device parse(const std::string& s);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};

std::ostream& operator<<(std::ostream& os, const Device& d);

// True when the CUDA backend is there: kiln was built with it and its library
// (libkiln_cuda.so) is loaded, which this call does on first use (Note
// [Package layout] in core/components.h). Not whether a GPU is present.
bool cuda_built();
// Why not, when cuda_built() is false: "kiln was built without CUDA", or why
// libkiln_cuda.so did not load (naming the missing file). "" otherwise.
std::string cuda_unavailable_reason();

}  // namespace kiln

// Devices: where a tensor's storage lives. CUDA is a backend behind one
// interface (core/backend.h); a build without CUDA answers every CUDA request
// with kiln::Error("... built without CUDA").
#pragma once

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

// True when this build has the CUDA backend compiled in (not whether a GPU is present).
bool cuda_built();

}  // namespace kiln

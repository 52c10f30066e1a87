#include "core/device.h"

#include "core/error.h"

namespace kiln {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return Device(DeviceType::CPU, 0);
  if (s == "cuda") return Device(DeviceType::CUDA, 0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string idx = s.substr(5);
    bool digits = !idx.empty() && idx.size() < 4;
    for (char c : idx) digits = digits && c >= '0' && c <= '9';
    if (digits) return Device(DeviceType::CUDA, std::stoi(idx));
  }
  fail("invalid device '", s, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln

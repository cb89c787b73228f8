// Device: where data lives and work runs. "cpu" or "gpu:N".
//
//   Device d = Device::Parse("gpu:0");   // throws weft::Error on "tpu" or "gpu:-1"
//   if (d.is_gpu()) ...
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace weft {

enum class DeviceType : uint8_t { kCpu = 0, kGpu = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::kCpu;
  int id = 0;

  static constexpr Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static constexpr Device Gpu(int id) { return Device{DeviceType::kGpu, id}; }
  // Accepts "cpu", "cpu:0", "gpu" (= gpu:0) and "gpu:N".
  static Device Parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_gpu() const { return type == DeviceType::kGpu; }
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.id == b.id;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.ToString(); }
};

}  // namespace weft

template <>
struct std::hash<weft::Device> {
  size_t operator()(const weft::Device& d) const noexcept {
    return static_cast<size_t>(d.type) * 1024 + static_cast<size_t>(d.id);
  }
};

#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace weft {

namespace {

int ParseDeviceId(std::string_view text, std::string_view digits) {
  int id = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc() || end != digits.data() + digits.size() || id < 0) {
    WEFT_THROW("bad device '" << text << "': expected a device id >= 0 after ':', found '" << digits
                              << "'");
  }
  return id;
}

}  // namespace

Device Device::Parse(std::string_view text) {
  std::string_view kind = text.substr(0, text.find(':'));
  int id = 0;
  if (kind.size() < text.size()) id = ParseDeviceId(text, text.substr(kind.size() + 1));
  if (kind == "cpu") {
    if (id != 0) WEFT_THROW("bad device '" << text << "': the cpu device has id 0");
    return Cpu();
  }
  if (kind == "gpu") return Gpu(id);
  WEFT_THROW("bad device '" << text << "': expected 'cpu', 'gpu' or 'gpu:N'");
}

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : "gpu:" + std::to_string(id);
}

}  // namespace weft

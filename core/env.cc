#include "core/env.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "core/error.h"

namespace weft {

std::string GetEnvString(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return (value == nullptr || *value == '\0') ? fallback : std::string(value);
}

int GetEnvInt(const char* name, int fallback, int min_value, int max_value) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  std::string_view text(value);
  int result = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), result);
  if (ec != std::errc() || end != text.data() + text.size() || result < min_value ||
      result > max_value) {
    WEFT_THROW("environment variable " << name << ": expected an integer in [" << min_value << ", "
                                       << max_value << "], found '" << text << "'");
  }
  return result;
}

bool GetEnvBool(const char* name, bool fallback) {
  std::string text = GetEnvString(name, "");
  if (text.empty()) return fallback;
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  WEFT_THROW("environment variable " << name << ": expected 1/0, true/false, on/off or yes/no, "
                                     << "found '" << text << "'");
}

int NumCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace weft

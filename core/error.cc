#include "core/error.h"

namespace weft::internal {

ErrorBuilder::ErrorBuilder(const char* file, int line, const std::string& what) {
  stream_ << file << ":" << line << ": " << what;
}

ErrorBuilder::~ErrorBuilder() noexcept(false) { throw Error(stream_.str()); }

std::string FormatError(const char* file, int line, const std::string& message) {
  return std::string(file) + ":" + std::to_string(line) + ": " + message;
}

}  // namespace weft::internal

// DType: the element types weft knows, with their sizes and names in one table.
//
//   size_t bytes = DTypeSize(DType::kFloat32) * n;
//   DType t = ParseDType("float64");   // throws weft::Error on an unknown name
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace weft {

enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
};
inline constexpr int kNumDTypes = 8;

size_t DTypeSize(DType t);
// The name also used by files (safetensors: "F32", ...) is in the storage layer; this is weft's.
std::string_view DTypeName(DType t);
DType ParseDType(std::string_view name);
bool IsFloatingPoint(DType t);

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << DTypeName(t); }

}  // namespace weft

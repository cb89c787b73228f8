// DType: the element types weft knows, with their sizes and names in one table.
//
//   size_t bytes = DTypeSize(DType::kFloat32) * n;
//   DType t = ParseDType("float64");   // throws weft::Error on an unknown name
#pragma once

#include <array>
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

namespace internal {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool floating;
};
// One row per DType, in enum order (checked in dtype.cc).
inline constexpr std::array<DTypeInfo, kNumDTypes> kDTypeTable = {{
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat64, "float64", 8, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kInt32, "int32", 4, false},
    {DType::kInt64, "int64", 8, false},
    {DType::kUInt8, "uint8", 1, false},
    {DType::kBool, "bool", 1, false},
}};
[[noreturn]] void InvalidDType();
inline const DTypeInfo& Info(DType t) {
  const auto i = static_cast<size_t>(t);
  if (i >= kDTypeTable.size()) InvalidDType();
  return kDTypeTable[i];
}
}  // namespace internal

// Inline: it is on every op's path.
inline size_t DTypeSize(DType t) { return internal::Info(t).size; }
// The name also used by files (safetensors: "F32", ...) is in the storage layer; this is weft's.
std::string_view DTypeName(DType t);
DType ParseDType(std::string_view name);
bool IsFloatingPoint(DType t);
// bfloat16 or float16: the 16-bit floats, stored in 16 bits and computed in float32.
inline bool Is16BitFloat(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << DTypeName(t); }

}  // namespace weft

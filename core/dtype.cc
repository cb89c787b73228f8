#include "core/dtype.h"

#include <array>

#include "core/error.h"

namespace weft {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool floating;
};

// One row per DType, in enum order.
constexpr std::array<DTypeInfo, kNumDTypes> kDTypeTable = {{
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat64, "float64", 8, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kInt32, "int32", 4, false},
    {DType::kInt64, "int64", 8, false},
    {DType::kUInt8, "uint8", 1, false},
    {DType::kBool, "bool", 1, false},
}};

constexpr bool TableInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kDTypeTable[i].type) != i) return false;
  }
  return true;
}
static_assert(TableInEnumOrder(), "kDTypeTable must have one row per DType, in enum order");

const DTypeInfo& Info(DType t) {
  auto i = static_cast<size_t>(t);
  WEFT_CHECK_LT(i, kDTypeTable.size()) << "invalid dtype value";
  return kDTypeTable[i];
}

}  // namespace

size_t DTypeSize(DType t) { return Info(t).size; }
std::string_view DTypeName(DType t) { return Info(t).name; }
bool IsFloatingPoint(DType t) { return Info(t).floating; }

DType ParseDType(std::string_view name) {
  for (const DTypeInfo& row : kDTypeTable) {
    if (row.name == name) return row.type;
  }
  WEFT_THROW("unknown dtype '" << name
                               << "': expected one of float32, float64, float16, bfloat16, "
                                  "int32, int64, uint8, bool");
}

}  // namespace weft

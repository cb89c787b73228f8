#include "core/dtype.h"

#include <array>

#include "core/error.h"

namespace weft {

namespace {

using internal::Info;
using internal::kDTypeTable;

constexpr bool TableInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kDTypeTable[i].type) != i) return false;
  }
  return true;
}
static_assert(TableInEnumOrder(), "kDTypeTable must have one row per DType, in enum order");

}  // namespace

void internal::InvalidDType() { WEFT_THROW("invalid dtype value"); }

std::string_view DTypeName(DType t) { return Info(t).name; }
bool IsFloatingPoint(DType t) { return Info(t).floating; }

DType ParseDType(std::string_view name) {
  for (const internal::DTypeInfo& row : kDTypeTable) {
    if (row.name == name) return row.type;
  }
  WEFT_THROW("unknown dtype '" << name
                               << "': expected one of float32, float64, float16, bfloat16, "
                                  "int32, int64, uint8, bool");
}

}  // namespace weft

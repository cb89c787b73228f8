// BatchNorm's views of its data (ops/nn/nn_params.h), shared by the definition and the computes.
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/nn/nn_params.h"

namespace weft {

BnDims BnDimsOf(const char* op, const BatchNormParam& p, const Shape& data) {
  if (data.ndim() < 2 || data.ndim() > 5 || data.Size() == 0) {
    WEFT_THROW(op << ": data must have 2 to 5 axes, none empty, found " << data);
  }
  const int axis = NormalizeAxis(op, p.axis, data.ndim(), data);
  BnDims d{1, data[axis], 1};
  for (int a = 0; a < axis; ++a) d.outer *= data[a];
  for (int a = axis + 1; a < data.ndim(); ++a) d.inner *= data[a];
  return d;
}

void CheckBatchStatistics(const char* op, const BnDims& d, const Shape& data) {
  if (d.PerChannel() > 1) return;
  WEFT_THROW(op << ": training with batch statistics needs more than one value per channel, "
                   "found data "
                << data << " with " << d.PerChannel() << " per channel");
}

DType BnStatType(DType data) { return data == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

}  // namespace weft

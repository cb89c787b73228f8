// LayerNorm's views of its data (ops/nn/nn_params.h), shared by the definition and the computes.
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/nn/nn_params.h"

namespace weft {

LnDims LnDimsOf(const char* op, const LayerNormParam& p, const Shape& data) {
  if (data.ndim() < 1 || data.Size() == 0) {
    WEFT_THROW(op << ": data must have at least one axis and no empty axis, found " << data);
  }
  const int axis = NormalizeAxis(op, p.axis, data.ndim(), data);
  LnDims d{1, data[axis], 1};
  for (int a = 0; a < axis; ++a) d.outer *= data[a];
  for (int a = axis + 1; a < data.ndim(); ++a) d.inner *= data[a];
  return d;
}

Shape LnStatShape(const LayerNormParam& p, const Shape& data) {
  Shape stat = data;
  stat[p.axis < 0 ? p.axis + data.ndim() : p.axis] = 1;
  return stat;
}

}  // namespace weft

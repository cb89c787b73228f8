// BatchNorm's views of its data (ops/nn/nn_params.h), shared by the definition and the computes,
// and the dtype rules of the normalization statistics, which LayerNorm shares.
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
  if (p.blocked && (data.ndim() != 4 || axis != 1)) {
    WEFT_THROW(op << ": layout NCHW16c takes 4-D data normalized over axis 1, found " << data
                  << " over axis " << p.axis);
  }
  d.blocked = p.blocked && BlockedImage(data);
  return d;
}

void CheckBatchStatistics(const char* op, const BnDims& d, const Shape& data) {
  if (d.PerChannel() > 1) return;
  WEFT_THROW(op << ": training with batch statistics needs more than one value per channel, "
                   "found data "
                << data << " with " << d.PerChannel() << " per channel");
}

DType BnStatType(DType data) { return data == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

DType CheckNormTypes(const char* op, const std::vector<DType>& in, size_t data, size_t first,
                     size_t last, const char* const* names) {
  const DType t = in[data];
  if (t != DType::kFloat32 && t != DType::kFloat64 && !Is16BitFloat(t))
    WEFT_THROW(op << ": data must be float32, float64, bfloat16 or float16, found " << t);
  const DType s = BnStatType(t);
  for (size_t i = first; i < last; ++i) {
    if (in[i] == s) continue;
    WEFT_THROW(op << ": " << names[i] << " must be " << s << " for " << t
                  << " data (statistics are kept in " << s << "), found " << in[i]);
  }
  return t;
}

}  // namespace weft

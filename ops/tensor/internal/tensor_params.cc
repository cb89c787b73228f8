#include "ops/tensor/tensor_params.h"

#include <array>

#include "core/error.h"
#include "ops/internal/op_util.h"

namespace weft {

std::vector<bool> ReducedAxes(const std::string& op, const ReduceParam& p, const Shape& in) {
  std::vector<bool> reduced(in.ndim(), p.axis.empty());
  for (int64_t a : p.axis) {
    const int axis = NormalizeAxis(op, a, in.ndim(), in);
    if (reduced[axis])
      WEFT_THROW(op << ": axis " << axis << " appears twice in axis=" << FormatTuple(p.axis));
    reduced[axis] = true;
  }
  return reduced;
}

std::vector<int64_t> TransposePermutation(const TransposeParam& p, int ndim) {
  if (!p.axes.empty()) return p.axes;
  std::vector<int64_t> reverse(ndim);
  for (int k = 0; k < ndim; ++k) reverse[k] = ndim - 1 - k;
  return reverse;
}

SliceBox MakeSliceBox(const SliceParam& p, const Shape& in) {
  if (static_cast<int>(p.begin.size()) > in.ndim()) {
    WEFT_THROW("slice: expected at most one begin/end entry per axis of the input "
               << in << ", found begin=" << FormatTuple(p.begin));
  }
  SliceBox box;
  box.out = in;
  std::array<bool, Shape::kMaxDims> sliced{};
  for (int k = 0; k < static_cast<int>(p.begin.size()); ++k) {
    const int a =
        p.axes.empty() ? k : NormalizeAxis("slice", static_cast<int>(p.axes[k]), in.ndim(), in);
    const int64_t d = in[a];
    const int64_t b = p.begin[k] < 0 ? p.begin[k] + d : p.begin[k],
                  e = p.end[k] < 0 ? p.end[k] + d : p.end[k];
    if (b < 0 || e > d || b > e || sliced[a]) {
      WEFT_THROW(
          "slice: axis " << a << " of input " << in << ": expected " << -d
                         << " <= begin, end <= " << d
                         << " and begin <= end once negative indices count from the end (each axis "
                            "sliced once), found begin "
                         << p.begin[k] << " and end " << p.end[k]);
    }
    sliced[a] = true;
    box.begin[a] = b;
    box.out[a] = e - b;
  }
  return box;
}

TakeLayout MakeTakeLayout(const TakeParam& p, const Shape& a, int64_t k, const char* op) {
  const int axis = NormalizeAxis(op, p.axis, a.ndim(), a);
  TakeLayout l;
  for (int d = 0; d < axis; ++d) l.outer *= a[d];
  l.n = a[axis];
  for (int d = axis + 1; d < a.ndim(); ++d) l.inner *= a[d];
  l.k = k;
  return l;
}

}  // namespace weft

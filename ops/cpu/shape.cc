// CPU compute of the shape ops (ops/tensor/shape.cc defines them and says what they compute):
// reshape, reshape_dims, expand_dims, flatten and reshape_like copy their input in row-major order.
// transpose: a permutation that swaps two runs of axes behind a kept prefix (NCHW <-> NHWC, a
// matrix's transpose) is a batch of matrix transposes, copied in tiles; other permutations gather
// each output row. Gathering rows of 3 (an image's channels), or oneDNN's reorder, ran NCHW -> NHWC
// at 1 GB/s. _strided_copy gathers rows the same way. Every dtype (float32, float64, bfloat16,
// int32, int64, uint8).
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// in: any shape; out: the same number of elements. out = in, element by element.
void CopyCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  WEFT_MOVE_SWITCH(in[0].dtype(), T, "copy", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(in[0].size(), 1 << 16,
                [&](int64_t b, int64_t e) { StoreN(y + b, req[0], x + b, e - b); });
  });
}

// A permutation (0, .., k - 1, j, .., n - 1, k, .., j - 1): x seen as (batch, rows, cols) becomes
// y (batch, cols, rows), each extent a product of consecutive axes of x.
struct MatrixSwap {
  int64_t batch, rows, cols;
};

std::optional<MatrixSwap> AsMatrixSwap(const Shape& x, const std::vector<int64_t>& axes) {
  const int n = static_cast<int>(axes.size());
  int k = 0;
  while (k < n && axes[k] == k) ++k;
  if (k == n) return std::nullopt;
  const int j = static_cast<int>(axes[k]);
  for (int i = k; i < n; ++i) {
    const int want = i - k < n - j ? j + (i - k) : k + (i - k - (n - j));
    if (axes[i] != want) return std::nullopt;
  }
  auto product = [&](int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; ++i) p *= x[i];
    return p;
  };
  return MatrixSwap{product(0, k), product(k, j), product(j, n)};
}

// y[t][c][r] = x[t][r][c], in tiles of about kTile elements (whole rows of x when it has few:
// an image's 3 channels make tiles of 3 x 340).
template <typename T>
void SwapLoops(const MatrixSwap& s, const T* x, OpReq req, T* y) {
  constexpr int64_t kTile = 1024;
  const int64_t tr = std::min<int64_t>(s.rows, 32), tc = kTile / tr;
  const int64_t row_tiles = (s.rows + tr - 1) / tr, col_tiles = (s.cols + tc - 1) / tc;
  const int64_t tiles = row_tiles * col_tiles, matrix = s.rows * s.cols;
  ParallelFor(s.batch * tiles, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xm = x + i / tiles * matrix;
      T* ym = y + i / tiles * matrix;
      const int64_t r0 = i % tiles / col_tiles * tr, c0 = i % col_tiles * tc;
      const int64_t r1 = std::min(r0 + tr, s.rows), c1 = std::min(c0 + tc, s.cols);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) Store(ym[c * s.rows + r], req, xm[r * s.cols + c]);
      }
    }
  });
}

// y (read in row-major order) = x[offset + sum_k i_k stride[k]] for every position i of the walk
// `walk` (of y's size), a row of the walk at a time (a row that runs contiguously through x is one
// run copied).
void StridedRows(const TensorView& x, std::span<const int64_t> walk,
                 std::span<const int64_t> stride, int64_t offset, OpReq req, const TensorView& y) {
  const int n = static_cast<int>(walk.size());
  const int64_t len = n == 0 ? 1 : walk[n - 1], step = n == 0 ? 0 : stride[n - 1];
  const int64_t rows = len == 0 ? 0 : y.size() / len;
  WEFT_MOVE_SWITCH(x.dtype(), T, "strided copy", {
    const T* src = x.data<T>() + offset;
    T* dst = y.data<T>();
    ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) {
                    int64_t base = 0, rest = r;  // base: input offset of the row's first element
                    for (int k = n - 2; k >= 0; --k)
                      base += (rest % walk[k]) * stride[k], rest /= walk[k];
                    T* row = dst + r * len;
                    if (step == 1) {
                      StoreN(row, req, src + base, len);
                      continue;
                    }
                    for (int64_t j = 0; j < len; ++j) Store(row[j], req, src[base + j * step]);
                  }
                });
  });
}

// x: (d_0, ..., d_{n-1}); y: (d_{axes[0]}, ..., d_{axes[n-1]}), y[c] = x[c_k at axis axes[k]].
void TransposeCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const int n = in[0].ndim();
  if (req[0] == OpReq::kNull) return;
  if (n <= 1) return CopyCompute(ctx, a, in, req, out);
  const std::vector<int64_t> axes = TransposePermutation(a.Get<TransposeParam>(), n);
  if (const std::optional<MatrixSwap> swap = AsMatrixSwap(in[0].shape(), axes)) {
    WEFT_MOVE_SWITCH(in[0].dtype(), T, "transpose",
                     SwapLoops(*swap, in[0].data<T>(), req[0], out[0].data<T>()));
    return;
  }
  const std::array<int64_t, Shape::kMaxDims> in_strides = Strides(in[0].shape());
  std::vector<int64_t> stride(n);  // along y's axes
  for (int k = 0; k < n; ++k) stride[k] = in_strides[axes[k]];
  StridedRows(in[0], out[0].shape().dims(), stride, 0, req[0], out[0]);
}

// y = the view of x that the attributes give (ops/tensor/tensor_params.h).
void StridedCopyCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const StridedCopyParam& p = a.Get<StridedCopyParam>();
  StridedRows(in[0], p.walk, p.stride, p.offset, req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"reshape", {.compute = CopyCompute}},
                                                 {"expand_dims", {.compute = CopyCompute}},
                                                 {"flatten", {.compute = CopyCompute}},
                                                 {"reshape_like", {.compute = CopyCompute}},
                                                 {"reshape_dims", {.compute = CopyCompute}},
                                                 {"transpose", {.compute = TransposeCompute}},
                                                 {"_strided_copy", {.compute = StridedCopyCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu

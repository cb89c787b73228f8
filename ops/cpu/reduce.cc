// CPU compute of the reductions of ops/tensor/tensor_params.h (sum, mean, max) and of their
// backward ops (ops/tensor/reduce.cc defines them and says what they compute).
#include <functional>
#include <limits>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/tensor/reduce_impls.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// Some axes of the input: extents and input strides, outermost first.
struct Axes {
  int n = 0;
  std::array<int64_t, Shape::kMaxDims> extent{}, stride{};

  void Add(int64_t e, int64_t s) { extent[n] = e, stride[n] = s, ++n; }
  int64_t Size() const {
    int64_t size = 1;
    for (int d = 0; d < n; ++d) size *= extent[d];
    return size;
  }
  // Input offset of the index-th position, counting in row-major order over these axes.
  int64_t Offset(int64_t index) const {
    int64_t offset = 0;
    for (int d = n - 1; d >= 0; --d) offset += (index % extent[d]) * stride[d], index /= extent[d];
    return offset;
  }
};

// A reduction as three nested loops over the input: blocks x reduced positions x inner, after
// extent-1 axes are dropped and neighbouring axes that are both kept or both reduced are merged.
// Element (b, r, i) is at input offset blocks.Offset(b) + reduced.Offset(r) + i and goes to
// output b * inner + i. `inner` is the innermost merged axis when it is kept (contiguous in both
// input and output), else 1.
struct ReduceLayout {
  Axes blocks, reduced;
  int64_t inner = 1;
};

ReduceLayout MakeLayout(const Shape& in, const std::vector<bool>& reduced) {
  struct Group {
    int64_t extent, stride;
    bool reduced;
  };
  std::vector<Group> groups;  // innermost first
  int64_t stride = 1;
  for (int a = in.ndim() - 1; a >= 0; --a) {
    if (in[a] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[a]) {
      groups.back().extent *= in[a];
    } else {
      groups.push_back({in[a], stride, reduced[a]});
    }
    stride *= in[a];
  }
  ReduceLayout l;
  size_t first = 0;
  if (!groups.empty() && !groups[0].reduced) l.inner = groups[first++].extent;
  for (size_t g = groups.size(); g-- > first;) {  // outermost first
    (groups[g].reduced ? l.reduced : l.blocks).Add(groups[g].extent, groups[g].stride);
  }
  return l;
}

// Calls f(offset, length, stride) for runs that cover the reduced positions of the block whose
// first element is at `base`, in row-major order: the run's elements are at offset + j * stride.
template <typename F>
void ForEachRun(const Axes& red, int64_t base, F&& f) {
  if (red.n == 0) return f(base, int64_t{1}, int64_t{0});
  const int last = red.n - 1;
  const int64_t runs = red.extent[last] == 0 ? 0 : red.Size() / red.extent[last];
  std::array<int64_t, Shape::kMaxDims> idx{};
  int64_t offset = base;
  for (int64_t k = 0; k < runs; ++k) {
    f(offset, red.extent[last], red.stride[last]);
    for (int d = last - 1; d >= 0; --d) {  // odometer step over the outer reduced axes
      offset += red.stride[d];
      if (++idx[d] < red.extent[d]) break;
      offset -= red.stride[d] * red.extent[d];
      idx[d] = 0;
    }
  }
}

constexpr int64_t kTile = 256;  // inner elements one task accumulates at once

// Runs f(block, i0, i1) for every block and every tile [i0, i1) of `inner`, in parallel. Tiles
// are independent: each owns its outputs and the input elements that reduce into them.
template <typename F>
void ForEachTile(const ReduceLayout& l, F&& f) {
  const int64_t tiles = (l.inner + kTile - 1) / kTile;
  const int64_t work = std::max<int64_t>(1, l.reduced.Size() * std::min(l.inner, kTile));
  ParallelFor(l.blocks.Size() * tiles, std::max<int64_t>(1, 32768 / work),
              [&](int64_t begin, int64_t end) {
                for (int64_t t = begin; t < end; ++t) {
                  const int64_t block = t / tiles, i0 = (t % tiles) * kTile;
                  f(block, i0, std::min(l.inner, i0 + kTile));
                }
              });
}

// NaN beats everything, and the first NaN stays.
template <typename T>
bool Beats(T v, T best) {
  return v > best || (v != v && best == best);
}

// x: the input; y: the output, blocks x inner. y = scale * sum over the reduced positions.
template <typename T>
void SumForward(const ReduceLayout& l, T scale, const T* x, OpReq req, T* y) {
  ForEachTile(l, [&](int64_t block, int64_t i0, int64_t i1) {
    std::array<T, kTile> acc{};
    const int64_t len = i1 - i0;
    ForEachRun(l.reduced, l.blocks.Offset(block) + i0,
               [&](int64_t offset, int64_t n, int64_t stride) {
                 for (int64_t j = 0; j < n; ++j) {
                   const T* row = x + offset + j * stride;
                   for (int64_t i = 0; i < len; ++i) acc[i] += row[i];
                 }
               });
    for (int64_t i = 0; i < len; ++i) Store(y[block * l.inner + i0 + i], req, acc[i] * scale);
  });
}

// x: the input; y: the output, blocks x inner.
template <typename T>
void MaxForward(const ReduceLayout& l, const T* x, OpReq req, T* y) {
  ForEachTile(l, [&](int64_t block, int64_t i0, int64_t i1) {
    std::array<T, kTile> best;
    best.fill(-std::numeric_limits<T>::infinity());
    const int64_t len = i1 - i0;
    ForEachRun(l.reduced, l.blocks.Offset(block) + i0,
               [&](int64_t offset, int64_t n, int64_t stride) {
                 for (int64_t j = 0; j < n; ++j) {
                   const T* row = x + offset + j * stride;
                   for (int64_t i = 0; i < len; ++i)
                     best[i] = Beats(row[i], best[i]) ? row[i] : best[i];
                 }
               });
    for (int64_t i = 0; i < len; ++i) Store(y[block * l.inner + i0 + i], req, best[i]);
  });
}

// dy: the output gradient, blocks x inner; dx: the input's shape. dx = scale * dy, broadcast.
template <typename T>
void SumBackward(const ReduceLayout& l, T scale, const T* dy, OpReq req, T* dx) {
  ForEachTile(l, [&](int64_t block, int64_t i0, int64_t i1) {
    const T* g = dy + block * l.inner + i0;
    const int64_t len = i1 - i0;
    ForEachRun(l.reduced, l.blocks.Offset(block) + i0,
               [&](int64_t offset, int64_t n, int64_t stride) {
                 for (int64_t j = 0; j < n; ++j) {
                   T* row = dx + offset + j * stride;
                   for (int64_t i = 0; i < len; ++i) Store(row[i], req, g[i] * scale);
                 }
               });
  });
}

// dy: the output gradient, blocks x inner; x and dx: the input's shape. Each dy goes to the
// first maximum of its reduced positions; every other position gets 0.
template <typename T>
void MaxBackward(const ReduceLayout& l, const T* dy, const T* x, OpReq req, T* dx) {
  ForEachTile(l, [&](int64_t block, int64_t i0, int64_t i1) {
    const int64_t len = i1 - i0, base = l.blocks.Offset(block) + i0;
    std::array<T, kTile> best{};
    std::array<int64_t, kTile> at;  // input offset of the maximum; -1: none seen yet
    at.fill(-1);
    ForEachRun(l.reduced, base, [&](int64_t offset, int64_t n, int64_t stride) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0, p = offset + j * stride; i < len; ++i, ++p) {
          if (at[i] < 0 || Beats(x[p], best[i])) best[i] = x[p], at[i] = p;
        }
      }
    });
    const T* g = dy + block * l.inner + i0;
    ForEachRun(l.reduced, base, [&](int64_t offset, int64_t n, int64_t stride) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0, p = offset + j * stride; i < len; ++i, ++p)
          Store(dx[p], req, p == at[i] ? g[i] : T(0));
      }
    });
  });
}

ReduceLayout LayoutFor(const std::string& op, const Attrs& attrs, const Shape& in) {
  return MakeLayout(in, ReducedAxes(op, attrs.Get<ReduceParam>(), in));
}

// What the sum is multiplied by: 1, or for the mean 1 / (reduced positions per output).
template <typename T>
T Scale(ReduceKind kind, const ReduceLayout& l) {
  return kind == ReduceKind::kMean ? T(1) / static_cast<T>(l.reduced.Size()) : T(1);
}

// in: (data); out: data reduced over the axes.
void ReduceCompute(const std::string& op, ReduceKind kind, const OpContext&, const Attrs& a,
                   std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const ReduceLayout l = LayoutFor(op, a, in[0].shape());
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, op, {
    if (kind == ReduceKind::kMax) {
      MaxForward<T>(l, in[0].data<T>(), req[0], out[0].data<T>());
    } else {
      SumForward<T>(l, Scale<T>(kind, l), in[0].data<T>(), req[0], out[0].data<T>());
    }
  });
}

// in: (out_grad, data); out: d data, data's shape.
void ReduceBackwardCompute(const std::string& op, ReduceKind kind, const OpContext&, const Attrs& a,
                           std::span<const TensorView> in, std::span<const OpReq> req,
                           std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const ReduceLayout l = LayoutFor(op, a, in[1].shape());
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "_backward_" + op, {
    if (kind == ReduceKind::kMax) {
      MaxBackward<T>(l, in[0].data<T>(), in[1].data<T>(), req[0], out[0].data<T>());
    } else {
      SumBackward<T>(l, Scale<T>(kind, l), in[0].data<T>(), req[0], out[0].data<T>());
    }
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, ReduceImpls(ReduceCompute, ReduceBackwardCompute));

}  // namespace
}  // namespace weft::cpu

// Attention (scaled dot-product attention), device neutral: its parameters, the extents of one
// call with the mask's broadcast strides, and the checks of its inputs' shapes (ops/nn/attention.cc
// defines the op and says what it computes; ops/cpu/attention.cc runs it).
//
//   const AttentionDims d = AttentionDimsOf("Attention", p, q, k, v, mask);  // mask: optional
//   const float sc = static_cast<float>(d.scale);
//   for each (b, h, i, j): s = sc * dot(q[b,h,i,:], k[b,h,j,:]) + mask[d.MaskAt(b, h, i, j)]
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "core/shape.h"

namespace weft {

struct AttentionParam {
  std::optional<double> scale;  // absent: 1 / sqrt(D)
  bool causal;                  // key j masked for query i when j > i (PyTorch's is_causal)
  bool use_mask;                // a 4th input: an additive float mask
  double p;                     // dropout on the probabilities in training: only 0 for now
};

// The extents of one call: q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv).
struct AttentionDims {
  int64_t b, h, tq, tk, d, dv;
  double scale;  // the attribute's, or 1 / sqrt(D)
  bool causal;
  bool mask;                             // a mask input is read
  std::array<int64_t, 4> mask_stride{};  // element strides over (B, H, Tq, Tk); 0 where broadcast

  int64_t Heads() const { return b * h; }  // (b, h) pairs: the batch of independent problems
  int64_t MaskAt(int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    return bi * mask_stride[0] + hi * mask_stride[1] + i * mask_stride[2] + j * mask_stride[3];
  }
};

// Checks q, k, v (4 axes each, none empty, equal B and H, k's D equal to q's, v's Tk equal to
// k's) and, with use_mask, that the mask (1 to 4 axes) broadcasts to (B, H, Tq, Tk); errors name
// `op` and say what was expected and found.
AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p, const Shape& q,
                              const Shape& k, const Shape& v, const Shape* mask);

// The log-sum-exp's dtype: float32, but float64 for float64 data.
inline DType AttentionStatType(DType data) {
  return data == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

}  // namespace weft

// Attention (scaled dot-product attention), device neutral: its parameters, where each tensor sits
// in its calls, the extents of one call with the strides of its operands and of the mask, and the
// checks of its inputs' shapes and dtypes (ops/nn/attention.cc defines the op and says what it
// computes; ops/cpu/attention.cc runs it; ops/math/attention_dropout.h says which random number
// decides each dropped probability).
//
//   const AttentionSlots s = AttentionSlotsOf(p);
//   const AttentionDims d = AttentionDimsOf("Attention", p, shapes);  // the forward's inputs
//   const float sc = static_cast<float>(d.scale);
//   for each (b, h, i, j): s = sc * dot(q + d.q.At(b, h, i), k + d.k.At(b, h, j)) (D contiguous)
//                             + mask[d.MaskAt(b, h, i, j)]
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace weft {

// How q, k, v and the output are laid out.
enum class AttentionLayout : uint8_t {
  kBhtd,   // three inputs q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); out (B, H, Tq, Dv)
  kBt3hd,  // one input qkv (B, T, 3, H, D), read through strides; out (B, T, H, D)
  kRows,   // three inputs of any shapes (the same one, or parts of it, as often as not), read
           // where the attributes' rows say; out of the shape `out_shape`, written where they say.
           // For inference (passes/fold_attention_moves.h makes it): no gradient.
};

// Where the rows of one (B, H, T, D)-like operand start, in elements from its data pointer; the
// D values of a row are contiguous.
struct AttentionRows {
  int64_t offset, b, h, t;
  int64_t At(int64_t bi, int64_t hi, int64_t ti) const { return offset + bi * b + hi * h + ti * t; }
};

struct AttentionParam {
  std::optional<double> scale;  // absent: 1 / sqrt(D)
  bool causal;                  // key j masked for query i when j > i (PyTorch's is_causal)
  bool use_mask;                // a mask input after the operands: additive, or boolean by dtype
  double p;                     // dropout on the probabilities in training, in [0, 1)
  AttentionLayout layout;
  // Layout kRows: the extents (B, H, Tq, Tk, D, Dv) (attribute `dims`), the rows of q, k, v and
  // out (attribute `rows`: offset and the strides of b, h and t of each, 16 numbers) and out's
  // shape (`out_shape`), whose every element the out rows cover once.
  std::array<int64_t, 6> dims{};
  std::array<AttentionRows, 4> rows{};
  std::vector<int64_t> out_shape;
};

// Where each tensor sits in the calls of Attention and _backward_Attention.
//   Attention:           (q, k, v | qkv)[, mask] -> (out, lse[, rng])
//   _backward_Attention: (out_grad, q, k, v | qkv, out, lse[, mask][, rng]) -> (d_q, d_k, d_v |
//                        d_qkv)
// rng, an output only with p > 0, is the forward's dropout key: 3 int64 values (seed, offset,
// whether dropout was applied: 1 in training, else 0), what the backward regenerates the mask from.
// The offset is the one the kernels drew with: on a GPU, RandomKey::offset plus the value at
// RandomKey::shift (storage/random.h), so the forward writes it on the device.
struct AttentionSlots {
  int operands;     // 3 (q, k, v) or 1 (qkv); forward inputs [0, operands), gradients likewise
  int mask = -1;    // the forward's mask input; -1: none
  int rng = -1;     // the forward's rng output; -1: none (p == 0)
  int inputs = 0;   // forward inputs
  int outputs = 0;  // forward outputs: out (the one visible), lse[, rng]

  // The backward's inputs.
  static constexpr int kOutGrad = 0;
  int Operand(int i) const { return 1 + i; }  // q, k, v or qkv
  int Out() const { return 1 + operands; }
  int Lse() const { return 2 + operands; }
  int Mask() const { return mask < 0 ? -1 : 3 + operands; }
  int Rng() const { return rng < 0 ? -1 : 3 + operands + (mask < 0 ? 0 : 1); }
  int BackwardInputs() const { return 3 + operands + (mask < 0 ? 0 : 1) + (rng < 0 ? 0 : 1); }
};

AttentionSlots AttentionSlotsOf(const AttentionParam& p);

// The rng output's values and their dtype.
enum AttentionRngValue { kAttentionRngSeed, kAttentionRngOffset, kAttentionRngApplied };
inline constexpr int64_t kAttentionRngValues = 3;
inline constexpr DType kAttentionRngType = DType::kInt64;

// The extents of one call: q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), out (B, H, Tq, Dv)
// as the layout places them; lse (B, H, Tq) is contiguous. The gradients of q, k and v have their
// rows; out_grad has out's.
struct AttentionDims {
  int64_t b, h, tq, tk, d, dv;
  double scale;  // the attribute's, or 1 / sqrt(D)
  bool causal;
  bool mask;                             // a mask input is read
  std::array<int64_t, 4> mask_stride{};  // element strides over (B, H, Tq, Tk); 0 where broadcast
  AttentionRows q{}, k{}, v{}, out{};

  int64_t Heads() const { return b * h; }  // (b, h) pairs: the batch of independent problems
  int64_t MaskAt(int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    return bi * mask_stride[0] + hi * mask_stride[1] + i * mask_stride[2] + j * mask_stride[3];
  }
};

// Checks q, k, v (4 axes each, none empty, equal B and H, k's D equal to q's, v's Tk equal to
// k's) and, with use_mask, that the mask (1 to 4 axes) broadcasts to (B, H, Tq, Tk); errors name
// `op` and say what was expected and found. The layout kBhtd.
AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p, const Shape& q,
                              const Shape& k, const Shape& v, const Shape* mask);
// The same for the forward's inputs as AttentionSlotsOf(p) places them, in any layout (qkv: 5
// axes (B, T, 3, H, D), none empty; kRows: the rows inside their inputs and out's shape).
AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p,
                              std::span<const Shape> inputs);

// The log-sum-exp's dtype: float32, but float64 for float64 data.
inline DType AttentionStatType(DType data) {
  return data == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

// A mask of these dtypes is boolean (nonzero: the key takes part, PyTorch's bool attn_mask); of
// the data's dtype, additive.
inline bool AttentionMaskIsBoolean(DType mask) {
  return mask == DType::kBool || mask == DType::kUInt8;
}

}  // namespace weft

// bfloat16 on the host: the upper 16 bits of a float32, rounded to nearest even. GPU kernels use
// CUDA's __nv_bfloat16, which has the same layout; the host needs it for conversions and tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace weft {

struct BFloat16 {
  uint16_t bits = 0;

  // The bits of f rounded to bfloat16. Branch-free, so that loops of conversions vectorize (over
  // uint16_t arrays: GCC does not vectorize stores of the struct).
  static uint16_t RoundedBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
    const uint32_t quiet_nan = (u >> 16) | 0x40u;                     // NaN: keep it a (quiet) NaN
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
  // The float32 whose upper half is `bits` (exact).
  static float FloatOfBits(uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  static BFloat16 FromFloat(float f) { return BFloat16{RoundedBits(f)}; }
  float ToFloat() const { return FloatOfBits(bits); }
  // The sum in float32, rounded once (what a gradient accumulated into a bfloat16 array gets).
  BFloat16& operator+=(BFloat16 other) { return *this = FromFloat(ToFloat() + other.ToFloat()); }
};
static_assert(sizeof(BFloat16) == 2, "arrays of BFloat16 are arrays of their bits");

}  // namespace weft

// Shape: the extent of each axis of a tensor, up to kMaxDims axes, stored inline (no heap).
//
//   Shape s{2, 3, 4};
//   s.ndim() == 3; s.Size() == 24; s.ToString() == "(2, 3, 4)"
//   Shape t = Shape::Parse("(2, 3)");    // attribute text; throws weft::Error when malformed
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace weft {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;  // a scalar: no axes, one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  // Accepts "(2, 3)", "[2,3]", "2,3", "()" and "(5,)"; every extent must be >= 0.
  static Shape Parse(std::string_view text);

  int ndim() const { return ndim_; }
  int64_t operator[](int axis) const { return dims_[CheckedAxis(axis)]; }
  int64_t& operator[](int axis) { return dims_[CheckedAxis(axis)]; }
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(ndim_)}; }
  // Number of elements (1 for a scalar); throws weft::Error when it does not fit in an int64_t.
  // Inline: it is on every op's path.
  int64_t Size() const {
    int64_t n = 1;
    bool overflow = false;
    for (int i = 0; i < ndim_; ++i) overflow |= __builtin_mul_overflow(n, dims_[i], &n);
    return overflow ? SizeOverflowed() : n;
  }

  // Normalizes a possibly negative axis (-1 is the last) and checks it is in range.
  int NormalizeAxis(int axis) const;
  void PushBack(int64_t extent);

  std::string ToString() const;
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.ndim_ != b.ndim_) return false;
    for (int i = 0; i < a.ndim_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.ToString(); }

 private:
  int CheckedAxis(int axis) const;
  // Size() when a product overflowed: 0 if an extent is 0, else throws.
  int64_t SizeOverflowed() const;

  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

// The stride (in elements) of each axis of `out` when a row-major tensor of shape `in` is read
// broadcast to it: `in` aligned at its last axis, stride 0 along the axes where `in` has extent 1
// or no axis. Entries [0, out.ndim()) are set, the rest are 0; `in` must broadcast to `out`.
//
//   BroadcastStrides(Shape{3, 1}, Shape{2, 3, 4}) == {0, 1, 0}
std::array<int64_t, Shape::kMaxDims> BroadcastStrides(const Shape& in, const Shape& out);

}  // namespace weft

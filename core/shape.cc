#include "core/shape.h"

#include <cctype>
#include <charconv>

#include "core/error.h"

namespace weft {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  for (int64_t d : dims) PushBack(d);
}

void Shape::PushBack(int64_t extent) {
  WEFT_CHECK_LT(ndim_, kMaxDims) << "a shape has at most " << kMaxDims << " axes";
  WEFT_CHECK_GE(extent, 0) << "shape extents must be non-negative";
  dims_[ndim_++] = extent;
}

int64_t Shape::SizeOverflowed() const {
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] == 0) return 0;
  WEFT_THROW("shape " << ToString() << " has more elements than a 64-bit count holds");
}

int Shape::CheckedAxis(int axis) const {
  WEFT_CHECK(axis >= 0 && axis < ndim_)
      << "axis " << axis << " is out of range for shape " << ToString();
  return axis;
}

int Shape::NormalizeAxis(int axis) const {
  int normalized = axis < 0 ? axis + ndim_ : axis;
  if (normalized < 0 || normalized >= ndim_) {
    WEFT_THROW("axis " << axis << " is out of range for shape " << ToString() << ": expected "
                       << -ndim_ << " <= axis < " << ndim_);
  }
  return normalized;
}

std::string Shape::ToString() const {
  std::string s = "(";
  for (int i = 0; i < ndim_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[i]);
  }
  if (ndim_ == 1) s += ",";
  return s + ")";
}

namespace {

std::string_view StripBrackets(std::string_view text) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  if (text.size() >= 2 && ((text.front() == '(' && text.back() == ')') ||
                           (text.front() == '[' && text.back() == ']'))) {
    text = text.substr(1, text.size() - 2);
  }
  return text;
}

}  // namespace

Shape Shape::Parse(std::string_view text) {
  std::string_view body = StripBrackets(text);
  Shape shape;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t comma = body.find(',', pos);
    std::string_view item =
        body.substr(pos, comma == std::string_view::npos ? body.npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() && comma == std::string_view::npos && shape.ndim() > 0) break;  // "(5,)"
    int64_t extent = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), extent);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || extent < 0) {
      WEFT_THROW("bad shape '" << text << "': expected non-negative integers separated by ',', "
                               << "found '" << item << "'");
    }
    if (shape.ndim() == kMaxDims) {
      WEFT_THROW("bad shape '" << text << "': expected at most " << kMaxDims << " axes");
    }
    shape.PushBack(extent);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return shape;
}

std::array<int64_t, Shape::kMaxDims> BroadcastStrides(const Shape& in, const Shape& out) {
  std::array<int64_t, Shape::kMaxDims> strides{};
  const int n = out.ndim();
  int64_t stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    const int di = in.ndim() - n + d;
    const int64_t extent = di >= 0 ? in[di] : 1;
    strides[d] = extent == 1 ? 0 : stride;
    stride *= extent;
  }
  return strides;
}

}  // namespace weft

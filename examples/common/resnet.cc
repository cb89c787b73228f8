#include "examples/common/resnet.h"

#include <string>

namespace examples {
namespace {

using weft::Symbol;

std::string Pair(int v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; }

Symbol CastTo(const Symbol& x, weft::DType dtype, const std::string& name = "") {
  return Symbol::Op("Cast", {x}, {{"dtype", std::string(weft::DTypeName(dtype))}}, name);
}

// BatchNorm named `name`, its relu fused where asked. For bfloat16 data its gamma and beta are
// cast to float32 on the way in (their gradients cast back), as BatchNorm keeps statistics and
// affine terms in float32; its running statistics are float32 already (a bfloat16 Trainer holds
// auxiliary states in float32).
Symbol Bn(const Symbol& x, const std::string& name, bool relu, weft::DType dtype) {
  const weft::AttrMap attrs = {{"act_type", relu ? "relu" : "none"}};
  if (dtype != weft::DType::kBFloat16) return Symbol::Op("BatchNorm", {x}, attrs, name);
  std::vector<Symbol> in = {x};
  for (const char* part : {"_gamma", "_beta"})
    in.push_back(
        CastTo(Symbol::Variable(name + part), weft::DType::kFloat32, name + part + "_f32"));
  for (const char* part : {"_moving_mean", "_moving_var"})
    in.push_back(Symbol::Variable(name + part));
  return Symbol::Op("BatchNorm", in, attrs, name);
}

// Convolution (no bias: BatchNorm shifts) then BatchNorm, with its relu fused where asked.
Symbol ConvBn(Symbol x, const std::string& name, int filters, int kernel, int stride, bool relu,
              weft::DType dtype) {
  x = Symbol::Op("Convolution", {x},
                 {{"kernel", Pair(kernel)},
                  {"stride", Pair(stride)},
                  {"pad", Pair(kernel / 2)},
                  {"num_filter", std::to_string(filters)},
                  {"no_bias", "true"}},
                 name + "_conv");
  return Bn(x, name + "_bn", relu, dtype);
}

// relu(f + shortcut), the sum and the relu named after the block.
Symbol Residual(const Symbol& f, const Symbol& shortcut, const std::string& name) {
  return Symbol::Op("relu", {Symbol::Op("add", {f, shortcut}, {}, name + "_sum")}, {},
                    name + "_relu");
}

}  // namespace

Symbol BasicBlock(Symbol x, const std::string& name, int filters, int stride, bool project,
                  weft::DType dtype) {
  Symbol f = ConvBn(x, name + "_a", filters, 3, stride, /*relu=*/true, dtype);
  f = ConvBn(f, name + "_b", filters, 3, 1, /*relu=*/false, dtype);
  return Residual(f, project ? ConvBn(x, name + "_proj", filters, 1, stride, false, dtype) : x,
                  name);
}

Symbol BottleneckBlock(Symbol x, const std::string& name, int filters, int stride, bool project,
                       weft::DType dtype) {
  Symbol f = ConvBn(x, name + "_a", filters, 1, 1, /*relu=*/true, dtype);
  f = ConvBn(f, name + "_b", filters, 3, stride, /*relu=*/true, dtype);
  f = ConvBn(f, name + "_c", 4 * filters, 1, 1, /*relu=*/false, dtype);
  return Residual(f, project ? ConvBn(x, name + "_proj", 4 * filters, 1, stride, false, dtype) : x,
                  name);
}

namespace {

Symbol StemOf(const ResNetConfig& c) {
  Symbol data = Symbol::Variable("data");
  if (c.dtype != weft::DType::kFloat32) data = CastTo(data, c.dtype);
  if (c.stem == Stem::kSmall) return ConvBn(data, "stem", c.width, 3, 1, /*relu=*/true, c.dtype);
  const Symbol x = ConvBn(data, "stem", c.width, 7, 2, /*relu=*/true, c.dtype);
  return Symbol::Op(
      "Pooling", {x},
      {{"kernel", Pair(3)}, {"stride", Pair(2)}, {"pad", Pair(1)}, {"pool_type", "max"}},
      "stem_pool");
}

}  // namespace

Symbol ResNet(const ResNetConfig& c) {
  Symbol x = StemOf(c);
  int channels = c.width;
  for (size_t stage = 0; stage < c.blocks.size(); ++stage) {
    const int filters = c.width << stage, out = c.bottleneck ? 4 * filters : filters;
    for (int b = 0; b < c.blocks[stage]; ++b) {
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      const std::string name =
          "stage" + std::to_string(stage + 1) + "_block" + std::to_string(b + 1);
      const bool project = stride != 1 || out != channels;
      x = c.bottleneck ? BottleneckBlock(x, name, filters, stride, project, c.dtype)
                       : BasicBlock(x, name, filters, stride, project, c.dtype);
      channels = out;
    }
  }
  x = Symbol::Op("Pooling", {x}, {{"global_pool", "true"}, {"pool_type", "avg"}}, "pool");
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(c.classes)}}, "fc");
  return c.dtype == weft::DType::kFloat32 ? x : CastTo(x, weft::DType::kFloat32);
}

}  // namespace examples

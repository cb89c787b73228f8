#include "examples/common/resnet.h"

#include <string>

namespace examples {
namespace {

using weft::Symbol;

std::string Pair(int v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; }

// Convolution (no bias: BatchNorm shifts) then BatchNorm, with its relu fused where asked.
Symbol ConvBn(Symbol x, const std::string& name, int filters, int kernel, int stride, bool relu) {
  x = Symbol::Op("Convolution", {x},
                 {{"kernel", Pair(kernel)},
                  {"stride", Pair(stride)},
                  {"pad", Pair(kernel / 2)},
                  {"num_filter", std::to_string(filters)},
                  {"no_bias", "true"}},
                 name + "_conv");
  return Symbol::Op("BatchNorm", {x}, {{"act_type", relu ? "relu" : "none"}}, name + "_bn");
}

}  // namespace

Symbol BasicBlock(Symbol x, const std::string& name, int filters, int stride, bool project) {
  Symbol f = ConvBn(x, name + "_a", filters, 3, stride, /*relu=*/true);
  f = ConvBn(f, name + "_b", filters, 3, 1, /*relu=*/false);
  const Symbol shortcut = project ? ConvBn(x, name + "_proj", filters, 1, stride, false) : x;
  return Symbol::Op("relu", {Symbol::Op("add", {f, shortcut}, {}, name + "_sum")}, {},
                    name + "_relu");
}

Symbol BottleneckBlock(Symbol x, const std::string& name, int filters, int stride, bool project) {
  Symbol f = ConvBn(x, name + "_a", filters, 1, 1, /*relu=*/true);
  f = ConvBn(f, name + "_b", filters, 3, stride, /*relu=*/true);
  f = ConvBn(f, name + "_c", 4 * filters, 1, 1, /*relu=*/false);
  const Symbol shortcut = project ? ConvBn(x, name + "_proj", 4 * filters, 1, stride, false) : x;
  return Symbol::Op("relu", {Symbol::Op("add", {f, shortcut}, {}, name + "_sum")}, {},
                    name + "_relu");
}

namespace {

Symbol StemOf(const ResNetConfig& c) {
  const Symbol data = Symbol::Variable("data");
  if (c.stem == Stem::kSmall) return ConvBn(data, "stem", c.width, 3, 1, /*relu=*/true);
  const Symbol x = ConvBn(data, "stem", c.width, 7, 2, /*relu=*/true);
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
      x = c.bottleneck ? BottleneckBlock(x, name, filters, stride, project)
                       : BasicBlock(x, name, filters, stride, project);
      channels = out;
    }
  }
  x = Symbol::Op("Pooling", {x}, {{"global_pool", "true"}, {"pool_type", "avg"}}, "pool");
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(c.classes)}}, "fc");
}

}  // namespace examples

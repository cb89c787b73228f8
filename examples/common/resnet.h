// Residual networks (He et al. 2015) as weft symbols, in the shapes people train: basic blocks of
// conv-BatchNorm-relu, conv-BatchNorm plus a shortcut (the identity, or a strided 1x1 projection
// with its BatchNorm where the shape changes), then relu; global average pooling and a dense layer.
// train_resnet trains the small one on Fashion-MNIST; bench/resnet_bench times ResNet-18 against
// PyTorch's torchvision-shaped one (bench/torch_resnet_peer.py builds the same network).
//
//   Symbol logits = examples::ResNet(examples::ResNet18(/*classes=*/10, examples::Stem::kSmall));
#pragma once

#include <string>
#include <vector>

#include "weft/weft.h"

namespace examples {

enum class Stem {
  kSmall,     // a 3x3 convolution, stride 1 (CIFAR-style: 28x28 or 32x32 inputs)
  kImageNet,  // a 7x7 convolution, stride 2, then 3x3 max pooling, stride 2 (224x224 inputs)
};

struct ResNetConfig {
  Stem stem = Stem::kSmall;
  int width = 64;           // the stem's and the first stage's channels, doubled at each stage
  std::vector<int> blocks;  // blocks per stage; stages after the first start with stride 2
  int classes = 10;
  bool bottleneck = false;  // bottleneck blocks (1x1, 3x3, 1x1 to 4x the width) for basic ones
  // The network's dtype: other than float32, the data is cast to it first and the logits back to
  // float32 (a trainer of that dtype holds the parameters in it; the loss stays float32).
  weft::DType dtype = weft::DType::kFloat32;
};

// ResNet-18: four stages of two basic blocks, width 64.
inline ResNetConfig ResNet18(int classes, Stem stem) { return {stem, 64, {2, 2, 2, 2}, classes}; }

// ResNet-50: four stages of 3, 4, 6 and 3 bottleneck blocks, width 64 (torchvision's resnet50,
// the stride in the 3x3 convolution).
inline ResNetConfig ResNet50(int classes, Stem stem) {
  return {stem, 64, {3, 4, 6, 3}, classes, /*bottleneck=*/true};
}

// relu(F(x) + shortcut(x)) with F = conv-BatchNorm-relu, conv-BatchNorm (3x3, the first with
// `stride`) and the shortcut a strided 1x1 conv-BatchNorm when `project`, else x. Layers are named
// <name>_a_conv, <name>_a_bn, <name>_b_..., <name>_proj_... `dtype`: the data's (ResNetConfig's).
weft::Symbol BasicBlock(weft::Symbol x, const std::string& name, int filters, int stride,
                        bool project, weft::DType dtype = weft::DType::kFloat32);

// relu(F(x) + shortcut(x)) with F = 1x1 conv-BatchNorm-relu, 3x3 conv-BatchNorm-relu (with
// `stride`), 1x1 conv-BatchNorm to 4 * `filters` channels, the shortcut as in BasicBlock. Layers
// are named <name>_a_..., <name>_b_..., <name>_c_..., <name>_proj_...
weft::Symbol BottleneckBlock(weft::Symbol x, const std::string& name, int filters, int stride,
                             bool project, weft::DType dtype = weft::DType::kFloat32);

// Logits (N, classes) from the variable "data" (N, C, H, W). Layers are named stem_conv, stem_bn,
// stage2_block1_a_conv, ..., fc.
weft::Symbol ResNet(const ResNetConfig& config);

}  // namespace examples

// train_cnn: a small convolutional network on the 8x8 digits seen as 1x8x8 images: two
// convolution + relu + max-pooling stages, then two fully connected layers. Same flags and output
// as train_mlp.
//
//   bazel run //examples:train_cnn -- [--epochs=15] [--optimizer=adam]
#include <cstdio>

#include "examples/common/train.h"

namespace {

using weft::Symbol;

// (N, C, H, W) -> conv 3x3 (same size) -> relu -> 2x2 max pool (halves H and W)
Symbol ConvStage(Symbol x, const std::string& name, int filters) {
  x = Symbol::Op("Convolution", {x},
                 {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", std::to_string(filters)}},
                 name + "_conv");
  x = Symbol::Op("relu", {x}, {}, name + "_relu");
  return Symbol::Op("Pooling", {x},
                    {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}},
                    name + "_pool");
}

// logits (N, 10) from data (N, 1, 8, 8)
Symbol Cnn() {
  Symbol x = ConvStage(Symbol::Variable("data"), "stage1", 16);  // (N, 16, 4, 4)
  x = ConvStage(x, "stage2", 32);                                // (N, 32, 2, 2)
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "64"}}, "fc1");
  x = Symbol::Op("relu", {x}, {}, "fc1_relu");
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", "10"}}, "fc2");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    examples::TrainOptions defaults;
    defaults.epochs = 15;
    defaults.batch_size = 64;
    defaults.lr = 0.05;
    defaults.save_prefix = "cnn";
    defaults.images = true;
    auto options = examples::ParseTrainFlags(
        "train_cnn", "Trains a small convolutional network on the digits, as 1x8x8 images.",
        defaults, argc, argv);
    if (!options) return 0;
    const examples::TrainResult r = examples::Train(Cnn(), *options);
    std::printf("final test accuracy %.1f%%\n", 100 * r.test_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// train_mlp: a multilayer perceptron (64-256-256-10) on the 8x8 digits, trained by weft::Trainer
// (forward, backward and updates as one bound graph per step) with a progress bar per epoch;
// saves the parameters (safetensors) and the symbol (JSON).
//
//   bazel run //examples:train_mlp -- [--epochs=20] [--optimizer=adam]
//   [--data=mnist-images,mnist-labels]
#include <cstdio>

#include "examples/common/train.h"

namespace {

// logits (N, 10) from data (N, features)
weft::Symbol Mlp() {
  weft::Symbol x = weft::Symbol::Variable("data");
  x = weft::Symbol::Op("FullyConnected", {x}, {{"num_hidden", "256"}}, "fc1");
  x = weft::Symbol::Op("relu", {x}, {}, "relu1");
  x = weft::Symbol::Op("FullyConnected", {x}, {{"num_hidden", "256"}}, "fc2");
  x = weft::Symbol::Op("relu", {x}, {}, "relu2");
  return weft::Symbol::Op("FullyConnected", {x}, {{"num_hidden", "10"}}, "fc3");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    examples::TrainOptions defaults;
    defaults.epochs = 20;
    defaults.batch_size = 64;
    defaults.lr = 0.1;
    defaults.save_prefix = "mlp";
    auto options = examples::ParseTrainFlags(
        "train_mlp", "Trains an MLP (64-256-256-10) on the digits data set.", defaults, argc, argv);
    if (!options) return 0;
    const examples::TrainResult r = examples::Train(Mlp(), *options);
    std::printf("final test accuracy %.1f%%\n", 100 * r.test_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

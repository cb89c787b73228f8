// train_lstm: the 8x8 digits read row by row, as sequences of 8 steps of 8 pixels, by a
// bidirectional LSTM (the RNN op), whose outputs at every step feed a dense layer. Same flags and
// output as train_mlp; saves lstm.safetensors and lstm.json for embed_infer --model=lstm.
//
//   bazel run //examples:train_lstm -- [--epochs=15] [--hidden=64] [--device=gpu]
#include <cmath>
#include <cstdio>
#include <string>

#include "examples/common/train.h"

namespace {

using weft::Symbol;

constexpr int kRows = 8;  // steps of a sequence: the image's rows, of 8 pixels each

// logits (N, 10) from data (N, 64): (N, 8, 8) -> (8, N, 8) sequence-major -> bidirectional LSTM
// (8, N, 2H) -> (N, 8 * 2H) -> dense.
Symbol Lstm(int hidden) {
  Symbol x = Symbol::Op("reshape", {Symbol::Variable("data")}, {{"shape", "(-1, 8, 8)"}}, "rows");
  x = Symbol::Op("transpose", {x}, {{"axes", "(1, 0, 2)"}}, "steps");
  x = Symbol::Op(
      "RNN", {x},
      {{"mode", "lstm"}, {"state_size", std::to_string(hidden)}, {"bidirectional", "true"}},
      "lstm");
  x = Symbol::Op("transpose", {x}, {{"axes", "(1, 0, 2)"}}, "batch_major");
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", "10"}}, "fc");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    examples::TrainOptions defaults;
    defaults.epochs = 15;
    defaults.batch_size = 64;
    defaults.lr = 0.01;
    defaults.optimizer = "adam";
    defaults.save_prefix = "lstm";
    auto options = examples::ParseTrainFlags(
        "train_lstm",
        "Trains a bidirectional LSTM on the digits, read row by row (8 steps of 8 pixels).",
        defaults, argc, argv);
    if (!options) return 0;
    const int hidden = 64;
    // PyTorch's initialization of its LSTMs: every weight and bias uniform in +-1/sqrt(H).
    options->initialize = [hidden](const std::string& name, const weft::NDArray& array) {
      if (name != "lstm_parameters") return false;
      weft::Uniform(1 / std::sqrt(static_cast<double>(hidden))).InitWeight(name, array);
      return true;
    };
    options->zero_inputs = {"lstm_state", "lstm_state_cell"};
    const examples::TrainResult r = examples::Train(Lstm(hidden), *options);
    std::printf("final test accuracy %.1f%%\n", 100 * r.test_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

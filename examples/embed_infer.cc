// embed_infer: the embedding API in a few lines. Loads a saved symbol and its parameters (from
// train_mlp, train_cnn, train_lstm or train_resnet, auxiliary states included), classifies the
// rows of a CSV file or the test images of a folder of MNIST-format files, and prints the
// predictions. Binding for inference folds each BatchNorm into its convolution.
//
//   bazel run //examples:train_mlp && bazel run //examples:embed_infer -- --model=mlp --rows=5
//   bazel run //examples:embed_infer -- --model=resnet --mnist=/usr/share/datasets/fashion-mnist
//   [--device=gpu]
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/profile.h"
#include "weft/weft.h"

int main(int argc, char** argv) {
  examples::Flags flags("embed_infer",
                        "Classifies the rows of a CSV file (or MNIST-format test images) with a "
                        "model saved by train_mlp, train_cnn, train_lstm or train_resnet.");
  flags.AddString("model", "mlp", "prefix of <model>.json and <model>.safetensors");
  flags.AddString("csv", examples::DefaultDigitsPath(argv[0]),
                  "rows of 64 pixels, with or without a label last");
  flags.AddString("mnist", "",
                  "a folder of MNIST-format files (Fashion-MNIST): classify its t10k-* images "
                  "instead of --csv");
  flags.AddInt("rows", 10, "how many predictions to print");
  flags.AddString("device", "cpu", "cpu or gpu:N");
  flags.AddString("profile", "", examples::kProfileHelp);
  try {
    if (!flags.Parse(argc, argv)) return 0;
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // where bazel run started
    const std::string prefix = (ws ? std::string(ws) + "/" : "") + flags.GetString("model");
    weft::Symbol net = weft::LoadSymbol(prefix + ".json");
    std::map<std::string, std::string> meta;
    std::map<std::string, weft::NDArray> args = weft::Load(prefix + ".safetensors", &meta);

    const std::string mnist = flags.GetString("mnist");
    weft::Dataset rows = mnist.empty() ? weft::ReadCsv(flags.GetString("csv"), -1)  // label last
                                       : examples::ReadMnistFolder(mnist, "t10k", /*flat=*/true);
    // As in training: scaled, and shaped as the model's samples (the CNN reads 1x8x8 images).
    weft::NDArray data =
        rows.data * (1.0 / std::stod(meta.count("input_scale") ? meta["input_scale"] : "1"));
    const int64_t n = data.shape()[0];
    const weft::Shape sample =
        weft::Shape::Parse(meta.count("input_shape") ? meta["input_shape"] : "(64,)");
    weft::Shape shape{n};
    for (int64_t d : sample.dims()) shape.PushBack(d);
    args["data"] = data.Reshape(shape);
    // Inputs the model holds at zero (an LSTM's initial states), shaped for this many rows.
    std::istringstream zeros(meta.count("zero_inputs") ? meta["zero_inputs"] : "");
    const auto shapes = weft::InferArgumentShapes(net.ToGraph(), {{"data", shape}});
    for (std::string name; std::getline(zeros, name, ',');)
      (args[name] = weft::NDArray(shapes.at(name))).Fill(0);

    const weft::Device device = weft::Device::Parse(flags.GetString("device"));
    examples::ProfileScope profile(flags.GetString("profile"));  // the copies and the forward pass
    for (auto& [name, array] : args) array = array.Copy(device);
    auto exec = weft::Executor::Bind(net, device, args);
    exec->Forward(/*is_train=*/false);
    const std::vector<float> probs = exec->outputs()[0].ToVector<float>();  // (n, classes)
    profile.Stop();
    const std::vector<float> labels = rows.label.ToVector<float>();
    const int64_t classes = exec->outputs()[0].shape()[1];
    int correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        best = probs[i * classes + c] > probs[i * classes + best] ? c : best;
      correct += best == static_cast<int64_t>(labels[i]);
      if (i < flags.GetInt("rows")) {
        std::printf("row %lld: predicted %lld (p=%.3f), label %d\n", static_cast<long long>(i),
                    static_cast<long long>(best), probs[i * classes + best],
                    static_cast<int>(labels[i]));
      }
    }
    std::printf("%d of %lld rows predicted correctly (%.1f%%)\n", correct,
                static_cast<long long>(n), 100.0 * correct / n);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

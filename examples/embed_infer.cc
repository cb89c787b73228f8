// embed_infer: the embedding API in a few lines. Loads a saved symbol and its parameters (from
// train_mlp, train_cnn, train_lstm or train_resnet, auxiliary states included), classifies the
// rows of a CSV file or the test images of a folder of MNIST-format files, and prints the
// predictions, --batch_size rows per forward pass (so 10,000 Fashion-MNIST images through a ResNet
// need one batch's activations, not all of theirs). Binding for inference folds each BatchNorm
// into its convolution. With a model from train_gpt (its safetensors carry a vocabulary) it loads
// the generation step's symbol (<model>_step.json) instead and continues --prompt by --chars
// characters with the key-value cache (examples/common/gpt_generate.h), printing their rate. With
// --onnx it classifies with a model trained elsewhere instead (weft/onnx.h): its first input takes
// the rows, shaped as the file declares its extents after the batch axis.
//
//   bazel run //examples:train_mlp && bazel run //examples:embed_infer -- --model=mlp --rows=5
//   python3 examples/export_digits_onnx.py && bazel run //examples:embed_infer --
//   --onnx=digits.onnx bazel run //examples:embed_infer -- --model=resnet
//   --mnist=/usr/share/datasets/fashion-mnist bazel run //examples:embed_infer -- --model=gpt
//   --prompt="The " --chars=300
//   [--device=gpu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/gpt_generate.h"
#include "examples/common/profile.h"
#include "weft/onnx.h"
#include "weft/weft.h"

// What a model reads: the name of the input the rows go to, their shape per sample, and the inputs
// it holds at zero (comma-separated: an LSTM's initial states).
struct ModelInput {
  bool onnx = false;  // imported: its outputs are scores, not necessarily probabilities
  std::string name = "data";
  weft::Shape sample;
  std::string zero_inputs;
};

// Arguments bound for a batch of `shape`: the parameters, the data array, and the inputs held at
// zero, shaped for it.
std::map<std::string, weft::NDArray> BatchArguments(const weft::Symbol& net,
                                                    std::map<std::string, weft::NDArray> args,
                                                    const weft::Shape& shape,
                                                    const ModelInput& input, weft::Device device) {
  args[input.name] = weft::NDArray(shape, device);
  const std::string& zero_inputs = input.zero_inputs;
  const auto shapes = weft::InferArgumentShapes(net.ToGraph(), {{input.name, shape}});
  std::istringstream zeros(zero_inputs);
  for (std::string name; std::getline(zeros, name, ',');)
    (args[name] = weft::NDArray(shapes.at(name), device)).Fill(0);
  return args;
}

// The class scores (rows, classes) of `data`'s rows, shaped as the input's samples, `batch` rows
// per forward pass: parameters copied to the device once, an executor bound per batch size (the
// last batch may be smaller).
std::vector<float> Classify(const weft::Symbol& net, std::map<std::string, weft::NDArray> params,
                            const weft::NDArray& data, const ModelInput& input, weft::Device device,
                            int64_t batch, int64_t* classes) {
  for (auto& [name, array] : params) array = array.Copy(device);
  const int64_t n = data.shape()[0];
  std::vector<float> probs;
  std::map<std::string, weft::NDArray> args;
  std::unique_ptr<weft::Executor> exec;
  for (int64_t begin = 0; begin < n; begin += batch) {
    weft::Shape shape{std::min(batch, n - begin)};
    for (int64_t d : input.sample.dims()) shape.PushBack(d);
    if (exec == nullptr || args.at(input.name).shape() != shape) {
      args = BatchArguments(net, params, shape, input, device);
      exec = weft::Executor::Bind(net, device, args);
    }
    data.Slice(begin, begin + shape[0]).Reshape(shape).CopyTo(args.at(input.name));
    exec->Forward(/*is_train=*/false);
    const std::vector<float> p = exec->outputs()[0].ToVector<float>();
    probs.insert(probs.end(), p.begin(), p.end());
    *classes = exec->outputs()[0].shape()[1];
  }
  return probs;
}

// Continues --prompt with train_gpt's model `prefix` (meta: its vocabulary, byte values by id,
// and its shape) and prints the text and the characters per second.
void ContinuePrompt(const std::string& prefix, std::map<std::string, std::string>& meta,
                    const std::map<std::string, weft::NDArray>& params,
                    const examples::Flags& flags, weft::Device device) {
  std::string vocabulary;  // id -> byte
  std::istringstream bytes(meta["vocabulary"]);
  for (std::string b; std::getline(bytes, b, ',');)
    vocabulary.push_back(static_cast<char>(std::stoi(b)));
  std::vector<float> prompt;  // the prompt's bytes that the vocabulary has
  for (char c : flags.GetString("prompt")) {
    const size_t id = vocabulary.find(c);
    if (id != std::string::npos) prompt.push_back(static_cast<float>(id));
  }
  if (prompt.empty()) throw weft::Error("--prompt: expected a character of the model's vocabulary");
  const examples::GptConfig config{.vocab = static_cast<int>(vocabulary.size()),
                                   .context = std::stoi(meta["context"]),
                                   .layers = std::stoi(meta["layers"]),
                                   .heads = std::stoi(meta["heads"]),
                                   .width = std::stoi(meta["width"])};
  examples::GptGenerator generator(config, weft::LoadSymbol(prefix + "_step.json"), params, device);
  std::mt19937_64 rng(static_cast<uint64_t>(flags.GetInt("seed")));
  const int n = flags.GetInt("chars");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> ids =
      generator.Continue(prompt, n, {flags.GetFloat("temperature"), flags.GetInt("top_k")}, rng);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string text;
  for (float id : prompt) text.push_back(vocabulary[static_cast<size_t>(id)]);
  for (int id : ids) text.push_back(vocabulary[id]);
  std::printf("%s\n%d characters in %.3f s (%.0f characters/s)\n", text.c_str(), n, seconds,
              seconds > 0 ? n / seconds : 0.0);
}

int main(int argc, char** argv) {
  examples::Flags flags("embed_infer",
                        "Classifies the rows of a CSV file (or MNIST-format test images) with a "
                        "model saved by train_mlp, train_cnn, train_lstm or train_resnet, or "
                        "continues a prompt with one saved by train_gpt.");
  flags.AddString(
      "model", "mlp",
      "prefix of <model>.json and <model>.safetensors (and train_gpt's <model>_step.json)");
  flags.AddString("csv", examples::DefaultDigitsPath(argv[0]),
                  "rows of 64 pixels, with or without a label last");
  flags.AddString("mnist", "",
                  "a folder of MNIST-format files (Fashion-MNIST): classify its t10k-* images "
                  "instead of --csv");
  flags.AddString("onnx", "",
                  "an ONNX model to classify with instead of --model (its first input takes the "
                  "rows, shaped as the file declares them after the batch axis)");
  flags.AddFloat("input_scale", 1, "--onnx: the rows are divided by this first");
  flags.AddInt("rows", 10, "how many predictions to print");
  flags.AddInt("batch_size", 500, "rows per forward pass");
  flags.AddString("device", "cpu", "cpu or gpu:N");
  flags.AddString("profile", "", examples::kProfileHelp);
  flags.AddString("prompt", "The ", "train_gpt's models: the text to continue");
  flags.AddInt("chars", 200, "train_gpt's models: characters to generate");
  flags.AddFloat("temperature", 0.8, "train_gpt's models: sampling temperature (0: the likeliest)");
  flags.AddInt("top_k", 20, "train_gpt's models: sample among the k likeliest characters (0: all)");
  flags.AddInt("seed", 1, "train_gpt's models: the sampling's seed");
  try {
    if (!flags.Parse(argc, argv)) return 0;
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // where bazel run started
    const std::string root = ws ? std::string(ws) + "/" : "";
    const weft::Device device = weft::Device::Parse(flags.GetString("device"));
    weft::Symbol net;
    std::map<std::string, std::string> meta;
    std::map<std::string, weft::NDArray> args;
    ModelInput input;
    if (const std::string onnx = flags.GetString("onnx"); !onnx.empty()) {
      const weft::OnnxModel m = weft::ImportOnnx(onnx.front() == '/' ? onnx : root + onnx);
      std::printf("%s: opset %lld, from %s, input '%s'\n", onnx.c_str(),
                  static_cast<long long>(m.opset), m.producer.c_str(), m.inputs.at(0).name.c_str());
      net = m.symbol, args = m.params, input.name = m.inputs.at(0).name, input.onnx = true;
      const std::vector<int64_t>& dims = m.inputs[0].dims;
      for (size_t i = 1; i < dims.size(); ++i) {
        if (dims[i] < 0)
          throw weft::Error("--onnx: expected the input's extents after the batch axis");
        input.sample.PushBack(dims[i]);
      }
      meta["input_scale"] = std::to_string(flags.GetFloat("input_scale"));
    } else {
      const std::string prefix = root + flags.GetString("model");
      net = weft::LoadSymbol(prefix + ".json");
      args = weft::Load(prefix + ".safetensors", &meta);
      if (meta.count("vocabulary")) {  // train_gpt's
        ContinuePrompt(prefix, meta, args, flags, device);
        return 0;
      }
      input.sample = weft::Shape::Parse(meta.count("input_shape") ? meta["input_shape"] : "(64,)");
      input.zero_inputs = meta.count("zero_inputs") ? meta["zero_inputs"] : "";
    }

    const std::string mnist = flags.GetString("mnist");
    weft::Dataset rows = mnist.empty() ? weft::ReadCsv(flags.GetString("csv"), -1)  // label last
                                       : examples::ReadMnistFolder(mnist, "t10k", /*flat=*/true);
    // As in training: scaled, and shaped as the model's samples (the CNN reads 1x8x8 images).
    weft::NDArray data =
        rows.data * (1.0 / std::stod(meta.count("input_scale") ? meta["input_scale"] : "1"));
    const int64_t n = data.shape()[0];
    const int64_t batch = flags.GetInt("batch_size");
    if (batch < 1) throw weft::Error("--batch_size: expected a positive number of rows");
    examples::ProfileScope profile(flags.GetString("profile"));  // the copies and forward passes
    int64_t classes = 0;
    const std::vector<float> probs = Classify(net, args, data, input, device, batch, &classes);
    profile.Stop();
    const std::vector<float> labels = rows.label.ToVector<float>();
    int correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        best = probs[i * classes + c] > probs[i * classes + best] ? c : best;
      correct += best == static_cast<int64_t>(labels[i]);
      if (i < flags.GetInt("rows")) {
        std::printf("row %lld: predicted %lld (%s%.3f), label %d\n", static_cast<long long>(i),
                    static_cast<long long>(best),
                    input.onnx ? "score " : "p=", probs[i * classes + best],
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

#include "examples/common/train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/profile.h"
#include "examples/common/progress.h"

namespace examples {

namespace {

using weft::Dataset;
using weft::Executor;
using weft::NDArray;
using weft::Shape;
using weft::Symbol;

struct Split {
  Dataset train, test;
  float scale = 1;  // features were divided by this
};

// Every fifth sample (i % 5 == 0) is held out, as in examples/common/data.h.
Dataset Subset(const Dataset& all, bool train, bool images) {
  const std::vector<float> x = all.data.ToVector<float>(), y = all.label.ToVector<float>();
  const int64_t n = all.data.shape()[0], row = all.data.size() / n;
  std::vector<float> xs, ys;
  for (int64_t i = 0; i < n; ++i) {
    if (IsTrainSample(static_cast<int>(i)) != train) continue;
    xs.insert(xs.end(), x.begin() + i * row, x.begin() + (i + 1) * row);
    ys.push_back(y[i]);
  }
  const int64_t m = static_cast<int64_t>(ys.size());
  Shape shape = all.data.shape();
  shape[0] = m;
  if (images && shape.ndim() == 2) {  // (N, 64) digits -> (N, 1, 8, 8)
    const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(row))));
    WEFT_CHECK_EQ(side * side, row) << "images: expected square images, found " << row << " pixels per row";
    shape = Shape{m, 1, side, side};
  }
  return {NDArray::FromVector(xs, shape), NDArray::FromVector(ys, Shape{m})};
}

// Scales features into [0, 1] by the largest value (digits: 16; MNIST is already scaled).
Dataset Scaled(const Dataset& d, float* scale) {
  std::vector<float> x = d.data.ToVector<float>();
  float max = 0;
  for (float v : x) max = std::max(max, std::abs(v));
  *scale = max > 1 ? max : 1;
  for (float& v : x) v /= *scale;
  return {NDArray::FromVector(x, d.data.shape()), d.label};
}

Split LoadSplit(const TrainOptions& o) {
  const size_t comma = o.data.find(',');
  Dataset all = comma == std::string::npos
                    ? weft::ReadCsv(o.data, -1)
                    : weft::ReadMnist(o.data.substr(0, comma), o.data.substr(comma + 1), !o.images);
  float scale = 1;
  all = Scaled(all, &scale);
  return {Subset(all, true, o.images), Subset(all, false, o.images), scale};
}

}  // namespace

std::optional<TrainOptions> ParseTrainFlags(const std::string& program, const std::string& description,
                                            const TrainOptions& defaults, int argc, char** argv) {
  Flags flags(program, description);
  flags.AddInt("epochs", defaults.epochs, "passes over the training data");
  flags.AddInt("batch_size", defaults.batch_size, "samples per step");
  flags.AddFloat("lr", defaults.lr, "learning rate");
  flags.AddString("optimizer", defaults.optimizer, "sgd (momentum 0.9) or adam");
  flags.AddInt("seed", static_cast<int>(defaults.seed), "seed for initialization and shuffling");
  flags.AddString("device", "cpu", "cpu or gpu:N");
  flags.AddString("data", DefaultDigitsPath(argv[0]),
                  "a CSV file (label in the last column) or 'images,labels' MNIST idx files");
  flags.AddString("save_prefix", defaults.save_prefix, "write <prefix>.safetensors and <prefix>.json ('' to skip)");
  flags.AddString("profile", "", kProfileHelp);
  if (!flags.Parse(argc, argv)) return std::nullopt;
  TrainOptions o = defaults;
  o.epochs = flags.GetInt("epochs");
  o.batch_size = flags.GetInt("batch_size");
  o.lr = flags.GetFloat("lr");
  o.optimizer = flags.GetString("optimizer");
  o.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  o.device = weft::Device::Parse(flags.GetString("device"));
  o.data = flags.GetString("data");
  o.save_prefix = flags.GetString("save_prefix");
  o.profile = flags.GetString("profile");
  if (o.epochs < 1 || o.batch_size < 1 || o.lr <= 0) {
    WEFT_THROW(program << ": expected epochs >= 1, batch_size >= 1 and lr > 0");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adam") {
    WEFT_THROW(program << ": flag --optimizer: expected 'sgd' or 'adam', found '" << o.optimizer << "'");
  }
  return o;
}

}  // namespace examples

namespace examples {

namespace {

// The network with its loss for training, and its predictions for evaluation and saving.
struct Model {
  Symbol train;    // outputs: per-sample loss (N,), class probabilities (N, C) (no gradient)
  Symbol predict;  // class probabilities (N, C)
  std::vector<std::string> params;
};

bool IsZeroInput(const TrainOptions& o, const std::string& name) {
  return std::find(o.zero_inputs.begin(), o.zero_inputs.end(), name) != o.zero_inputs.end();
}

Model MakeModel(const Symbol& logits, const TrainOptions& o) {
  Symbol probs = Symbol::Op("softmax", {logits}, {}, "probs");
  Symbol loss = Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
  Model m{Symbol::Group({loss, Symbol::Op("stop_gradient", {probs}, {}, "probs_out")}), probs, {}};
  for (const std::string& name : m.train.ListArguments()) {
    if (name != "data" && name != "label" && !IsZeroInput(o, name)) m.params.push_back(name);
  }
  return m;
}

// Zeroes the zero inputs of `exec` (after Bind and Reshape, which leave new arrays as they are).
void ZeroInputs(const Executor& exec, const TrainOptions& o) {
  for (const std::string& name : o.zero_inputs) exec.args().at(name).Fill(0);
}

std::unique_ptr<Executor> BindTraining(const Model& m, const TrainOptions& o, const Shape& data_shape) {
  Shape batch = data_shape;
  batch[0] = o.batch_size;
  const std::map<std::string, Shape> shapes =
      weft::InferArgumentShapes(m.train.ToGraph(), {{"data", batch}, {"label", Shape{o.batch_size}}});
  Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  weft::Xavier init(weft::Xavier::RandType::kUniform, weft::Xavier::FactorType::kAvg, 2.0);
  for (const auto& [name, shape] : shapes) {
    args[name] = NDArray(shape, o.device);
    if (name == "data" || name == "label" || IsZeroInput(o, name)) continue;
    if (!o.initialize || !o.initialize(name, args[name])) init.Initialize(name, args[name]);
    grads[name] = NDArray(shape, o.device);
    reqs[name] = weft::GradReq::kWrite;
  }
  auto exec = Executor::Bind(m.train, o.device, args, grads, reqs);
  ZeroInputs(*exec, o);
  return exec;
}

std::unique_ptr<weft::Optimizer> MakeOptimizer(const TrainOptions& o) {
  const double rescale = 1.0 / o.batch_size;  // the loss is summed over the batch
  if (o.optimizer == "adam") return std::make_unique<weft::Adam>(o.lr, 0.9, 0.999, 1e-8, 0, rescale);
  return std::make_unique<weft::SGD>(o.lr, 0.9, 1e-4, rescale);
}

// One pass over the training set; returns the mean loss.
double TrainEpoch(Executor& exec, const Model& m, weft::ArrayIter& iter, weft::Optimizer& opt, weft::Metric& acc,
                  Progress& bar) {
  double loss_sum = 0;
  int64_t samples = 0;
  for (iter.Reset(); iter.Next();) {
    const weft::DataBatch& batch = iter.Current();
    batch.data.CopyTo(exec.args().at("data"));
    batch.label.CopyTo(exec.args().at("label"));
    exec.Forward(/*is_train=*/true);
    exec.Backward();
    for (size_t i = 0; i < m.params.size(); ++i) {
      opt.Update(static_cast<int>(i), exec.args().at(m.params[i]), exec.arg_grads().at(m.params[i]));
    }
    for (float l : exec.outputs()[0].ToVector<float>()) loss_sum += l;
    samples += batch.data.shape()[0];
    acc.Update(batch.label, exec.outputs()[1]);
    bar.Step(static_cast<int>(batch.data.shape()[0]));
  }
  return loss_sum / static_cast<double>(samples);
}

double TestAccuracy(const Executor& train, const Model& m, const Dataset& test, const TrainOptions& o) {
  std::map<std::string, Shape> shapes = {{"data", test.data.shape()}, {"label", test.label.shape()}};
  if (!o.zero_inputs.empty()) {  // their shapes follow the batch's
    const std::map<std::string, Shape> all = weft::InferArgumentShapes(m.train.ToGraph(), shapes);
    for (const std::string& name : o.zero_inputs) shapes[name] = all.at(name);
  }
  auto exec = train.Reshape(shapes);
  ZeroInputs(*exec, o);
  test.data.CopyTo(exec->args().at("data"));
  test.label.CopyTo(exec->args().at("label"));
  exec->Forward(/*is_train=*/false);
  weft::Accuracy acc;
  acc.Update(test.label, exec->outputs()[1]);
  return acc.Get();
}

// The parameters, with what embed_infer must do to new rows in the metadata: the scaling and
// the shape of one sample.
void SaveModel(const Model& m, const Executor& exec, const TrainOptions& o, float scale) {
  const std::string& prefix = o.save_prefix;
  Shape sample;
  const Shape& data = exec.args().at("data").shape();
  for (int i = 1; i < data.ndim(); ++i) sample.PushBack(data[i]);
  std::string dir;
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) dir = std::string(ws) + "/";  // bazel run
  std::map<std::string, NDArray> params;
  for (const std::string& name : m.params) params[name] = exec.args().at(name);
  std::string zero_inputs;
  for (const std::string& name : o.zero_inputs) zero_inputs += (zero_inputs.empty() ? "" : ",") + name;
  const std::map<std::string, std::string> meta = {
      {"input_scale", std::to_string(scale)}, {"input_shape", sample.ToString()}, {"zero_inputs", zero_inputs}};
  weft::Save(dir + prefix + ".safetensors", params, meta);
  weft::SaveSymbol(dir + prefix + ".json", m.predict);
  std::printf("saved %s%s.safetensors and %s%s.json\n", dir.c_str(), prefix.c_str(), dir.c_str(), prefix.c_str());
}

}  // namespace

TrainResult Train(const Symbol& logits, const TrainOptions& o) {
  weft::SeedRandom(o.seed);
  const Split split = LoadSplit(o);
  const Model model = MakeModel(logits, o);
  auto exec = BindTraining(model, o, split.train.data.shape());
  auto opt = MakeOptimizer(o);
  weft::ArrayIter iter(split.train, {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed});
  const int batches = static_cast<int>((iter.num_samples() + o.batch_size - 1) / o.batch_size);
  std::printf("%lld training and %lld test samples; %zu parameter arrays; %s, lr %g, batch %d\n",
              static_cast<long long>(iter.num_samples()), static_cast<long long>(split.test.data.shape()[0]),
              model.params.size(), o.optimizer.c_str(), o.lr, o.batch_size);
  TrainResult result;
  ProfileScope profile(o.profile);  // the training epochs, not the loading and binding before them
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    Progress bar("epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs), batches);
    weft::Accuracy train_acc;
    result.train_loss = TrainEpoch(*exec, model, iter, *opt, train_acc, bar);
    result.test_accuracy = TestAccuracy(*exec, model, split.test, o);
    char summary[128];
    std::snprintf(summary, sizeof(summary), "loss %.4f  train acc %.1f%%  test acc %.1f%%", result.train_loss,
                  100 * train_acc.Get(), 100 * result.test_accuracy);
    bar.Finish(summary);
  }
  profile.Stop();
  if (!o.save_prefix.empty()) SaveModel(model, *exec, o, split.scale);
  return result;
}

}  // namespace examples

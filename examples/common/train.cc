#include "examples/common/train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "distributed/world.h"
#include "examples/common/data.h"
#include "examples/common/flags.h"
#include "examples/common/profile.h"
#include "examples/common/progress.h"

namespace examples {

namespace {

using weft::Dataset;
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
    WEFT_CHECK_EQ(side * side, row)
        << "images: expected square images, found " << row << " pixels per row";
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

// A folder of the four MNIST-format files (Fashion-MNIST as Debian ships it): train-* to train
// on, t10k-* to test on.
Split LoadMnistFolder(const TrainOptions& o) {
  return {ReadMnistFolder(o.data, "train", !o.images), ReadMnistFolder(o.data, "t10k", !o.images),
          1};
}

Split LoadSplit(const TrainOptions& o) {
  if (std::filesystem::is_directory(o.data)) return LoadMnistFolder(o);
  const size_t comma = o.data.find(',');
  Dataset all = comma == std::string::npos
                    ? weft::ReadCsv(o.data, -1)
                    : weft::ReadMnist(o.data.substr(0, comma), o.data.substr(comma + 1), !o.images);
  float scale = 1;
  all = Scaled(all, &scale);
  return {Subset(all, true, o.images), Subset(all, false, o.images), scale};
}

}  // namespace

std::unique_ptr<weft::Optimizer> MakeOptimizer(const TrainOptions& o, double rescale_grad) {
  if (o.optimizer == "adam")
    return std::make_unique<weft::Adam>(o.lr, 0.9, 0.999, 1e-8, 0, rescale_grad);
  if (o.optimizer == "adamw") {
    auto adamw = std::make_unique<weft::AdamW>(o.lr, 0.9, 0.95, 1e-8, o.wd, rescale_grad);
    adamw->set_decay_filter(weft::DecayMatricesOnly);
    return adamw;
  }
  return std::make_unique<weft::SGD>(o.lr, 0.9, o.wd, rescale_grad);
}

std::optional<TrainOptions> ParseTrainFlags(const std::string& program,
                                            const std::string& description,
                                            const TrainOptions& defaults, int argc, char** argv,
                                            const std::function<void(Flags&)>& add,
                                            const std::function<void(const Flags&)>& read) {
  Flags flags(program, description);
  if (add) add(flags);
  flags.AddInt("epochs", defaults.epochs, "passes over the training data");
  flags.AddInt("batch_size", defaults.batch_size, "samples per step");
  flags.AddFloat("lr", defaults.lr, "learning rate");
  flags.AddString("optimizer", defaults.optimizer,
                  "sgd (momentum 0.9), adam, or adamw (betas 0.9, 0.95; decays matrices only)");
  flags.AddFloat("wd", defaults.wd, "weight decay (sgd, adamw)");
  flags.AddString("schedule", defaults.cosine ? "cosine" : "constant",
                  "the learning rate: constant, or cosine from lr to 0 over the run");
  flags.AddInt("seed", static_cast<int>(defaults.seed), "seed for initialization and shuffling");
  flags.AddString("device", "cpu", "cpu or gpu:N");
  flags.AddString("precision", weft::PrecisionName(defaults.precision),
                  "float32, bfloat16-mixed or float16-mixed (GPU): float32 master weights, "
                  "16-bit compute");
  flags.AddString("data", defaults.data.empty() ? DefaultDigitsPath(argv[0]) : defaults.data,
                  "a CSV file (label in the last column), 'images,labels' MNIST idx files (one "
                  "in five held out), or a folder of the four MNIST-format files (train-*, "
                  "t10k-*; .gz or not), e.g. /usr/share/datasets/fashion-mnist");
  flags.AddString("save_prefix", defaults.save_prefix,
                  "write <prefix>.safetensors and <prefix>.json ('' to skip)");
  flags.AddString("profile", "", kProfileHelp);
  flags.AddString("dot", "", "write the bound training step there as Graphviz DOT ('' to skip)");
  flags.AddBool("dist", false,
                "data-parallel over the ranks of mpirun -np N (batch_size: the global batch)");
  if (!flags.Parse(argc, argv)) return std::nullopt;
  if (read) read(flags);
  TrainOptions o = defaults;
  o.epochs = flags.GetInt("epochs");
  o.batch_size = flags.GetInt("batch_size");
  o.lr = flags.GetFloat("lr");
  o.optimizer = flags.GetString("optimizer");
  o.wd = flags.GetFloat("wd");
  const std::string schedule = flags.GetString("schedule");
  if (schedule != "constant" && schedule != "cosine") {
    WEFT_THROW(program << ": flag --schedule: expected 'constant' or 'cosine', found '" << schedule
                       << "'");
  }
  o.cosine = schedule == "cosine";
  o.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  o.device = weft::Device::Parse(flags.GetString("device"));
  o.precision = weft::ParsePrecision(flags.GetString("precision"));
  o.data = flags.GetString("data");
  o.save_prefix = flags.GetString("save_prefix");
  o.profile = flags.GetString("profile");
  o.dot = flags.GetString("dot");
  o.dist = flags.GetBool("dist");
  if (o.epochs < 1 || o.batch_size < 1 || o.lr <= 0 || o.wd < 0) {
    WEFT_THROW(program << ": expected epochs >= 1, batch_size >= 1, lr > 0 and wd >= 0");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw") {
    WEFT_THROW(program << ": flag --optimizer: expected 'sgd', 'adam' or 'adamw', found '"
                       << o.optimizer << "'");
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
};

Model MakeModel(const Symbol& logits) {
  Symbol probs = Symbol::Op("softmax", {logits}, {}, "probs");
  Symbol loss = Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
  return {Symbol::Group({loss, Symbol::Op("stop_gradient", {probs}, {}, "probs_out")}), probs};
}

// The data inputs for a batch of `data_shape`: "data", "label", and the zero inputs, whose shapes
// follow the batch's (an RNN's initial states).
std::map<std::string, Shape> InputShapes(const Model& m, const TrainOptions& o,
                                         const Shape& data_shape) {
  std::map<std::string, Shape> shapes = {{"data", data_shape}, {"label", Shape{data_shape[0]}}};
  if (o.zero_inputs.empty()) return shapes;
  const std::map<std::string, Shape> all = weft::InferArgumentShapes(m.train.ToGraph(), shapes);
  for (const std::string& name : o.zero_inputs) shapes[name] = all.at(name);
  return shapes;
}

// One pass over the training set; returns the mean loss.
double TrainEpoch(weft::Trainer& trainer, weft::ArrayIter& iter, weft::Metric& acc, Progress& bar) {
  double loss_sum = 0;
  int64_t samples = 0;
  for (iter.Reset(); iter.Next();) {
    const weft::DataBatch& batch = iter.Current();
    trainer.Step(batch);
    for (float l : trainer.outputs()[0].ToVector<float>()) loss_sum += l;
    samples += batch.data.shape()[0];
    acc.Update(batch.label, trainer.outputs()[1]);
    bar.Step(static_cast<int>(batch.data.shape()[0]));
  }
  return loss_sum / static_cast<double>(samples);
}

// In batches of at most kTestBatch (a whole test set at once would hold every layer's
// activations for all of it).
double TestAccuracy(weft::Trainer& trainer, const Model& m, const Dataset& test,
                    const TrainOptions& o) {
  constexpr int64_t kTestBatch = 500;
  const int64_t n = test.data.shape()[0];
  weft::Accuracy acc;
  for (int64_t begin = 0; begin < n; begin += kTestBatch) {
    const int64_t end = std::min(n, begin + kTestBatch);
    weft::Trainer::ArrayMap inputs = {{"data", test.data.Slice(begin, end)}};
    const std::map<std::string, Shape> shapes = InputShapes(m, o, inputs["data"].shape());
    for (const std::string& name : o.zero_inputs) {
      inputs[name] = NDArray(shapes.at(name), o.device);
      inputs[name].Fill(0);
    }
    acc.Update(test.label.Slice(begin, end), trainer.Predict(inputs)[0]);
  }
  return acc.Get();
}

// The parameters, with what embed_infer must do to new rows in the metadata: the scaling, the
// shape of one sample, and the zero inputs to make again.
void SaveModel(const Model& m, const weft::Trainer& trainer, const TrainOptions& o, float scale) {
  const std::string& prefix = o.save_prefix;
  Shape sample;
  const Shape& data = trainer.data("data").shape();
  for (int i = 1; i < data.ndim(); ++i) sample.PushBack(data[i]);
  std::string dir;
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"))
    dir = std::string(ws) + "/";  // bazel run
  std::map<std::string, NDArray> params;
  for (const std::string& name : trainer.parameter_names()) params[name] = trainer.parameter(name);
  for (const std::string& name : trainer.auxiliary_names()) params[name] = trainer.auxiliary(name);
  std::string zero_inputs;
  for (const std::string& name : o.zero_inputs)
    zero_inputs += (zero_inputs.empty() ? "" : ",") + name;
  const std::map<std::string, std::string> meta = {{"input_scale", std::to_string(scale)},
                                                   {"input_shape", sample.ToString()},
                                                   {"zero_inputs", zero_inputs}};
  weft::Save(dir + prefix + ".safetensors", params, meta);
  weft::SaveSymbol(dir + prefix + ".json", m.predict);
  std::printf("saved %s%s.safetensors and %s%s.json\n", dir.c_str(), prefix.c_str(), dir.c_str(),
              prefix.c_str());
}

// With --dist: this rank's share of the global batch and its GPU; ranks other than 0 print
// nothing (their stdout goes to /dev/null), so the job's output is rank 0's.
TrainOptions ForRank(const TrainOptions& o, const weft::dist::Communicator& world) {
  TrainOptions local = o;
  if (o.batch_size % world.size() != 0) {
    WEFT_THROW("--dist: the global batch " << o.batch_size << " must divide evenly among "
                                           << world.size() << " ranks");
  }
  local.batch_size = o.batch_size / world.size();
  if (o.device.is_gpu()) local.device = weft::Device::Gpu(world.local_rank());
  if (world.rank() != 0) {
    local.save_prefix.clear();
    local.profile.clear();
    local.dot.clear();
    if (std::freopen("/dev/null", "w", stdout) == nullptr)
      WEFT_THROW("--dist: cannot silence rank " << world.rank());
  }
  return local;
}

}  // namespace

void WriteDot(const weft::Trainer& trainer, const std::string& path) {
  std::ofstream out(path);
  out << trainer.ToDot();
  if (!out.flush()) WEFT_THROW("--dot: cannot write '" << path << "'");
  std::printf("wrote the bound training step to %s (dot -Tsvg %s -o step.svg)\n", path.c_str(),
              path.c_str());
}

TrainResult Train(const Symbol& logits, const TrainOptions& global) {
  // Outlives the trainer (declared first): its collectives are done before MPI is finalized.
  const std::unique_ptr<weft::dist::Communicator> world =
      global.dist ? weft::dist::ConnectWorld() : nullptr;
  const TrainOptions o = world ? ForRank(global, *world) : global;
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  if (world && rank == 0) std::printf("data-parallel: %d ranks (%s)\n", ranks, world->transport());
  weft::SeedRandom(o.seed);
  const Split split = LoadSplit(o);
  const Model model = MakeModel(logits);
  Shape batch = split.train.data.shape();
  batch[0] = o.batch_size;
  const int global_batch = o.batch_size * ranks;
  const int batches =
      static_cast<int>((split.train.data.shape()[0] + global_batch - 1) / global_batch);
  weft::TrainerOptions options{
      .device = o.device, .precision = o.precision, .predict = model.predict};
  if (o.cosine)
    options.schedule.decay = weft::LrSchedule::Cosine{.steps = int64_t{batches} * o.epochs};
  options.initialize = o.initialize;
  options.communicator = world.get();
  weft::Trainer trainer(
      model.train, InputShapes(model, o, batch),
      weft::Xavier(weft::Xavier::RandType::kUniform, weft::Xavier::FactorType::kAvg, 2.0),
      *MakeOptimizer(o, 1.0 / o.batch_size), options);  // the loss is summed over the batch
  for (const std::string& name : o.zero_inputs) trainer.data(name).Fill(0);
  if (!o.dot.empty()) WriteDot(trainer, o.dot);
  weft::ArrayIter iter(split.train, {.batch_size = o.batch_size,
                                     .shuffle = true,
                                     .seed = o.seed,
                                     .rank = rank,
                                     .num_ranks = ranks});
  std::printf(
      "%lld training and %lld test samples; %zu parameter arrays; %s, lr %g, batch %d, %s\n",
      static_cast<long long>(iter.num_samples()),
      static_cast<long long>(split.test.data.shape()[0]), trainer.parameter_names().size(),
      o.optimizer.c_str(), o.lr, global_batch, weft::PrecisionName(o.precision));
  TrainResult result;
  ProfileScope profile(o.profile);  // the training epochs, not the loading and binding before them
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    Progress bar("epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs), batches);
    weft::Accuracy train_acc;
    result.train_loss = TrainEpoch(trainer, iter, train_acc, bar);
    result.test_accuracy = TestAccuracy(trainer, model, split.test, o);
    char summary[128];
    std::snprintf(summary, sizeof(summary), "loss %.4f  train acc %.1f%%  test acc %.1f%%",
                  result.train_loss, 100 * train_acc.Get(), 100 * result.test_accuracy);
    bar.Finish(summary);
  }
  profile.Stop();
  if (!o.save_prefix.empty()) SaveModel(model, trainer, o, split.scale);
  return result;
}

}  // namespace examples

#include "examples/common/train.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "examples/common/data.h"
#include "examples/common/flags.h"
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
Dataset Scaled(const Dataset& d) {
  std::vector<float> x = d.data.ToVector<float>();
  float max = 0;
  for (float v : x) max = std::max(max, std::abs(v));
  if (max > 1) {
    for (float& v : x) v /= max;
  }
  return {NDArray::FromVector(x, d.data.shape()), d.label};
}

Split LoadSplit(const TrainOptions& o) {
  const size_t comma = o.data.find(',');
  Dataset all = comma == std::string::npos ? weft::ReadCsv(o.data, -1)
                                           : weft::ReadMnist(o.data.substr(0, comma), o.data.substr(comma + 1), !o.images);
  all = Scaled(all);
  return {Subset(all, true, o.images), Subset(all, false, o.images)};
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
  flags.AddString("data", DefaultDigitsPath(argv[0]), "a CSV file (label in the last column) or 'images,labels' MNIST idx files");
  flags.AddString("save_prefix", defaults.save_prefix, "write <prefix>.safetensors and <prefix>.json ('' to skip)");
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
  if (o.epochs < 1 || o.batch_size < 1 || o.lr <= 0) {
    WEFT_THROW(program << ": expected epochs >= 1, batch_size >= 1 and lr > 0");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adam") {
    WEFT_THROW(program << ": flag --optimizer: expected 'sgd' or 'adam', found '" << o.optimizer << "'");
  }
  return o;
}

}  // namespace examples

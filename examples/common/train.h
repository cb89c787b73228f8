// The training driver the examples share: load and split a data set, bind a network with its
// loss as a weft::Trainer, train it with a progress bar per epoch, report loss and accuracy, and
// save the trained parameters (safetensors) and the inference symbol (JSON).
//
//   examples::TrainOptions options = examples::ParseTrainFlags("train_mlp", "...", argc, argv);
//   examples::Train(MyNet(), options);   // MyNet(): logits (N, classes) from variable "data"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "weft/weft.h"

namespace examples {

struct TrainOptions {
  int epochs = 20;
  int batch_size = 64;
  double lr = 0.1;
  // sgd (momentum 0.9), adam, or adamw (GPT-2's: betas 0.9 and 0.95, DecayMatricesOnly)
  std::string optimizer = "sgd";
  double wd = 1e-4;     // weight decay (sgd, adamw)
  bool cosine = false;  // the rate follows a cosine from lr to 0 over the whole run
  uint64_t seed = 1;
  weft::Device device;
  // float32, or mixed: float32 master weights and 16-bit compute (weft::Precision; bfloat16-mixed
  // on both devices, float16-mixed with its loss scaler on a GPU).
  weft::Precision precision = weft::Precision::kFloat32;
  // Digits CSV (label last), "images-idx3,labels-idx1" (MNIST; one in five held out), or a folder
  // of the four MNIST-format files (train-* and t10k-*, .gz or not: Fashion-MNIST as shipped).
  std::string data;
  std::string save_prefix;  // writes <prefix>.safetensors and <prefix>.json; empty: no save
  bool images = false;      // data as (N, 1, H, W) for convolutional nets
  std::string profile;      // a Chrome trace of the training epochs goes there; empty: none
  std::string dot;          // the bound training step as Graphviz DOT goes there; empty: none
  // Data-parallel over the ranks of an mpirun job (distributed/world.h): batch_size is the global
  // batch, split evenly; each rank on a GPU takes gpu:<local rank>; only rank 0 prints and saves.
  bool dist = false;
  // Fills the parameters Xavier does not suit (an RNN's flat vector) and returns whether it did;
  // null: Xavier (MXNet's naming convention) for every parameter.
  std::function<bool(const std::string& name, const weft::NDArray& array)> initialize;
  // Arguments held at zero whatever the batch size (an RNN's initial states): not trained; the
  // saved model lists them (metadata "zero_inputs"), and embed_infer makes them again.
  std::vector<std::string> zero_inputs;
};

// Parses the shared flags (with defaults for the named example); nullopt after --help. An example's
// own flags: `add` declares them beside the shared ones, `read` reads them after parsing.
std::optional<TrainOptions> ParseTrainFlags(const std::string& program,
                                            const std::string& description,
                                            const TrainOptions& defaults, int argc, char** argv,
                                            const std::function<void(Flags&)>& add = {},
                                            const std::function<void(const Flags&)>& read = {});

// The optimizer `o` names, with o.lr and o.wd, scaling gradients by rescale_grad.
std::unique_ptr<weft::Optimizer> MakeOptimizer(const TrainOptions& o, double rescale_grad);

// Writes the trainer's bound step as Graphviz DOT to `path` (--dot), saying where.
void WriteDot(const weft::Trainer& trainer, const std::string& path);

struct TrainResult {
  double train_loss = 0;
  double test_accuracy = 0;
};

// `logits` maps variable "data" to (N, classes). Prints one line per epoch.
TrainResult Train(const weft::Symbol& logits, const TrainOptions& options);

}  // namespace examples

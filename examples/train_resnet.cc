// train_resnet: a residual network on Fashion-MNIST (28x28 grey images of ten kinds of clothing),
// as Debian's dataset-fashion-mnist ships it: a 3x3 stem, three stages of basic blocks
// (conv-BatchNorm-relu, conv-BatchNorm, plus the shortcut: the identity, or a strided 1x1
// projection with its BatchNorm where the shape changes, then relu), global average pooling and a
// dense layer. SGD with momentum and a cosine rate; BatchNorm's running statistics are the
// trainer's auxiliary states, saved with the parameters, so embed_infer --model=resnet classifies
// with the trained network.
//
//   bazel run //examples:train_resnet -- [--epochs=15] [--width=32] [--blocks=2]
//   [--data=/usr/share/datasets/fashion-mnist]
#include <cstdio>

#include "examples/common/resnet.h"
#include "examples/common/train.h"

int main(int argc, char** argv) {
  try {
    examples::TrainOptions defaults;
    defaults.epochs = 15;
    defaults.batch_size = 128;
    defaults.lr = 0.1;
    defaults.wd = 1e-3;
    defaults.cosine = true;
    defaults.save_prefix = "resnet";
    defaults.images = true;
    defaults.data = "/usr/share/datasets/fashion-mnist";
    examples::ResNetConfig net{.stem = examples::Stem::kSmall, .width = 32, .blocks = {}};
    int blocks = 2;
    auto options = examples::ParseTrainFlags(
        "train_resnet",
        "Trains a residual network on Fashion-MNIST (a folder of its four idx files, .gz or not).",
        defaults, argc, argv,
        [&](examples::Flags& flags) {
          flags.AddInt("width", net.width, "channels of the first stage (doubled per stage)");
          flags.AddInt("blocks", blocks, "basic blocks in each of the three stages");
        },
        [&](const examples::Flags& flags) {
          net.width = flags.GetInt("width");
          blocks = flags.GetInt("blocks");
          net.blocks = {blocks, blocks, blocks};
          if (net.width < 1 || blocks < 1)
            WEFT_THROW("train_resnet: expected --width >= 1 and --blocks >= 1");
        });
    if (!options) return 0;
    const examples::TrainResult r = examples::Train(examples::ResNet(net), *options);
    std::printf("final test accuracy %.1f%%\n", 100 * r.test_accuracy);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// The digits data set for the examples: 1,797 8x8 images of handwritten digits (pixels 0..16)
// with their labels, from examples/data/digits.csv (64 pixel values, then the label, per row).
//
//   examples::Digits d = examples::LoadDigitsCsv(examples::DefaultDigitsPath(argv[0]));
//   const float* first = d.image(0);   // 64 floats
//   int label = d.labels[0];
#pragma once

#include <array>
#include <string>
#include <vector>

#include "weft/data_iter.h"

namespace examples {

struct Digits {
  static constexpr int kPixels = 64;
  std::vector<float> pixels;  // count() x 64, row-major
  std::vector<int> labels;    // count(), each in 0..9
  int count() const { return static_cast<int>(labels.size()); }
  const float* image(int i) const { return pixels.data() + static_cast<size_t>(i) * kPixels; }
};

// Reads the CSV. Throws weft::Error naming the file, the line and what was wrong.
Digits LoadDigitsCsv(const std::string& path);

// The shipped data file, found next to the binary's runfiles or in the source tree.
std::string DefaultDigitsPath(const char* argv0);

// The deterministic split: every fifth sample (i % 5 == 0) is held out for testing.
inline bool IsTrainSample(int i) { return i % 5 != 0; }
int NumTrainSamples(int count);

// One part ("train" or "t10k") of a folder of MNIST-format files, as Debian's
// dataset-fashion-mnist ships them (<part>-images-idx3-ubyte.gz and <part>-labels-idx1-ubyte.gz,
// compressed or not): weft::ReadMnist's data set. Throws weft::Error naming a missing file.
weft::Dataset ReadMnistFolder(const std::string& dir, const std::string& part, bool flat);

// Mean image of class k over the train (or test) samples.
std::array<float, Digits::kPixels> ClassMean(const Digits& digits, int k, bool train);

}  // namespace examples

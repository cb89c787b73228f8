#include "examples/common/data.h"

#include <sys/stat.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"

namespace examples {

namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Parses one row: 64 pixels in 0..16, then a label in 0..9.
void ParseRow(std::string_view line, const std::string& path, int line_no, Digits& out) {
  int fields = 0;
  size_t pos = 0;
  while (pos <= line.size()) {
    size_t comma = line.find(',', pos);
    std::string_view item =
        line.substr(pos, comma == std::string_view::npos ? line.npos : comma - pos);
    int value = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    const bool is_label = fields == Digits::kPixels;
    const int max = is_label ? 9 : 16;
    if (ec != std::errc() || end != item.data() + item.size() || value < 0 || value > max ||
        fields > Digits::kPixels) {
      WEFT_THROW(path << ":" << line_no << ": field " << fields + 1 << ": expected "
                      << (fields > Digits::kPixels ? "65 fields per row"
                          : is_label               ? "a label in 0..9"
                                                   : "a pixel in 0..16")
                      << ", found '" << item << "'");
    }
    if (is_label) {
      out.labels.push_back(value);
    } else {
      out.pixels.push_back(static_cast<float>(value));
    }
    ++fields;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (fields != Digits::kPixels + 1) {
    WEFT_THROW(path << ":" << line_no << ": expected 65 fields (64 pixels and a label), found "
                    << fields);
  }
}

}  // namespace

Digits LoadDigitsCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) WEFT_THROW("cannot open the digits data '" << path << "'");
  Digits digits;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    ParseRow(line, path, line_no, digits);
  }
  if (digits.count() == 0) WEFT_THROW("the digits data '" << path << "' has no rows");
  return digits;
}

std::string DefaultDigitsPath(const char* argv0) {
  const std::string rel = "examples/data/digits.csv";
  if (Exists(rel)) return rel;  // bazel run, or the source tree
  std::string runfiles = std::string(argv0) + ".runfiles/weft/" + rel;
  if (Exists(runfiles)) return runfiles;
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) return std::string(ws) + "/" + rel;
  return rel;
}

int NumTrainSamples(int count) {
  int n = 0;
  for (int i = 0; i < count; ++i) n += IsTrainSample(i);
  return n;
}

std::array<float, Digits::kPixels> ClassMean(const Digits& digits, int k, bool train) {
  std::array<float, Digits::kPixels> mean{};
  int n = 0;
  for (int i = 0; i < digits.count(); ++i) {
    if (digits.labels[i] != k || IsTrainSample(i) != train) continue;
    for (int p = 0; p < Digits::kPixels; ++p) mean[p] += digits.image(i)[p];
    ++n;
  }
  for (float& v : mean) v /= static_cast<float>(n > 0 ? n : 1);
  return mean;
}

namespace {

// `stem` in `dir`, compressed (stem.gz, as shipped) or not.
std::string MnistFile(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {".gz", ""}) {
    const std::string path = dir + "/" + stem + suffix;
    if (std::filesystem::is_regular_file(path)) return path;
  }
  WEFT_THROW("'" << dir << "': expected the file " << stem << ".gz (or " << stem
                 << ") in that folder, found neither");
}

}  // namespace

weft::Dataset ReadMnistFolder(const std::string& dir, const std::string& part, bool flat) {
  const std::string images = MnistFile(dir, part + "-images-idx3-ubyte");
  return weft::ReadMnist(images, MnistFile(dir, part + "-labels-idx1-ubyte"), flat);
}

}  // namespace examples

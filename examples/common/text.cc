#include "examples/common/text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace examples {

CharText::CharText(std::string text) : text_(std::move(text)) {
  bool seen[256] = {};
  for (unsigned char c : text_) seen[c] = true;
  for (int b = 0; b < 256; ++b) {
    id_of_[b] = seen[b] ? static_cast<int>(vocabulary_.size()) : -1;
    if (seen[b]) vocabulary_.push_back(static_cast<char>(b));
  }
}

std::vector<float> CharText::Ids(int64_t begin, int64_t end) const {
  std::vector<float> ids;
  ids.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i)
    ids.push_back(static_cast<float>(id_of_[static_cast<unsigned char>(text_[i])]));
  return ids;
}

std::vector<float> CharText::Encode(const std::string& s) const {
  std::vector<float> ids;
  for (unsigned char c : s)
    if (id_of_[c] >= 0) ids.push_back(static_cast<float>(id_of_[c]));
  return ids;
}

namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) WEFT_THROW("--data: cannot read '" << path.string() << "'");
  return text.str();
}

}  // namespace

std::string ReadTextFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(path, error)) return ReadFile(path);
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(path, error)) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  if (error) WEFT_THROW("--data: cannot list '" << path << "': " << error.message());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) text += ReadFile(f);
  if (text.empty()) WEFT_THROW("--data: found no text in '" << path << "'");
  return text;
}

Windows::Windows(std::vector<float> ids, int context, uint64_t seed)
    : ids_(std::move(ids)), context_(context), rng_(seed) {
  if (size() <= context) {
    WEFT_THROW("text: expected more than context = " << context << " characters, found " << size());
  }
}

void Windows::Copy(int64_t offset, int row, std::vector<float>* data,
                   std::vector<float>* label) const {
  const size_t at = static_cast<size_t>(row) * context_;
  std::copy_n(ids_.begin() + offset, context_, data->begin() + at);
  std::copy_n(ids_.begin() + offset + 1, context_, label->begin() + at);
}

void Windows::Fill(int batch, std::vector<float>* data, std::vector<float>* label) {
  data->resize(static_cast<size_t>(batch) * context_);
  label->resize(data->size());
  std::uniform_int_distribution<int64_t> offset(0, size() - context_ - 1);
  for (int r = 0; r < batch; ++r) Copy(offset(rng_), r, data, label);
}

void Windows::FillEven(int first, int batch, int count, std::vector<float>* data,
                       std::vector<float>* label) const {
  data->resize(static_cast<size_t>(batch) * context_);
  label->resize(data->size());
  const int64_t span = size() - context_ - 1;
  for (int r = 0; r < batch; ++r) Copy((first + r) % count * span / count, r, data, label);
}

int SampleNext(const float* logits, int vocab, double temperature, int top_k,
               std::mt19937_64& rng) {
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order[0];
  const int k = top_k <= 0 || top_k > vocab ? vocab : top_k;
  std::vector<double> weights(k);
  for (int i = 0; i < k; ++i)
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  return order[pick(rng)];
}

}  // namespace examples

// Text for character-level language models (train_gpt): a corpus read from a file or a folder of
// plain-text files, its vocabulary of distinct bytes, batches of random windows, and sampling the
// next character from logits with a temperature and top-k.
//
//   examples::CharText text = examples::ReadCharText("/usr/share/games/fortunes");
//   examples::Windows train(text.Ids(0, text.size() * 9 / 10), /*context=*/64, /*seed=*/1);
//   train.Fill(32, &data, &label);  // (32, 64) ids and the ids one position on
//   int next = examples::SampleNext(row, vocab, /*temperature=*/0.8, /*top_k=*/10, rng);
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace examples {

// Bytes and their ids: the distinct bytes of the text, in byte order.
class CharText {
 public:
  explicit CharText(std::string text);

  int64_t size() const { return static_cast<int64_t>(text_.size()); }
  int vocab() const { return static_cast<int>(vocabulary_.size()); }
  const std::string& vocabulary() const { return vocabulary_; }  // id -> byte
  // Ids of the bytes [begin, end) of the text, as floats (weft's Embedding reads float indices).
  std::vector<float> Ids(int64_t begin, int64_t end) const;
  // Ids of `s`'s bytes that the vocabulary has (the others are dropped).
  std::vector<float> Encode(const std::string& s) const;
  char Decode(int id) const { return vocabulary_.at(id); }

 private:
  std::string text_, vocabulary_;
  int id_of_[256];  // -1: not in the vocabulary
};

// The text of `path`: a file, or every regular file of a folder in name order (symbolic links,
// and the fortune package's .dat index files, left out), joined. Throws weft::Error naming the
// path when it cannot be read or holds no text.
std::string ReadTextFiles(const std::string& path);

// Random windows of context + 1 ids from a sequence: the first context are the input, the last
// context (one position on) the labels.
class Windows {
 public:
  // Throws weft::Error when the sequence is not longer than `context`.
  Windows(std::vector<float> ids, int context, uint64_t seed);
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  // `batch` windows at random offsets into data and label, each (batch, context) row-major.
  void Fill(int batch, std::vector<float>* data, std::vector<float>* label);
  // The same, at fixed offsets: window i of `count` starts at i * (size - context - 1) / count.
  void FillEven(int first, int batch, int count, std::vector<float>* data,
                std::vector<float>* label) const;

 private:
  void Copy(int64_t offset, int row, std::vector<float>* data, std::vector<float>* label) const;

  std::vector<float> ids_;
  int context_;
  std::mt19937_64 rng_;
};

// The next id drawn from softmax(logits / temperature) over the top_k largest logits (top_k <= 0
// or >= vocab: all of them); temperature 0: the largest logit's id.
int SampleNext(const float* logits, int vocab, double temperature, int top_k, std::mt19937_64& rng);

}  // namespace examples

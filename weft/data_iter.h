// Data iterators: batches of samples for training loops. An iterator owns a host copy of its data
// set and hands out each batch as new CPU arrays (a batch stays valid after Next), in order or in
// a shuffled order that depends only on the seed and the epoch. ArrayIter batches arrays already
// in memory; CsvIter and MnistIter read a file once, then batch it the same way.
//
//   MnistIter train({.images = "train-images-idx3-ubyte", .labels = "train-labels-idx1-ubyte",
//                    .batch = {.batch_size = 64, .shuffle = true, .seed = 1}});
//   for (int epoch = 0; epoch < 10; ++epoch, train.Reset()) {
//     while (train.Next()) Step(train.Current().data, train.Current().label);   // (64, 1, 28, 28),
//     (64,)
//   }
//
// Iterators are not thread-safe: one thread drives each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "storage/ndarray.h"

namespace weft {

struct DataBatch {
  NDArray data;   // (batch_size, ...): the samples
  NDArray label;  // (batch_size, ...): their labels; null when the iterator has none
  int pad = 0;    // how many trailing samples are repeats from the start, filling the last batch
};

// A data set whose first axis counts samples: data (N, ...) and label (N, ...) or a null label.
struct Dataset {
  NDArray data;
  NDArray label;
};

// The interface of every iterator (users may write their own). An epoch is a sequence of Next()
// calls that return true, then false; Reset() starts the next epoch.
class DataIter {
 public:
  virtual ~DataIter() = default;
  virtual void Reset() = 0;
  // Makes the next batch current; false (and no current batch) at the end of the epoch.
  virtual bool Next() = 0;
  // The batch the last Next() made; throws weft::Error when it returned false or was not called.
  virtual const DataBatch& Current() const = 0;
};

// What to do with the samples left over when N is not a multiple of the batch size.
enum class LastBatch {
  kPad,      // a last full batch, filled up with samples from the start of the epoch's order
  kDiscard,  // no last batch: the left-over samples are skipped this epoch
};

struct BatchOptions {
  int64_t batch_size = 32;
  bool shuffle = false;  // a new order every epoch, from (seed, epoch) alone
  uint64_t seed = 0;
  LastBatch last_batch = LastBatch::kPad;
  // Data-parallel shards: each epoch's order (the same on every rank, from the seed) is cut into
  // global batches of batch_size * num_ranks samples, and rank `rank` gets the rank-th slice of
  // batch_size samples of each, so the ranks together see what one process would with the
  // global batch. LastBatch applies to the global batch. Defaults: the whole data set.
  int rank = 0;
  int num_ranks = 1;
};

// Batches of an in-memory data set. The arrays are copied to the host once, at construction
// (waiting for their pending writes); changing them afterwards does not change the batches.
class ArrayIter : public DataIter {
 public:
  // Throws weft::Error for a null or scalar data array, no samples, a label whose first axis is
  // not N, or a batch size < 1.
  ArrayIter(const Dataset& dataset, const BatchOptions& options);

  void Reset() override;
  bool Next() override;
  const DataBatch& Current() const override;

  int64_t num_samples() const { return num_samples_; }
  // The sample order of the current epoch (a permutation of 0..N-1).
  const std::vector<int64_t>& order() const { return order_; }

 private:
  // One array's bytes on the host, row by row.
  struct HostArray {
    std::vector<char> bytes;
    Shape shape;
    DType dtype = DType::kFloat32;
    size_t row_bytes = 0;
  };
  static HostArray ToHost(const NDArray& array);
  void MakeOrder();
  NDArray Gather(const HostArray& source, int64_t first) const;

  BatchOptions options_;
  int64_t num_samples_;
  HostArray data_, label_;
  bool has_label_;
  uint64_t epoch_ = 0;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;  // position in order_ of the next batch's first sample
  bool has_current_ = false;
  DataBatch current_;
};

// Reads a numeric CSV file: one sample a line, comma-separated, blank lines skipped, every row with
// the same number of columns. The label column (negative: from the end, -1 the last) becomes
// label (N,) float32, the others data (N, F) float32. Parsing is strict: every field must be a
// finite number (surrounding spaces allowed); errors name the file, the line and the column (both
// counted from 1, while label_column counts from 0).
Dataset ReadCsv(const std::string& path, int label_column = -1);

struct CsvOptions {
  std::string path;
  int label_column = -1;
  BatchOptions batch;
};

class CsvIter : public ArrayIter {
 public:
  explicit CsvIter(const CsvOptions& options)
      : ArrayIter(ReadCsv(options.path, options.label_column), options.batch) {}
};

// Reads MNIST's idx files: images in idx3-ubyte (magic 0x00000803, then the count, rows and
// columns as big-endian 32-bit numbers, then one byte a pixel) and labels in idx1-ubyte (magic
// 0x00000801, the count, one byte a label). Pixels are scaled to [0, 1]. Data is (N, 1, rows,
// cols) float32, or (N, rows * cols) when `flat`; label (N,) float32. Either file may be
// gzip-compressed as shipped (train-images-idx3-ubyte.gz: Debian's dataset-fashion-mnist puts the
// four in /usr/share/datasets/fashion-mnist). Errors name the file: bad magic, a file shorter or
// longer than its header says, image and label counts that differ, a truncated or corrupt gzip
// stream.
Dataset ReadMnist(const std::string& images, const std::string& labels, bool flat = false);

struct MnistOptions {
  std::string images;
  std::string labels;
  bool flat = false;
  BatchOptions batch;
};

class MnistIter : public ArrayIter {
 public:
  explicit MnistIter(const MnistOptions& options)
      : ArrayIter(ReadMnist(options.images, options.labels, options.flat), options.batch) {}
};

}  // namespace weft

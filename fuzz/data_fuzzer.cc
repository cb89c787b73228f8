// Fuzz targets: the CSV and MNIST readers, and an epoch of batches over what they accept.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "fuzz/targets.h"
#include "weft/data_iter.h"

namespace weft::fuzz {
namespace {

// One epoch of `iter` over `num_samples` samples: every batch is (batch_size, ...), and padding
// makes ceil(N / batch_size) of them.
void CheckEpoch(DataIter& iter, int64_t num_samples, int64_t batch_size) {
  int64_t batches = 0;
  while (iter.Next()) {
    ++batches;
    if (iter.Current().data.shape()[0] != batch_size) Fail("a batch of the wrong size");
  }
  if (batches != (num_samples + batch_size - 1) / batch_size)
    Fail("an epoch with the wrong number of batches");
}

}  // namespace

int Csv(const uint8_t* data, size_t size) {
  static const TempFile file("data.csv");
  if (size == 0) return 0;
  const int label_column = static_cast<int>(data[0] & 7) - 4;  // -4 .. 3
  const int64_t batch_size = 1 + (data[0] >> 3);               // 1 .. 32
  file.Write(data + 1, size - 1);
  Dataset rows;
  try {
    rows = ReadCsv(file.path(), label_column);
  } catch (const Error&) {
    return 0;
  }
  const int64_t n = rows.data.shape()[0];
  if (n == 0) return 0;  // ArrayIter refuses an empty data set (documented)
  if (rows.data.shape().ndim() != 2 || rows.label.shape() != Shape{n})
    Fail("CSV data of the wrong shape");
  CsvIter iter(
      {.path = file.path(), .label_column = label_column, .batch = {.batch_size = batch_size}});
  CheckEpoch(iter, n, batch_size);
  return 0;
}

int Mnist(const uint8_t* data, size_t size) {
  static const TempFile images("images-idx3-ubyte");
  static const TempFile labels("labels-idx1-ubyte");
  if (size < 2) return 0;
  const size_t images_size = std::min<size_t>(size - 2, data[0] | (data[1] << 8));
  images.Write(data + 2, images_size);
  labels.Write(data + 2 + images_size, size - 2 - images_size);
  const bool flat = images_size % 2 == 1;
  Dataset set;
  try {
    set = ReadMnist(images.path(), labels.path(), flat);
  } catch (const Error&) {
    return 0;
  }
  const int64_t n = set.data.shape()[0];
  if (n == 0) return 0;
  if (set.data.shape().ndim() != (flat ? 2 : 4) || set.label.shape() != Shape{n})
    Fail("MNIST data of the wrong shape");
  for (float v : set.data.ToVector<float>()) {
    if (!(v >= 0 && v <= 1)) Fail("an MNIST pixel outside [0, 1]");
  }
  MnistIter iter(
      {.images = images.path(), .labels = labels.path(), .flat = flat, .batch = {.batch_size = 3}});
  CheckEpoch(iter, n, 3);
  return 0;
}

}  // namespace weft::fuzz

// Data iterators: batching in order, padding or discarding the last batch, shuffles that depend
// only on (seed, epoch) and keep samples and labels together; CSV and MNIST idx files read
// exactly, and each kind of bad file rejected with an error that names the file and the place.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "examples/common/data.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ExpectErrorContains;
using testing::TempPath;
using testing::WriteTempFile;

// Samples 0..n-1: sample i is the row [10 i, 10 i + 1] with label i.
Dataset Numbered(int64_t n) {
  std::vector<float> data;
  for (int64_t i = 0; i < n; ++i) data.insert(data.end(), {10.0f * i, 10.0f * i + 1});
  return {NDArray::FromVector(data, Shape{n, 2}), NDArray::Arange(n)};
}

struct Epoch {
  std::vector<std::vector<float>> labels;  // per batch
  std::vector<int> pads;
};

// Runs one epoch through the interface, checking every batch's rows against its labels.
Epoch RunEpoch(DataIter& iter) {
  Epoch epoch;
  while (iter.Next()) {
    const DataBatch& batch = iter.Current();
    std::vector<float> labels = batch.label.ToVector<float>(), data = batch.data.ToVector<float>();
    for (size_t k = 0; k < labels.size(); ++k) {
      EXPECT_EQ(data[2 * k], 10 * labels[k]) << "sample and label were separated";
    }
    epoch.labels.push_back(labels);
    epoch.pads.push_back(batch.pad);
  }
  return epoch;
}

std::vector<float> Flatten(const Epoch& epoch) {
  std::vector<float> all;
  for (const auto& batch : epoch.labels) all.insert(all.end(), batch.begin(), batch.end());
  return all;
}

TEST(ArrayIter, PadsTheLastBatchWithSamplesFromTheStart) {
  ArrayIter iter(Numbered(10), {.batch_size = 4});
  Epoch epoch = RunEpoch(iter);
  EXPECT_EQ(epoch.labels,
            (std::vector<std::vector<float>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 0, 1}}));
  EXPECT_EQ(epoch.pads, (std::vector<int>{0, 0, 2}));
  EXPECT_FALSE(iter.Next());
  EXPECT_THROW(iter.Current(), Error);
}

TEST(ArrayIter, DiscardsTheLastPartialBatch) {
  ArrayIter iter(Numbered(10), {.batch_size = 4, .last_batch = LastBatch::kDiscard});
  EXPECT_EQ(RunEpoch(iter).labels, (std::vector<std::vector<float>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  ArrayIter exact(Numbered(8), {.batch_size = 4, .last_batch = LastBatch::kDiscard});
  EXPECT_EQ(RunEpoch(exact).labels.size(), 2u);
}

TEST(ArrayIter, BatchLargerThanTheDataSet) {
  ArrayIter pad(Numbered(3), {.batch_size = 7});
  Epoch epoch = RunEpoch(pad);
  EXPECT_EQ(epoch.labels, (std::vector<std::vector<float>>{{0, 1, 2, 0, 1, 2, 0}}));
  EXPECT_EQ(epoch.pads, (std::vector<int>{4}));
  ArrayIter discard(Numbered(3), {.batch_size = 7, .last_batch = LastBatch::kDiscard});
  EXPECT_TRUE(RunEpoch(discard).labels.empty());
}

TEST(ArrayIter, BatchesKeepShapesAndDTypesOfTheirSource) {
  Dataset d{NDArray::FromVector(std::vector<int32_t>(5 * 2 * 3, 7), Shape{5, 2, 3}),
            NDArray::FromVector(std::vector<double>(5 * 2, 1.5), Shape{5, 2})};
  ArrayIter iter(d, {.batch_size = 2});
  ASSERT_TRUE(iter.Next());
  EXPECT_EQ(iter.Current().data.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(iter.Current().data.dtype(), DType::kInt32);
  EXPECT_EQ(iter.Current().label.shape(), (Shape{2, 2}));
  EXPECT_EQ(iter.Current().label.ToVector<double>(), (std::vector<double>(4, 1.5)));
}

TEST(ArrayIter, WithoutLabelsBatchesHaveANullLabel) {
  ArrayIter iter({NDArray::Arange(6).Reshape(Shape{3, 2}), NDArray()}, {.batch_size = 2});
  ASSERT_TRUE(iter.Next());
  EXPECT_TRUE(iter.Current().label.is_none());
  EXPECT_EQ(iter.Current().data.ToVector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(ArrayIter, ABatchStaysValidAfterNextAndTheSourceIsCopied) {
  Dataset d = Numbered(4);
  ArrayIter iter(d, {.batch_size = 2});
  d.label.Fill(-1);  // after construction: not seen by the iterator
  ASSERT_TRUE(iter.Next());
  DataBatch first = iter.Current();
  ASSERT_TRUE(iter.Next());
  EXPECT_EQ(first.label.ToVector<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(iter.Current().label.ToVector<float>(), (std::vector<float>{2, 3}));
}

TEST(ArrayIter, ResetStartsTheNextEpoch) {
  ArrayIter iter(Numbered(6), {.batch_size = 4});
  ASSERT_TRUE(iter.Next());
  iter.Reset();
  EXPECT_THROW(iter.Current(), Error);
  EXPECT_EQ(Flatten(RunEpoch(iter)), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1}));
}

TEST(ArrayIter, ShuffleIsAPermutationThatDependsOnlyOnSeedAndEpoch) {
  const BatchOptions options{
      .batch_size = 5, .shuffle = true, .seed = 42, .last_batch = LastBatch::kDiscard};
  ArrayIter a(Numbered(20), options), b(Numbered(20), options);
  ArrayIter other_seed(Numbered(20), {.batch_size = 5, .shuffle = true, .seed = 43});
  const std::vector<float> a0 = Flatten(RunEpoch(a)), b0 = Flatten(RunEpoch(b));
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, Flatten(RunEpoch(other_seed)));
  std::vector<float> sorted = a0, identity(20);
  std::sort(sorted.begin(), sorted.end());
  std::iota(identity.begin(), identity.end(), 0.0f);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a0, identity);
  a.Reset();
  b.Reset();
  const std::vector<float> a1 = Flatten(RunEpoch(a));
  EXPECT_NE(a1, a0) << "every epoch gets a new order";
  EXPECT_EQ(a1, Flatten(RunEpoch(b)));
  // Not drawn from the global stream: reseeding it changes nothing.
  SeedRandom(1);
  ArrayIter c(Numbered(20), options);
  EXPECT_EQ(Flatten(RunEpoch(c)), a0);
}

TEST(ArrayIter, ShuffledPaddingRepeatsTheEpochsFirstSamples) {
  ArrayIter iter(Numbered(10), {.batch_size = 4, .shuffle = true, .seed = 5});
  const std::vector<float> all = Flatten(RunEpoch(iter));
  ASSERT_EQ(all.size(), 12u);
  EXPECT_EQ(all[10], all[0]);
  EXPECT_EQ(all[11], all[1]);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(all[i], static_cast<float>(iter.order()[i]));
}

TEST(ArrayIter, BadArgumentsSayWhatWasExpected) {
  ExpectErrorContains([] { ArrayIter({NDArray(), NDArray()}, {}); }, {"data array is null"});
  ExpectErrorContains(
      [] {
        ArrayIter({NDArray(Shape{}), NDArray()}, {});
      },
      {"expected data (N, ...)"});
  ExpectErrorContains(
      [] {
        ArrayIter({NDArray(Shape{0, 3}), NDArray()}, {});
      },
      {"at least one sample"});
  ExpectErrorContains([] { ArrayIter(Numbered(4), {.batch_size = 0}); },
                      {"batch size of at least 1"});
  ExpectErrorContains(
      [] {
        ArrayIter({NDArray(Shape{4, 2}), NDArray(Shape{3})}, {});
      },
      {"expected a label of shape (4, ...)", "(3,)"});
}

// ---- CSV ----------------------------------------------------------------------------------------

TEST(CsvIter, ReadsFeaturesAndTheLabelColumn) {
  const std::string path = WriteTempFile("small.csv", "1,2,3\r\n\n 4.5 , -6e1,7\n8,9,10\n\n");
  Dataset last = ReadCsv(path);
  EXPECT_EQ(last.data.shape(), (Shape{3, 2}));
  EXPECT_EQ(last.data.ToVector<float>(), (std::vector<float>{1, 2, 4.5f, -60, 8, 9}));
  EXPECT_EQ(last.label.ToVector<float>(), (std::vector<float>{3, 7, 10}));
  Dataset first = ReadCsv(path, 0);
  EXPECT_EQ(first.data.ToVector<float>(), (std::vector<float>{2, 3, -60, 7, 9, 10}));
  EXPECT_EQ(first.label.ToVector<float>(), (std::vector<float>{1, 4.5f, 8}));
  EXPECT_EQ(ReadCsv(path, -2).label.ToVector<float>(), (std::vector<float>{2, -60, 9}));
  CsvIter iter({.path = path, .label_column = 1, .batch = {.batch_size = 2}});
  ASSERT_TRUE(iter.Next());
  EXPECT_EQ(iter.Current().data.ToVector<float>(), (std::vector<float>{1, 3, 4.5f, 7}));
  EXPECT_EQ(iter.Current().label.ToVector<float>(), (std::vector<float>{2, -60}));
}

// The examples' digits file, read by the examples' own loader as the oracle.
TEST(CsvIter, ReadsTheDigitsDataSetAsTheExamplesDo) {
  const std::string path = "examples/data/digits.csv";
  const examples::Digits digits = examples::LoadDigitsCsv(path);
  Dataset d = ReadCsv(path, 64);
  ASSERT_EQ(d.data.shape(), (Shape{digits.count(), 64}));
  EXPECT_EQ(d.data.ToVector<float>(), digits.pixels);
  const std::vector<float> labels = d.label.ToVector<float>();
  for (int i = 0; i < digits.count(); ++i) ASSERT_EQ(labels[i], digits.labels[i]) << "row " << i;
  CsvIter iter({.path = path, .batch = {.batch_size = 100, .last_batch = LastBatch::kDiscard}});
  int batches = 0;
  while (iter.Next()) ++batches;
  EXPECT_EQ(batches, digits.count() / 100);
}

TEST(CsvIter, ParsingIsStrictAndNamesFileLineAndColumn) {
  struct Case {
    std::string text;
    int label_column;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"1,2,3\n4,abc,6\n", -1, {":2: column 2: expected a finite number, found 'abc'"}},
      {"1,,3\n", -1, {":1: column 2: expected a finite number, found ''"}},
      {"1,2,\n", -1, {":1: column 3: expected a finite number"}},
      {"1,2x,3\n", -1, {":1: column 2", "'2x'"}},
      {"1,nan,3\n", -1, {":1: column 2", "'nan'"}},
      {"1,1e99,3\n", -1, {":1: column 2", "'1e99'"}},
      {"1,2,3\n\n4,5\n", -1, {":3: expected 3 columns (as on line 1), found 2"}},
      {"1,2,3\n4,5,6,7\n", -1, {":2: expected 3 columns", "found 4"}},
      {"\n\n", -1, {"has no rows"}},
      {"1\n2\n", -1, {"expected at least 2 columns"}},
      {"1,2,3\n", 3, {"expected a label column in [-3, 3) for 3 columns, found 3"}},
      {"1,2,3\n", -4, {"found -4"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = WriteTempFile("bad.csv", c.text);
    std::vector<std::string> expected = c.expected;
    expected.push_back(path);
    ExpectErrorContains([&] { ReadCsv(path, c.label_column); }, expected);
  }
  ExpectErrorContains([] { ReadCsv(TempPath("missing.csv")); }, {"cannot open", "missing.csv"});
}

// ---- MNIST --------------------------------------------------------------------------------------

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string IdxImages(uint32_t n, uint32_t rows, uint32_t cols,
                      const std::vector<uint8_t>& pixels) {
  return BigEndian(0x803) + BigEndian(n) + BigEndian(rows) + BigEndian(cols) +
         std::string(pixels.begin(), pixels.end());
}

std::string IdxLabels(const std::vector<uint8_t>& labels) {
  return BigEndian(0x801) + BigEndian(static_cast<uint32_t>(labels.size())) +
         std::string(labels.begin(), labels.end());
}

// Five 2x3 images; image i has pixels 51 i + p (p = 0..5), label 9 - i.
std::vector<uint8_t> FivePixels() {
  std::vector<uint8_t> pixels(5 * 6);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(51 * (i / 6) + i % 6);
  pixels.back() = 255;
  return pixels;
}

TEST(MnistIter, ReadsIdxImagesAndLabelsScaledToOne) {
  const std::string images =
      WriteTempFile("five-images-idx3-ubyte", IdxImages(5, 2, 3, FivePixels()));
  const std::string labels = WriteTempFile("five-labels-idx1-ubyte", IdxLabels({9, 8, 7, 6, 5}));
  Dataset d = ReadMnist(images, labels);
  EXPECT_EQ(d.data.shape(), (Shape{5, 1, 2, 3}));
  std::vector<float> want;
  for (uint8_t p : FivePixels()) want.push_back(static_cast<float>(p) / 255.0f);
  EXPECT_EQ(d.data.ToVector<float>(), want);
  EXPECT_EQ(d.data.ToVector<float>().back(), 1.0f);
  EXPECT_EQ(d.label.ToVector<float>(), (std::vector<float>{9, 8, 7, 6, 5}));
  EXPECT_EQ(ReadMnist(images, labels, /*flat=*/true).data.shape(), (Shape{5, 6}));

  MnistIter iter({.images = images, .labels = labels, .flat = true, .batch = {.batch_size = 2}});
  Epoch epoch;
  while (iter.Next()) {
    EXPECT_EQ(iter.Current().data.shape(), (Shape{2, 6}));
    epoch.labels.push_back(iter.Current().label.ToVector<float>());
    epoch.pads.push_back(iter.Current().pad);
  }
  EXPECT_EQ(epoch.labels, (std::vector<std::vector<float>>{{9, 8}, {7, 6}, {5, 9}}));
  EXPECT_EQ(epoch.pads, (std::vector<int>{0, 0, 1}));
}

// `bytes` as a gzip file of one member (zlib's deflate with a gzip wrapper), as gzip writes it.
std::string GzipOf(const std::string& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(MnistIter, ReadsGzipFilesAsShipped) {
  const std::string raw_images = IdxImages(5, 2, 3, FivePixels()),
                    raw_labels = IdxLabels({9, 8, 7, 6, 5});
  const std::string images = WriteTempFile("images-idx3-ubyte.gz", GzipOf(raw_images));
  const std::string labels = WriteTempFile("labels-idx1-ubyte.gz", GzipOf(raw_labels));
  const Dataset plain = ReadMnist(WriteTempFile("images-idx3-ubyte", raw_images),
                                  WriteTempFile("labels-idx1-ubyte", raw_labels));
  const Dataset gz = ReadMnist(images, labels);
  EXPECT_EQ(gz.data.shape(), (Shape{5, 1, 2, 3}));
  EXPECT_EQ(gz.data.ToVector<float>(), plain.data.ToVector<float>());
  EXPECT_EQ(gz.label.ToVector<float>(), plain.label.ToVector<float>());
  // Two members, as `cat a.gz b.gz` makes: gunzip writes both, one after the other.
  const std::string split = WriteTempFile(
      "split-idx3-ubyte.gz", GzipOf(raw_images.substr(0, 20)) + GzipOf(raw_images.substr(20)));
  EXPECT_EQ(ReadMnist(split, labels).data.ToVector<float>(), plain.data.ToVector<float>());
}

TEST(MnistIter, BadGzipFilesNameTheFileAndTheProblem) {
  const std::string labels = WriteTempFile("labels.gz", GzipOf(IdxLabels({1, 2, 3, 4, 5})));
  const std::string gz = GzipOf(IdxImages(5, 2, 3, FivePixels()));
  std::string corrupt = gz;
  corrupt[corrupt.size() - 6] ^= 0x55;  // the CRC-32 of the trailer
  struct Case {
    std::string what, bytes;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"truncated", gz.substr(0, gz.size() / 2), {"is truncated"}},
      {"just the magic", gz.substr(0, 2), {"is truncated"}},
      {"bad checksum", corrupt, {"is corrupt", "incorrect data check"}},
      {"trailing garbage", gz + "junk", {"expected another gzip member", "found 4 other bytes"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string images = WriteTempFile("bad-images.gz", c.bytes);
    std::vector<std::string> expected = c.expected;
    expected.push_back("'" + images + "'");
    ExpectErrorContains([&] { ReadMnist(images, labels); }, expected);
  }
}

TEST(MnistIter, BadFilesNameTheFileAndTheProblem) {
  const std::string good_images = IdxImages(5, 2, 3, FivePixels()),
                    good_labels = IdxLabels({1, 2, 3, 4, 5});
  struct Case {
    std::string what, images, labels, bad_file;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"labels given as images",
       good_labels,
       good_labels,
       "images",
       {"expected the idx3-ubyte magic number 0x00000803, found 0x00000801"}},
      {"images given as labels",
       good_images,
       good_images,
       "labels",
       {"expected the idx1-ubyte magic number 0x00000801, found 0x00000803"}},
      {"truncated images",
       good_images.substr(0, good_images.size() - 1),
       good_labels,
       "images",
       {"promises 30 bytes of idx3-ubyte data, found 29 (truncated)"}},
      {"trailing bytes", good_images + "x", good_labels, "images", {"found 31 (trailing bytes)"}},
      {"truncated header",
       good_images.substr(0, 10),
       good_labels,
       "images",
       {"expected an idx3-ubyte header of 16 bytes, found a 10-byte file"}},
      {"truncated labels",
       good_images,
       good_labels.substr(0, 11),
       "labels",
       {"promises 5 bytes", "found 3"}},
      {"empty labels file", good_images, "", "labels", {"header of 8 bytes, found a 0-byte file"}},
      {"count mismatch",
       good_images,
       IdxLabels({1, 2, 3, 4}),
       "images",
       {"has 5 images but", "has 4 labels"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string images = WriteTempFile("bad-images", c.images),
                      labels = WriteTempFile("bad-labels", c.labels);
    std::vector<std::string> expected = c.expected;
    expected.push_back("'" + (c.bad_file == "images" ? images : labels) + "'");
    ExpectErrorContains([&] { ReadMnist(images, labels); }, expected);
  }
  ExpectErrorContains([] { ReadMnist(TempPath("no-images"), TempPath("no-labels")); },
                      {"cannot open", "no-images"});
}

}  // namespace
}  // namespace weft

#include "weft/data_iter.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "storage/random.h"
#include "weft/gzip.h"

namespace weft {

// ---- ArrayIter ----------------------------------------------------------------------------------

ArrayIter::ArrayIter(const Dataset& dataset, const BatchOptions& options) : options_(options) {
  WEFT_CHECK(!dataset.data.is_none()) << "ArrayIter: the data array is null";
  WEFT_CHECK_GE(dataset.data.shape().ndim(), 1)
      << "ArrayIter: expected data (N, ...), found a scalar";
  num_samples_ = dataset.data.shape()[0];
  WEFT_CHECK_GT(num_samples_, 0) << "ArrayIter: expected at least one sample, found data "
                                 << dataset.data.shape();
  WEFT_CHECK_GE(options.batch_size, 1) << "ArrayIter: expected a batch size of at least 1";
  WEFT_CHECK(options.num_ranks >= 1 && options.rank >= 0 && options.rank < options.num_ranks)
      << "ArrayIter: expected 0 <= rank < num_ranks, found rank " << options.rank << " of "
      << options.num_ranks;
  has_label_ = !dataset.label.is_none();
  if (has_label_ &&
      (dataset.label.shape().ndim() == 0 || dataset.label.shape()[0] != num_samples_)) {
    WEFT_THROW("ArrayIter: expected a label of shape (" << num_samples_ << ", ...) to match data "
                                                        << dataset.data.shape() << ", found "
                                                        << dataset.label.shape());
  }
  data_ = ToHost(dataset.data);
  if (has_label_) label_ = ToHost(dataset.label);
  MakeOrder();
}

ArrayIter::HostArray ArrayIter::ToHost(const NDArray& array) {
  const NDArray host = array.device().is_cpu() ? array : array.Copy(Device::Cpu());
  HostArray out{std::vector<char>(host.bytes()), host.shape(), host.dtype(),
                host.bytes() / host.shape()[0]};
  host.SyncCopyToHost(out.bytes.data(), out.bytes.size());
  return out;
}

// The identity in order, or a Fisher-Yates shuffle drawn from a Philox stream keyed by the seed
// and started at a counter set by the epoch: the same (seed, epoch) gives the same order on every
// machine, independent of weft's global random stream.
void ArrayIter::MakeOrder() {
  order_.resize(static_cast<size_t>(num_samples_));
  std::iota(order_.begin(), order_.end(), 0);
  if (!options_.shuffle) return;
  PhiloxStream stream(RandomKey{options_.seed, epoch_ << 32});
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    const auto j =
        std::min(i, static_cast<int64_t>(stream.UniformDouble() * static_cast<double>(i + 1)));
    std::swap(order_[i], order_[j]);
  }
}

void ArrayIter::Reset() {
  ++epoch_;
  MakeOrder();
  cursor_ = 0;
  has_current_ = false;
}

bool ArrayIter::Next() {
  const int64_t remaining = num_samples_ - cursor_;
  const int64_t global = options_.batch_size * options_.num_ranks;
  has_current_ = remaining > 0 && (remaining >= global || options_.last_batch == LastBatch::kPad);
  if (!has_current_) {
    cursor_ = num_samples_;
    current_ = DataBatch{};
    return false;
  }
  const int64_t first = cursor_ + options_.rank * options_.batch_size;  // this rank's slice
  current_.data = Gather(data_, first);
  current_.label = has_label_ ? Gather(label_, first) : NDArray();
  current_.pad = static_cast<int>(
      std::clamp<int64_t>(first + options_.batch_size - num_samples_, 0, options_.batch_size));
  cursor_ += std::min(global, remaining);
  return true;
}

const DataBatch& ArrayIter::Current() const {
  WEFT_CHECK(has_current_)
      << "DataIter::Current: no current batch: call Next() first, and use Current() only "
         "while Next() returns true";
  return current_;
}

// The batch of the samples at positions [first, first + batch_size) of the order, wrapping
// around to the start of the order past its end (padding).
NDArray ArrayIter::Gather(const HostArray& source, int64_t first) const {
  Shape shape = source.shape;
  shape[0] = options_.batch_size;
  std::vector<char> bytes(static_cast<size_t>(options_.batch_size) * source.row_bytes);
  for (int64_t k = 0; k < options_.batch_size; ++k) {
    const int64_t row = order_[static_cast<size_t>((first + k) % num_samples_)];
    std::memcpy(bytes.data() + k * source.row_bytes, source.bytes.data() + row * source.row_bytes,
                source.row_bytes);
  }
  NDArray batch(shape, Device::Cpu(), source.dtype);
  batch.SyncCopyFromHost(bytes.data(), bytes.size());
  return batch;
}

// ---- CSV ----------------------------------------------------------------------------------------

namespace {

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

float ParseCsvField(std::string_view raw, const std::string& path, int line, int column) {
  const std::string_view field = Trim(raw);
  float value = 0;
  auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || end != field.data() + field.size() ||
      !std::isfinite(value)) {
    WEFT_THROW(path << ":" << line << ": column " << column << ": expected a finite number, found '"
                    << raw << "'");
  }
  return value;
}

// Appends the row's fields to `values`; returns how many there were.
int ParseCsvRow(std::string_view text, const std::string& path, int line,
                std::vector<float>& values) {
  int column = 0;
  for (size_t pos = 0;; ++column) {
    const size_t comma = text.find(',', pos);
    values.push_back(ParseCsvField(text.substr(pos, comma - pos), path, line, column + 1));
    if (comma == std::string_view::npos) return column + 1;
    pos = comma + 1;
  }
}

// Splits the rows (`columns` values each) into data (N, columns - 1) and label (N,).
Dataset SplitLabel(const std::vector<float>& values, int columns, int label_column) {
  const int64_t rows = static_cast<int64_t>(values.size()) / columns;
  std::vector<float> data, label;
  data.reserve(values.size() - static_cast<size_t>(rows));
  label.reserve(static_cast<size_t>(rows));
  for (size_t i = 0; i < values.size(); ++i) {
    (static_cast<int>(i % columns) == label_column ? label : data).push_back(values[i]);
  }
  return {NDArray::FromVector(data, Shape{rows, columns - 1}),
          NDArray::FromVector(label, Shape{rows})};
}

}  // namespace

Dataset ReadCsv(const std::string& path, int label_column) {
  std::ifstream in(path);
  if (!in) WEFT_THROW("ReadCsv: cannot open '" << path << "': " << std::strerror(errno));
  std::vector<float> values;
  int columns = 0, first_line = 0;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (Trim(text).empty()) continue;
    const int found = ParseCsvRow(text, path, line, values);
    if (columns == 0) {
      columns = found;
      first_line = line;
    } else if (found != columns) {
      WEFT_THROW(path << ":" << line << ": expected " << columns << " columns (as on line "
                      << first_line << "), found " << found);
    }
  }
  if (columns == 0) WEFT_THROW("ReadCsv: '" << path << "' has no rows");
  if (columns < 2)
    WEFT_THROW("ReadCsv: '" << path
                            << "': expected at least 2 columns (features and a label), found 1");
  const int resolved = label_column < 0 ? columns + label_column : label_column;
  if (resolved < 0 || resolved >= columns) {
    WEFT_THROW("ReadCsv: '" << path << "': expected a label column in [" << -columns << ", "
                            << columns << ") for " << columns << " columns, found "
                            << label_column);
  }
  return SplitLabel(values, columns, resolved);
}

// ---- MNIST --------------------------------------------------------------------------------------

namespace {

// The file's bytes, decompressed when it is gzip (as MNIST and Fashion-MNIST are shipped).
std::vector<unsigned char> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) WEFT_THROW("ReadMnist: cannot open '" << path << "': " << std::strerror(errno));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  return IsGzip(bytes) ? Gunzip(bytes, path) : bytes;
}

uint32_t BigEndian32(const std::vector<unsigned char>& bytes, size_t pos) {
  return (uint32_t{bytes[pos]} << 24) | (uint32_t{bytes[pos + 1]} << 16) |
         (uint32_t{bytes[pos + 2]} << 8) | uint32_t{bytes[pos + 3]};
}

// Checks an idx file of unsigned bytes (the magic's low byte is its number of axes) and returns
// its extents. The file must hold exactly the header and the product of the extents in bytes.
std::vector<uint64_t> ParseIdx(const std::string& path, const std::vector<unsigned char>& bytes,
                               uint32_t magic, const char* format) {
  const size_t ndim = magic & 0xff, header = 4 * (1 + ndim);
  if (bytes.size() >= 4 && BigEndian32(bytes, 0) != magic) {
    WEFT_THROW("ReadMnist: '" << path << "': expected the " << format << " magic number 0x"
                              << std::hex << std::setfill('0') << std::setw(8) << magic
                              << ", found 0x" << std::setw(8) << BigEndian32(bytes, 0));
  }
  if (bytes.size() < header) {
    WEFT_THROW("ReadMnist: '" << path << "': expected an " << format << " header of " << header
                              << " bytes, found a " << bytes.size() << "-byte file");
  }
  std::vector<uint64_t> dims(ndim);
  uint64_t payload = 1;
  bool overflow = false;
  for (size_t i = 0; i < ndim; ++i) {
    dims[i] = BigEndian32(bytes, 4 * (1 + i));
    overflow |= __builtin_mul_overflow(payload, dims[i], &payload);
  }
  if (overflow || bytes.size() - header != payload) {
    WEFT_THROW(
        "ReadMnist: '" << path << "': its header promises "
                       << (overflow ? std::string("more than 2^64") : std::to_string(payload))
                       << " bytes of " << format << " data, found " << bytes.size() - header
                       << (bytes.size() - header < payload ? " (truncated)" : " (trailing bytes)"));
  }
  return dims;
}

}  // namespace

Dataset ReadMnist(const std::string& images, const std::string& labels, bool flat) {
  const std::vector<unsigned char> image_bytes = ReadFileBytes(images),
                                   label_bytes = ReadFileBytes(labels);
  const std::vector<uint64_t> image_dims = ParseIdx(images, image_bytes, 0x00000803, "idx3-ubyte");
  const std::vector<uint64_t> label_dims = ParseIdx(labels, label_bytes, 0x00000801, "idx1-ubyte");
  if (image_dims[0] != label_dims[0]) {
    WEFT_THROW("ReadMnist: '" << images << "' has " << image_dims[0] << " images but '" << labels
                              << "' has " << label_dims[0]
                              << " labels: expected one label per image");
  }
  const auto n = static_cast<int64_t>(image_dims[0]), rows = static_cast<int64_t>(image_dims[1]),
             cols = static_cast<int64_t>(image_dims[2]);
  std::vector<float> pixels(image_bytes.begin() + 16, image_bytes.end());
  for (float& p : pixels) p /= 255.0f;
  std::vector<float> label(label_bytes.begin() + 8, label_bytes.end());
  return {NDArray::FromVector(pixels, flat ? Shape{n, rows * cols} : Shape{n, 1, rows, cols}),
          NDArray::FromVector(label, Shape{n})};
}

}  // namespace weft

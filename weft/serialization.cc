#include "weft/serialization.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "core/text.h"

namespace weft {
namespace {

// The data section is copied to and from memory byte for byte: that is the format's order only
// on a little-endian host.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

using Json = nlohmann::json;

constexpr uint64_t kHeaderLengthBytes = 8;
// The reference implementation refuses larger headers; so does weft, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
// The format nests three levels (the header, an entry, its shape); one more lets a shape of lists
// get the shape's own message. Deeper headers are refused before they are parsed.
constexpr int kMaxHeaderDepth = 4;

// The format's name of each DType, one row per DType in enum order.
constexpr std::array<std::pair<DType, std::string_view>, kNumDTypes> kFileDTypes = {{
    {DType::kFloat32, "F32"},
    {DType::kFloat64, "F64"},
    {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"},
    {DType::kInt32, "I32"},
    {DType::kInt64, "I64"},
    {DType::kUInt8, "U8"},
    {DType::kBool, "BOOL"},
}};

constexpr bool FileDTypesInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kFileDTypes[i].first) != i) return false;
  }
  return true;
}
static_assert(FileDTypesInEnumOrder(), "kFileDTypes must have one row per DType, in enum order");

std::optional<DType> ParseFileDType(std::string_view name) {
  for (const auto& [dtype, file_name] : kFileDTypes) {
    if (file_name == name) return dtype;
  }
  return std::nullopt;
}

std::string SystemError() { return std::strerror(errno); }

// ---- Save ---------------------------------------------------------------------------------------

void CheckSaveable(const std::string& path, const std::map<std::string, NDArray>& arrays) {
  for (const auto& [name, array] : arrays) {
    if (name == kMetadataKey)
      WEFT_THROW("Save '" << path << "': '" << kMetadataKey << "' is reserved, not an array name");
    if (array.is_none())
      WEFT_THROW("Save '" << path << "': array '" << name << "' is null (default-constructed)");
  }
}

// The header JSON, tensors in name order and back to back, padded with spaces to a multiple of 8
// bytes so that the data section starts aligned (as the reference writer does).
std::string BuildHeader(const std::map<std::string, NDArray>& arrays,
                        const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, array] : arrays) {
    std::vector<int64_t> dims(array.shape().dims().begin(), array.shape().dims().end());
    header[name] = {{"dtype", kFileDTypes[static_cast<size_t>(array.dtype())].second},
                    {"shape", dims},
                    {"data_offsets", {offset, offset + array.bytes()}}};
    offset += array.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void WriteLength(std::ofstream& out, uint64_t length) {
  std::array<char, kHeaderLengthBytes> bytes;
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.write(bytes.data(), bytes.size());
}

// Waits for the array's writes (rethrowing their error) and appends its bytes.
void WriteArray(std::ofstream& out, const NDArray& array) {
  const NDArray host = array.device().is_cpu() ? array : array.Copy(Device::Cpu());
  std::vector<char> bytes(host.bytes());
  host.SyncCopyToHost(bytes.data(), bytes.size());
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

void Save(const std::string& path, const std::map<std::string, NDArray>& arrays,
          const std::map<std::string, std::string>& metadata) {
  CheckSaveable(path, arrays);
  const std::string header = BuildHeader(arrays, metadata);
  try {
    AtomicFile file(path);  // a failed save leaves no file behind
    std::ofstream& out = file.stream();
    WriteLength(out, header.size());
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, array] : arrays) WriteArray(out, array);
    file.Commit();
  } catch (const Error& e) {
    WEFT_THROW("Save '" << path << "': " << e.what());
  }
}

namespace {

// ---- Load ---------------------------------------------------------------------------------------

// One tensor of the header, validated against itself (not yet against the others).
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

// The header's text and where the data section lies; the data is read per tensor.
struct Header {
  std::string json;
  uint64_t data_start;  // bytes from the start of the file
  uint64_t data_size;   // bytes from data_start to the end of the file
};

Header ReadHeader(const std::string& path, std::ifstream& in) {
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0);
  if (end < 0 || !in)
    WEFT_THROW("Load '" << path << "': cannot find the file's size (is it a regular file?)");
  const auto file_size = static_cast<uint64_t>(end);
  if (file_size < kHeaderLengthBytes) {
    WEFT_THROW("Load '" << path << "': expected at least the 8-byte header length, found a file of "
                        << file_size << " bytes");
  }
  std::array<unsigned char, kHeaderLengthBytes> bytes;
  in.read(reinterpret_cast<char*>(bytes.data()), bytes.size());
  if (!in) WEFT_THROW("Load '" << path << "': reading the header length failed: " << SystemError());
  uint64_t length = 0;
  for (size_t i = 0; i < bytes.size(); ++i) length |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (length > kMaxHeaderBytes || length > file_size - kHeaderLengthBytes) {
    WEFT_THROW("Load '" << path << "': header length " << length << " is larger than the "
                        << file_size - kHeaderLengthBytes << " bytes after it (or the limit of "
                        << kMaxHeaderBytes << ")");
  }
  Header header{std::string(length, '\0'), kHeaderLengthBytes + length,
                file_size - kHeaderLengthBytes - length};
  in.read(header.json.data(), static_cast<std::streamsize>(length));
  if (!in) WEFT_THROW("Load '" << path << "': reading the header failed: " << SystemError());
  return header;
}

// Parses the header, refusing a key repeated in any object (JSON parsers keep only one of them;
// a file with two tensors of one name is corrupt, not a choice to make silently).
Json ParseHeaderJson(const std::string& path, const std::string& text) {
  ParsedJson parsed = ParseJson(text, kMaxHeaderDepth);
  if (!parsed.ok())
    WEFT_THROW("Load '" << path << "': expected a JSON header, found " << parsed.error);
  if (!parsed.value.is_object()) {
    WEFT_THROW("Load '" << path << "': expected the header to be a JSON object, found "
                        << JsonForMessage(parsed.value));
  }
  return std::move(parsed.value);
}

void ParseMetadata(const std::string& path, const Json& value,
                   std::map<std::string, std::string>* metadata) {
  if (!value.is_object())
    WEFT_THROW("Load '" << path << "': expected " << kMetadataKey << " to be an object, found "
                        << JsonForMessage(value));
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      WEFT_THROW("Load '" << path << "': expected " << kMetadataKey
                          << " to map strings to strings, found '" << Abbreviate(key)
                          << "': " << JsonForMessage(item));
    }
    if (metadata != nullptr) (*metadata)[key] = item.get<std::string>();
  }
}

// "Load '<path>': tensor '<name>'", the start of every message about one tensor.
std::string InTensor(const std::string& path, const std::string& name) {
  return "Load '" + path + "': tensor '" + Abbreviate(name) + "'";
}

// A JSON array of non-negative integers, at most `max_size` of them (or exactly, when `exact`).
std::vector<uint64_t> ParseUnsignedList(const std::string& path, const std::string& name,
                                        const char* key, const Json& value, size_t max_size,
                                        bool exact) {
  bool ok = value.is_array() && (exact ? value.size() == max_size : value.size() <= max_size);
  for (size_t i = 0; ok && i < value.size(); ++i) ok = value[i].is_number_unsigned();
  if (!ok) {
    WEFT_THROW(InTensor(path, name)
               << ": expected '" << key << "' to be a list of " << (exact ? "exactly " : "at most ")
               << max_size << " non-negative integers, found " << JsonForMessage(value));
  }
  return value.get<std::vector<uint64_t>>();
}

const Json& RequiredKey(const std::string& path, const std::string& name, const Json& entry,
                        const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) WEFT_THROW(InTensor(path, name) << ": missing key '" << key << "'");
  return *it;
}

DType ParseEntryDType(const std::string& path, const std::string& name, const Json& value) {
  std::optional<DType> dtype =
      value.is_string() ? ParseFileDType(value.get<std::string>()) : std::nullopt;
  if (!dtype) {
    WEFT_THROW(InTensor(path, name) << ": unknown dtype " << JsonForMessage(value)
                                    << ": expected one of F32, F64, F16, BF16, I32, I64, U8, BOOL");
  }
  return *dtype;
}

// The number of bytes `shape` of `dtype` takes, or nullopt when that does not fit in 64 bits.
std::optional<uint64_t> ShapeBytes(const std::vector<uint64_t>& dims, DType dtype) {
  uint64_t bytes = DTypeSize(dtype);
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  }
  return bytes;
}

Entry ParseEntry(const std::string& path, const std::string& name, const Json& value) {
  if (!value.is_object())
    WEFT_THROW(InTensor(path, name) << ": expected an object, found " << JsonForMessage(value));
  for (const auto& [key, item] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      WEFT_THROW(InTensor(path, name) << ": unexpected key '" << Abbreviate(key)
                                      << "': expected only dtype, shape and data_offsets");
    }
  }
  const DType dtype = ParseEntryDType(path, name, RequiredKey(path, name, value, "dtype"));
  const std::vector<uint64_t> dims = ParseUnsignedList(
      path, name, "shape", RequiredKey(path, name, value, "shape"), Shape::kMaxDims, false);
  const std::vector<uint64_t> offsets = ParseUnsignedList(
      path, name, "data_offsets", RequiredKey(path, name, value, "data_offsets"), 2, true);
  if (offsets[0] > offsets[1]) {
    WEFT_THROW(InTensor(path, name)
               << ": data_offsets out of order: begin " << offsets[0] << " > end " << offsets[1]);
  }
  const std::optional<uint64_t> bytes = ShapeBytes(dims, dtype);
  if (!bytes || *bytes != offsets[1] - offsets[0]) {
    WEFT_THROW(InTensor(path, name) << ": shape " << JsonForMessage(value["shape"]) << " of "
                                    << kFileDTypes[static_cast<size_t>(dtype)].second << " needs "
                                    << (bytes ? std::to_string(*bytes) : "more than 2^64")
                                    << " bytes, but data_offsets [" << offsets[0] << ", "
                                    << offsets[1] << "] hold " << offsets[1] - offsets[0]);
  }
  std::vector<int64_t> extents(dims.begin(), dims.end());
  return Entry{name, dtype, Shape(extents), offsets[0], offsets[1]};
}

// The tensors must tile the data section exactly: sorted by offset, each begins where the one
// before ends, the first at 0 and the last at the end of the file.
void CheckTiling(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t expected = 0;
  const std::string* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_size) {
      WEFT_THROW(InTensor(path, e.name) << ": data_offsets [" << e.begin << ", " << e.end
                                        << "] run past the end of the file (the data section has "
                                        << data_size << " bytes)");
    }
    if (e.begin != expected) {
      WEFT_THROW(InTensor(path, e.name)
                 << ": expected its data to begin at " << expected
                 << (previous ? " (where '" + Abbreviate(*previous) + "' ends)"
                              : std::string(" (the first tensor)"))
                 << ", found " << e.begin
                 << (e.begin < expected ? ": the tensors overlap" : ": a gap"));
    }
    expected = e.end;
    previous = &e.name;
  }
  if (expected != data_size) {
    WEFT_THROW("Load '" << path << "': expected the tensors to fill the " << data_size
                        << "-byte data section, found " << data_size - expected
                        << " bytes after the last one");
  }
}

// Reads the tensor that starts where `in` is (the tensors tile the data section, so reading them in
// offset order needs no seek). The file is read straight into the new array's memory: no op has
// been pushed on it and nothing else holds it, so the host may write it without an engine op (one
// per tensor, with its thread switches, would dominate a file of many small tensors).
NDArray ReadArray(const std::string& path, std::ifstream& in, const Entry& e) {
  NDArray array(e.shape, Device::Cpu(), e.dtype);
  if (e.end == e.begin) return array;
  in.read(static_cast<char*>(array.View().raw()), static_cast<std::streamsize>(e.end - e.begin));
  if (!in)
    WEFT_THROW("Load '" << path << "': reading tensor '" << Abbreviate(e.name)
                        << "' failed: " << SystemError());
  return array;
}

}  // namespace

std::map<std::string, NDArray> Load(const std::string& path,
                                    std::map<std::string, std::string>* metadata) {
  std::ifstream in;
  if (auto why = OpenForReading(path, in))
    WEFT_THROW("Load '" << path << "': cannot open the file: " << *why);
  if (metadata != nullptr) metadata->clear();
  const Header header = ReadHeader(path, in);
  const Json json = ParseHeaderJson(path, header.json);
  std::vector<Entry> entries;
  for (const auto& [name, value] : json.items()) {
    if (name == kMetadataKey) {
      ParseMetadata(path, value, metadata);
    } else {
      entries.push_back(ParseEntry(path, name, value));
    }
  }
  CheckTiling(path, entries, header.data_size);
  std::map<std::string, NDArray> arrays;
  in.seekg(static_cast<std::streamoff>(header.data_start));
  for (const Entry& e : entries) arrays.emplace(e.name, ReadArray(path, in, e));  // in offset order
  return arrays;
}

}  // namespace weft

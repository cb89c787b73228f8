#include "weft/onnx/reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"

namespace weft::onnx_import {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

// ONNX's TensorProto.DataType names, for messages.
std::string OnnxTypeName(int32_t t) {
  static const std::map<int32_t, const char*> names = {
      {1, "FLOAT"},   {2, "UINT8"},      {3, "INT8"},        {4, "UINT16"},
      {5, "INT16"},   {6, "INT32"},      {7, "INT64"},       {8, "STRING"},
      {9, "BOOL"},    {10, "FLOAT16"},   {11, "DOUBLE"},     {12, "UINT32"},
      {13, "UINT64"}, {14, "COMPLEX64"}, {15, "COMPLEX128"}, {16, "BFLOAT16"}};
  const auto it = names.find(t);
  return it == names.end() ? "type " + std::to_string(t) : it->second;
}

// External data's `key` ("offset", "length"): a count of bytes, written in decimal.
int64_t ByteCount(const onnx::TensorProto& t, std::map<std::string, std::string>& kv,
                  const std::string& key) {
  const std::string& v = kv[key];
  int64_t n = 0;
  const bool digits = !v.empty() && v.size() <= 18 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) n = std::stoll(v);
  if (!digits) {
    WEFT_THROW("ONNX tensor '" << t.name() << "': external data '" << key
                               << "': expected a byte count, found '" << v.substr(0, 40) << "'");
  }
  return n;
}

// The bytes of `name`'s external data: `location` relative to the model's folder (inside it),
// `length` bytes from `offset` (default: to the end).
std::vector<char> ExternalBytes(const onnx::TensorProto& t, const std::string& dir) {
  std::map<std::string, std::string> kv;
  for (const auto& e : t.external_data()) kv[e.key()] = e.value();
  if (dir.empty())
    WEFT_THROW("ONNX tensor '" << t.name() << "': external data outside a model's initializers");
  if (!kv.contains("location"))
    WEFT_THROW("ONNX tensor '" << t.name() << "': external data without a 'location'");
  const std::filesystem::path rel(kv["location"]);
  if (rel.is_absolute() || rel.lexically_normal().string().starts_with(".."))
    WEFT_THROW("ONNX tensor '" << t.name() << "': expected an external data location inside the "
                               << "model's folder, found '" << kv["location"] << "'");
  const std::filesystem::path file = std::filesystem::path(dir) / rel;
  std::ifstream in(file, std::ios::binary);
  if (!in) WEFT_THROW("ONNX tensor '" << t.name() << "': cannot open its external data " << file);
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  const int64_t offset = kv.contains("offset") ? ByteCount(t, kv, "offset") : 0;
  const int64_t length = kv.contains("length") ? ByteCount(t, kv, "length") : size - offset;
  if (offset < 0 || length < 0 || offset + length > size) {
    WEFT_THROW("ONNX tensor '" << t.name() << "': expected " << length << " bytes at offset "
                               << offset << " of " << file << ", which holds " << size);
  }
  std::vector<char> bytes(length);
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
}

template <typename Field, typename T>
std::vector<char> Pack(const Field& values, size_t width) {
  std::vector<char> bytes(values.size() * width);
  for (int i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values[i]);
    std::memcpy(bytes.data() + i * width, &v, width);
  }
  return bytes;
}

// The data held in the typed field for t's type.
std::vector<char> TypedBytes(const onnx::TensorProto& t, DType dtype) {
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      return Pack<decltype(t.float_data()), float>(t.float_data(), 4);
    case onnx::TensorProto::DOUBLE:
      return Pack<decltype(t.double_data()), double>(t.double_data(), 8);
    case onnx::TensorProto::INT64:
      return Pack<decltype(t.int64_data()), int64_t>(t.int64_data(), 8);
    case onnx::TensorProto::INT32:
      return Pack<decltype(t.int32_data()), int32_t>(t.int32_data(), 4);
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      return Pack<decltype(t.int32_data()), uint8_t>(t.int32_data(), 1);
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return Pack<decltype(t.int32_data()), uint16_t>(t.int32_data(), 2);  // the bits
    default:
      WEFT_THROW("ONNX tensor '" << t.name() << "': no data field for " << dtype);
  }
}

}  // namespace

DType DTypeOfOnnx(int32_t onnx_type, const std::string& what) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      return DType::kFloat32;
    case onnx::TensorProto::DOUBLE:
      return DType::kFloat64;
    case onnx::TensorProto::FLOAT16:
      return DType::kFloat16;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBFloat16;
    case onnx::TensorProto::INT32:
      return DType::kInt32;
    case onnx::TensorProto::INT64:
      return DType::kInt64;
    case onnx::TensorProto::UINT8:
      return DType::kUInt8;
    case onnx::TensorProto::BOOL:
      return DType::kBool;
    default:
      WEFT_THROW(what << ": expected an element type weft has (FLOAT, DOUBLE, FLOAT16, BFLOAT16, "
                         "INT32, INT64, UINT8, BOOL), found "
                      << OnnxTypeName(onnx_type));
  }
}

HostTensor TensorOf(const onnx::TensorProto& t, const std::string& dir) {
  HostTensor h;
  h.dtype = DTypeOfOnnx(t.data_type(), "ONNX tensor '" + t.name() + "'");
  int64_t elements = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) WEFT_THROW("ONNX tensor '" << t.name() << "': expected dims >= 0, found " << d);
    if (d > 0 && elements > kMaxElements / d) {
      WEFT_THROW("ONNX tensor '" << t.name() << "': expected at most 2^40 elements, found dims "
                                 << Shape(std::vector<int64_t>(t.dims().begin(), t.dims().end())));
    }
    elements *= d;
    h.dims.push_back(d);
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    h.bytes = ExternalBytes(t, dir);
  } else if (t.has_raw_data()) {
    h.bytes.assign(t.raw_data().begin(), t.raw_data().end());
  } else {
    h.bytes = TypedBytes(t, h.dtype);
  }
  const int64_t want = h.Size() * static_cast<int64_t>(DTypeSize(h.dtype));
  if (static_cast<int64_t>(h.bytes.size()) != want) {
    WEFT_THROW("ONNX tensor '" << t.name() << "': dims " << h.ShapeOf() << " of " << h.dtype
                               << " need " << want << " bytes of data, found " << h.bytes.size());
  }
  return h;
}

onnx::ModelProto ReadModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) WEFT_THROW("ImportOnnx: cannot open '" << path << "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    WEFT_THROW("ImportOnnx: '" << path << "' is " << bytes.size()
                               << " bytes; a model file holds at most 2 GiB (larger weights go "
                                  "in external data files)");
  }
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    WEFT_THROW("ImportOnnx: '" << path << "' (" << bytes.size()
                               << " bytes) is not a valid ONNX model: expected a serialized "
                                  "onnx.ModelProto, and the protobuf parse failed (a truncated "
                                  "or corrupted file, or another format)");
  }
  if (!model.has_graph()) {
    WEFT_THROW("ImportOnnx: '" << path << "' parses as an onnx.ModelProto but has no graph");
  }
  return model;
}

}  // namespace weft::onnx_import

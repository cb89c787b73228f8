// Save/Load in the safetensors format: exact round trips for every dtype and shape, files written
// byte by byte as the reference (Python) writer lays them out, a clear weft::Error for each kind of
// malformed file, and saves that never leave a half-written or temporary file behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ExpectErrorContains;
using testing::TempPath;
using testing::WriteTempFile;

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A file as the format lays it out: the header's length, the header, the data section.
std::string SafetensorsBytes(const std::string& header, const std::string& data) {
  return LittleEndian64(header.size()) + header + data;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// The array's bytes, compared bit for bit (NaN and -0.0 included).
std::string ArrayBytes(const NDArray& a) {
  std::string bytes(a.bytes(), '\0');
  a.SyncCopyToHost(bytes.data(), bytes.size());
  return bytes;
}

TEST(Serialization, RoundTripsEveryDTypeAndShapeExactly) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, NDArray> arrays = {
      {"f32",
       NDArray::FromVector(std::vector<float>{1.5f, -0.0f, nan, 1e-40f, 3.4e38f, -7}, Shape{2, 3})},
      {"f64", NDArray::FromVector(std::vector<double>{0.1, -1e300, 4.9e-324, 2}, Shape{4})},
      {"i32", NDArray::FromVector(std::vector<int32_t>{1, -2, 3, -4, 5, -6, 7, INT32_MIN},
                                  Shape{2, 2, 2})},
      {"i64", NDArray::FromVector(std::vector<int64_t>{INT64_MAX}, Shape{})},
      {"u8", NDArray::FromVector(std::vector<uint8_t>{0, 255, 7}, Shape{3, 1})},
      {"empty", NDArray::FromVector(std::vector<float>{}, Shape{0, 3})},
  };
  const std::string path = TempPath("round_trip.safetensors");
  Save(path, arrays);
  std::map<std::string, NDArray> loaded = Load(path);
  ASSERT_EQ(loaded.size(), arrays.size());
  for (const auto& [name, array] : arrays) {
    ASSERT_EQ(loaded.count(name), 1u) << name;
    EXPECT_EQ(loaded[name].shape(), array.shape()) << name;
    EXPECT_EQ(loaded[name].dtype(), array.dtype()) << name;
    EXPECT_EQ(ArrayBytes(loaded[name]), ArrayBytes(array)) << name;
  }
  EXPECT_FALSE(FileExists(path + ".tmp"));
}

TEST(Serialization, AnEmptySetOfArraysRoundTrips) {
  const std::string path = TempPath("empty.safetensors");
  Save(path, {});
  EXPECT_EQ(ReadBytes(path).size(), 16u) << "the length and \"{}\" padded to 8 bytes";
  EXPECT_TRUE(Load(path).empty());
}

TEST(Serialization, WritesTheFormatByteForByte) {
  const std::string path = TempPath("layout.safetensors");
  NDArray w = NDArray::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  NDArray b = NDArray::FromVector(std::vector<int64_t>{-1, 9}, Shape{2});
  Save(path, {{"w", w}, {"b", b}}, {{"format", "weft"}});
  const std::string bytes = ReadBytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "the data section starts 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 16 + 24);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"], (nlohmann::json{{"format", "weft"}}));
  EXPECT_EQ(header["b"],
            (nlohmann::json{{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {0, 16}}}));
  EXPECT_EQ(header["w"],
            (nlohmann::json{{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {16, 40}}}));
  EXPECT_EQ(bytes.substr(8 + n),
            RawBytes(std::vector<int64_t>{-1, 9}) + RawBytes(std::vector<float>{1, 2, 3, 4, 5, 6}));
}

// As Python's safetensors writes it: compact JSON, metadata first, tensors ordered by alignment
// (F64 before I32) rather than by name, header padded with spaces to a multiple of 8.
TEST(Serialization, LoadsAFileWrittenByHandAsTheReferenceWriterWould) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"I32","shape":[3],"data_offsets":[16,28]},)"
      R"("weight":{"dtype":"F64","shape":[2,1],"data_offsets":[0,16]},)"
      R"("flag":{"dtype":"BOOL","shape":[],"data_offsets":[28,29]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data =
      RawBytes(std::vector<double>{0.25, -3}) + RawBytes(std::vector<int32_t>{7, -8, 9}) + "\x01";
  const std::string path = WriteTempFile("by_hand.safetensors", SafetensorsBytes(header, data));
  std::map<std::string, std::string> metadata;
  std::map<std::string, NDArray> arrays = Load(path, &metadata);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(arrays.size(), 3u);
  EXPECT_EQ(arrays["weight"].shape(), (Shape{2, 1}));
  EXPECT_EQ(arrays["weight"].ToVector<double>(), (std::vector<double>{0.25, -3}));
  EXPECT_EQ(arrays["bias"].ToVector<int32_t>(), (std::vector<int32_t>{7, -8, 9}));
  EXPECT_EQ(arrays["flag"].shape(), Shape{});
  EXPECT_EQ(arrays["flag"].dtype(), DType::kBool);
  EXPECT_EQ(ArrayBytes(arrays["flag"]), "\x01");
}

TEST(Serialization, SaveWaitsForPendingWrites) {
  SeedRandom(3);
  NDArray a(Shape{64, 32});
  a.FillUniform(-1, 1);
  NDArray b = op::exp(a) * 2.0;  // pushed, likely still running
  const std::string path = TempPath("pending.safetensors");
  Save(path, {{"b", b}});
  EXPECT_EQ(Load(path)["b"].ToVector<float>(), b.ToVector<float>());
}

TEST(Serialization, SaveIntoAMissingDirectoryFailsAndLeavesNoFile) {
  const std::string path = TempPath("no/such/dir/model.safetensors");
  NDArray a = NDArray::FromVector(std::vector<float>{1, 2}, Shape{2});
  ExpectErrorContains(
      [&] {
        Save(path, {{"a", a}});
      },
      {"Save '" + path + "'", "No such file or directory"});
  EXPECT_FALSE(FileExists(path));
  EXPECT_FALSE(FileExists(path + ".tmp"));
}

// An array whose producing op failed: the save rethrows the op's error and the file that was
// there before is untouched, with no temporary file left beside it.
TEST(Serialization, FailedSaveKeepsThePreviousFile) {
  const std::string path = TempPath("keep.safetensors");
  Save(path, {{"a", NDArray::FromVector(std::vector<float>{1, 2, 3}, Shape{3})}});
  const std::string before = ReadBytes(path);
  NDArray bad(Shape{3});
  engine::Engine::Get()->PushSync(
      [](engine::RunContext) { throw Error("kernel failed: bad value"); }, Device::Cpu(), {},
      {bad.var()});
  NDArray good = NDArray::FromVector(std::vector<float>{4, 5, 6}, Shape{3});
  ExpectErrorContains([&] { Save(path, {{"a", good}, {"z", bad}}); }, {"kernel failed: bad value"});
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(FileExists(path + ".tmp"));
}

TEST(Serialization, SaveRefusesBadArguments) {
  const std::string path = TempPath("refused.safetensors");
  EXPECT_THROW(Save(path, {{"a", NDArray()}}), Error);
  EXPECT_THROW(Save(path, {{"__metadata__", NDArray(Shape{1})}}), Error);
  EXPECT_FALSE(FileExists(path));
}

struct MalformedCase {
  std::string what;
  std::string bytes;
  std::vector<std::string> expected;  // parts of the message, besides the file's path
};

std::string Entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

std::vector<MalformedCase> MalformedCases() {
  const std::string d8(8, 'x'), d12(12, 'x');
  const std::string f32x2 = Entry("F32", "[2]", "[0,8]");
  return {
      {"too short", std::string("\x05\x00\x00", 3), {"8-byte header length", "3 bytes"}},
      {"header past the end",
       LittleEndian64(1000) + "{}",
       {"header length 1000", "larger than the 2 bytes"}},
      {"huge header length", LittleEndian64(~0ull) + "{}", {"header length 18446744073709551615"}},
      {"invalid JSON", SafetensorsBytes(R"({"a": {)", ""), {"invalid JSON"}},
      {"invalid UTF-8", SafetensorsBytes("{\"\xff\": 1}", ""), {"invalid JSON"}},
      {"not an object",
       SafetensorsBytes("[1, 2]", ""),
       {"expected the header to be a JSON object", "[1,2]"}},
      {"non-object entry",
       SafetensorsBytes(R"({"a": 3})", ""),
       {"tensor 'a'", "expected an object, found 3"}},
      {"unknown dtype",
       SafetensorsBytes(R"({"a":)" + Entry("I8", "[2]", "[0,2]") + "}", "xx"),
       {"tensor 'a'", "unknown dtype \"I8\"", "F32"}},
      {"dtype not a string",
       SafetensorsBytes(R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", d8),
       {"tensor 'a'", "unknown dtype 32"}},
      {"shape/offsets mismatch",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[2]", "[0,4]") + "}", "xxxx"),
       {"tensor 'a'", "shape [2] of F32 needs 8 bytes", "hold 4"}},
      {"non-integer shape",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[2.5]", "[0,8]") + "}", d8),
       {"tensor 'a'", "'shape'", "non-negative integers", "[2.5]"}},
      {"negative shape",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[-2]", "[0,8]") + "}", d8),
       {"'shape'", "non-negative integers", "[-2]"}},
      {"shape not a list",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "\"2\"", "[0,8]") + "}", d8),
       {"'shape'", "non-negative integers"}},
      {"too many axes",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[1,1,1,1,1,1,1,1,2]", "[0,8]") + "}", d8),
       {"'shape'", "at most 8"}},
      {"three offsets",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[2]", "[0,8,8]") + "}", d8),
       {"'data_offsets'", "exactly 2"}},
      {"offsets past the end",
       SafetensorsBytes(R"({"a":)" + f32x2 + "}", "xxxx"),
       {"tensor 'a'", "[0, 8]", "past the end", "4 bytes"}},
      {"offsets out of order",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[0]", "[8,0]") + "}", d8),
       {"tensor 'a'", "out of order", "begin 8 > end 0"}},
      {"overlapping tensors",
       SafetensorsBytes(R"({"a":)" + f32x2 + R"(,"b":)" + Entry("F32", "[2]", "[4,12]") + "}", d12),
       {"tensor 'b'", "begin at 8", "where 'a' ends", "found 4", "overlap"}},
      {"a gap",
       SafetensorsBytes(R"({"a":)" + Entry("F32", "[1]", "[0,4]") + R"(,"b":)" +
                            Entry("F32", "[1]", "[8,12]") + "}",
                        d12),
       {"tensor 'b'", "begin at 4", "found 8", "gap"}},
      {"trailing bytes",
       SafetensorsBytes(R"({"a":)" + f32x2 + "}", d12),
       {"12-byte data section", "4 bytes after"}},
      {"duplicate names",
       SafetensorsBytes(R"({"a":)" + f32x2 + R"(,"a":)" + f32x2 + "}", d8),
       {"duplicate key 'a'"}},
      {"duplicate keys",
       SafetensorsBytes(R"({"a":{"dtype":"F32","dtype":"F64","shape":[2],"data_offsets":[0,8]}})",
                        d8),
       {"duplicate key 'dtype'"}},
      {"missing key",
       SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2]}})", d8),
       {"tensor 'a'", "missing key 'data_offsets'"}},
      {"unexpected key",
       SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8),
       {"tensor 'a'", "unexpected key 'x'"}},
      {"metadata not strings",
       SafetensorsBytes(R"({"__metadata__":{"epoch":3}})", ""),
       {"__metadata__", "strings to strings", "'epoch': 3"}},
  };
}

TEST(Serialization, MalformedFilesRaiseAClearError) {
  for (const MalformedCase& c : MalformedCases()) {
    SCOPED_TRACE(c.what);
    const std::string path = WriteTempFile("malformed.safetensors", c.bytes);
    std::vector<std::string> expected = c.expected;
    expected.push_back("Load '" + path + "'");
    ExpectErrorContains([&] { Load(path); }, expected);
  }
}

// A message quotes at most a few dozen bytes of the file, however large the bad value.
constexpr size_t kMaxMessageBytes = 600;

std::string LoadError(const std::string& name, const std::string& bytes) {
  const std::string path = WriteTempFile(name, bytes);
  return testing::ErrorMessage([&] { Load(path); });
}

TEST(Serialization, DeeplyNestedHeadersAreRefusedWithoutRecursion) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::vector<std::string> headers = {
      deep,                                            // the header itself
      R"({"a":)" + Entry("F32", deep, "[0,0]") + "}",  // a shape
      R"({"__metadata__":{"k":)" + deep + "}}",        // metadata
      R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":)" + deep +
          "}}",  // an unknown key
  };
  for (const std::string& header : headers) {
    const std::string message = LoadError("deep.safetensors", SafetensorsBytes(header, "xxxx"));
    EXPECT_NE(message.find("nested deeper than 4 levels"), std::string::npos)
        << message.substr(0, 1000);
    EXPECT_LT(message.size(), kMaxMessageBytes) << message.substr(0, 1000);
  }
  // Within the limit, a shape of lists is the shape's own error.
  const std::string message =
      LoadError("nested.safetensors",
                SafetensorsBytes(R"({"a":)" + Entry("F32", "[[2]]", "[0,8]") + "}", "xxxxxxxx"));
  EXPECT_NE(message.find("non-negative integers, found [[2]]"), std::string::npos) << message;
}

TEST(Serialization, MessagesQuoteAtMostAFewDozenBytesOfTheFile) {
  const std::string big(1'000'000, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a huge dtype", R"({"a":)" + Entry(big, "[1]", "[0,4]") + "}"},
      {"a huge shape",
       R"({"a":)" + Entry("F32", "[" + std::string(big.size(), '1') + "]", "[0,4]") + "}"},
      {"a huge list in a shape",
       R"({"a":)" + Entry("F32", "[1" + std::string(200'000, ',') + "]", "[0,4]") + "}"},
      {"a huge name", R"({")" + big + R"(":)" + Entry("F32", "[2]", "[0,4]") + "}"},
      {"a huge duplicate name", R"({")" + big + R"(":1,")" + big + R"(":1})"},
      {"a huge metadata value", R"({"__metadata__":{"k":[")" + big + R"("]}})"},
      {"a huge unknown key",
       R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],")" + big + R"(":1}})"},
      {"a huge string left open", R"({"a":")" + big},
      {"a huge header that is not an object", "[\"" + big + "\"]"},
  };
  for (const auto& [what, header] : cases) {
    SCOPED_TRACE(what);
    const std::string message = LoadError("huge.safetensors", SafetensorsBytes(header, "xxxx"));
    EXPECT_NE(message.find("Load '"), std::string::npos) << message.substr(0, 1000);
    EXPECT_LT(message.size(), kMaxMessageBytes) << message.substr(0, 1000);
  }
}

// A file of 100,000 one-element tensors loads, in time linear in their number: bench/io_bench.cc
// times it. (When Load was quadratic, this took minutes, past the test's timeout.)
TEST(Serialization, LoadsAFileOfAHundredThousandTensors) {
  constexpr int kTensors = 100'000;
  std::string header = "{";
  std::vector<int32_t> values(kTensors);
  for (int i = 0; i < kTensors; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"I32","shape":[1],"data_offsets":[)" + std::to_string(4 * i) + "," +
              std::to_string(4 * i + 4) + "]}";
    values[i] = 7 * i;
  }
  header += "}";
  const std::string path =
      WriteTempFile("many.safetensors", SafetensorsBytes(header, RawBytes(values)));
  std::map<std::string, NDArray> loaded = Load(path);
  ASSERT_EQ(loaded.size(), static_cast<size_t>(kTensors));
  for (int i : {0, 1, 9'999, 54'321, kTensors - 1}) {
    EXPECT_EQ(loaded["t" + std::to_string(i)].ToVector<int32_t>(), std::vector<int32_t>{7 * i});
  }
}

TEST(Serialization, LoadOfADirectorySaysItIsOne) {
  const std::string dir = TempPath("");
  for (int run = 0; run < 2; ++run) {  // the same message every time
    ExpectErrorContains([&] { Load(dir); }, {"Load '" + dir + "'", "is a directory"});
  }
  ExpectErrorContains([&] { LoadSymbol(dir); }, {"LoadSymbol", dir, "is a directory"});
}

TEST(Serialization, LoadOfAMissingFileNamesIt) {
  const std::string path = TempPath("missing.safetensors");
  ExpectErrorContains([&] { Load(path); }, {"Load '" + path + "': cannot open"});
}

}  // namespace
}  // namespace weft

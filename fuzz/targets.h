// weft's fuzz targets: one function per loader, each taking any bytes. A target returns 0 when the
// input was accepted or refused with a weft::Error; anything else (a crash, a sanitizer report, an
// exception of another type, a broken round trip, which a target reports by Fail()) is a finding.
//
//   bazel build --config=fuzz //fuzz/...                   # libFuzzer + ASan + UBSan (clang)
//   bazel-bin/fuzz/safetensors_fuzzer -max_total_time=30 /tmp/corpus fuzz/corpus/safetensors
//
// Each binary calls its target from LLVMFuzzerTestOneInput (entry.cc); tests/fuzz_regression_test
// runs every target on its seed corpus and on every earlier finding (fuzz/regressions/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weft::fuzz {

// weft::Load of a safetensors file; what it accepts must survive Save and Load unchanged.
int Safetensors(const uint8_t* data, size_t size);
// weft::LoadSymbol of a graph's JSON form; what it accepts must write back and reload exactly.
int GraphJson(const uint8_t* data, size_t size);
// weft::ReadCsv and CsvIter. The first byte picks the label column and the batch size.
int Csv(const uint8_t* data, size_t size);
// weft::ReadMnist and MnistIter. The first two bytes (little-endian) say how many of the rest are
// the images file; the others are the labels file.
int Mnist(const uint8_t* data, size_t size);
// weft::ImportOnnx of a model file; an imported model's graph round-trips through JSON and, where
// its inputs' extents are given and small, binds and runs on the CPU (or refuses with an Error).
int Onnx(const uint8_t* data, size_t size);
// An op's attribute parsing, then its shape and type inference. The input is text: the op's name
// on the first line, the input shapes on the second ("(2, 3);(3,)"), then "key=value" lines.
int OpAttrs(const uint8_t* data, size_t size);

// Reports a finding that is not a crash (a broken invariant) and aborts, so that libFuzzer saves
// the input; `what` says which invariant.
[[noreturn]] void Fail(const std::string& what);

// A file owned by this process, in $TMPDIR (else /dev/shm, else /tmp), rewritten with each input.
class TempFile {
 public:
  explicit TempFile(const std::string& tag);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's contents with `size` bytes at `data`; aborts if it cannot.
  void Write(const uint8_t* data, size_t size) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace weft::fuzz

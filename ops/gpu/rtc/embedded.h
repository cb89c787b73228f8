// The files of ops/gpu/kernels, embedded into the binary by the genrule in ops/gpu/BUILD (so a
// binary compiles its kernels wherever it runs, with no source tree beside it).
#pragma once

namespace weft::gpu::rtc {

struct EmbeddedFile {
  const char* name;  // the file name, as kernels #include it ("common.cuh")
  const char* text;
};

// Defined in the generated embedded_kernels.cc.
extern const EmbeddedFile kEmbeddedFiles[];
extern const int kNumEmbeddedFiles;

}  // namespace weft::gpu::rtc

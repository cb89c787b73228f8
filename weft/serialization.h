// Saving and loading named arrays in the safetensors format, which PyTorch, JAX and MXNet users
// read and write (https://github.com/huggingface/safetensors). Save owns the file it writes: it
// goes to "<path>.tmp" and is renamed into place only when complete, so a failed save leaves
// neither a half-written file nor a stray temporary one. Load trusts nothing in the file.
//
//   Save("model.safetensors", {{"fc1_weight", w}, {"fc1_bias", b}});   // waits for w's and b's
//   writes std::map<std::string, NDArray> params = Load("model.safetensors");  // float32 arrays on
//   the CPU
//
// The format: an 8-byte little-endian unsigned header length N; N bytes of UTF-8 JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}   (metadata optional)
// then the data section: each tensor's bytes, little-endian and row-major, at [begin, end) from
// the start of the section, the tensors back to back with no gap, overlap or trailing byte.
// Dtypes: F32, F64, F16, BF16, I32, I64, U8, BOOL (weft's DTypes; the format's others are refused).
#pragma once

#include <map>
#include <string>

#include "storage/ndarray.h"

namespace weft {

// Writes `arrays` (keyed by name) and the optional string `metadata` to `path`. The arrays may have
// pending writes: Save waits for them, and an error one of them holds is rethrown (with no file
// written). Throws weft::Error when an array is null, a name is "__metadata__", or the file cannot
// be written (the message names the file and the system's reason).
void Save(const std::string& path, const std::map<std::string, NDArray>& arrays,
          const std::map<std::string, std::string>& metadata = {});

// Reads every array of the file at `path` into new CPU arrays; the file's metadata goes to
// `*metadata` when it is not null. Time is linear in the file's size and number of tensors.
// Throws weft::Error naming the file and what is wrong with it: a directory, too short, a header
// length past the end, invalid JSON, JSON nested deeper than four levels, duplicate names or keys,
// an entry that is not an object or lacks a key, an unknown dtype, a shape that is not a list of
// non-negative integers, offsets that disagree with the shape and dtype, run past the end,
// overlap, leave a gap or are out of order. A message quotes a few dozen bytes of a bad value at
// most, and says how long it was.
std::map<std::string, NDArray> Load(const std::string& path,
                                    std::map<std::string, std::string>* metadata = nullptr);

}  // namespace weft

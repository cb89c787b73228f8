// Fuzz target: weft::Load of a safetensors file, and Save/Load of whatever it accepts.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/targets.h"
#include "weft/serialization.h"

namespace weft::fuzz {
namespace {

using Arrays = std::map<std::string, NDArray>;
using Metadata = std::map<std::string, std::string>;

std::vector<char> Bytes(const NDArray& a) {
  std::vector<char> bytes(static_cast<size_t>(a.shape().Size()) * DTypeSize(a.dtype()));
  if (!bytes.empty()) a.SyncCopyToHost(bytes.data(), bytes.size());
  return bytes;
}

// The arrays and metadata a second Load read back are the first ones: names, dtypes, shapes, bytes.
void CheckSame(const Arrays& a, const Metadata& a_meta, const Arrays& b, const Metadata& b_meta) {
  if (a_meta != b_meta) Fail("Save/Load changed the metadata");
  if (a.size() != b.size()) Fail("Save/Load changed the number of arrays");
  for (const auto& [name, x] : a) {
    auto it = b.find(name);
    if (it == b.end()) Fail("Save/Load lost array '" + name + "'");
    const NDArray& y = it->second;
    if (x.dtype() != y.dtype() || x.shape() != y.shape())
      Fail("Save/Load changed the type of '" + name + "'");
    if (Bytes(x) != Bytes(y)) Fail("Save/Load changed the values of '" + name + "'");
  }
}

}  // namespace

int Safetensors(const uint8_t* data, size_t size) {
  static const TempFile file("load.safetensors");
  static const TempFile copy("save.safetensors");
  file.Write(data, size);
  Metadata meta;
  Arrays arrays;
  try {
    arrays = Load(file.path(), &meta);
  } catch (const Error&) {
    return 0;  // refused, with a message: what a bad file should get
  }
  Save(copy.path(), arrays, meta);
  Metadata meta2;
  const Arrays arrays2 = Load(copy.path(), &meta2);
  CheckSame(arrays, meta, arrays2, meta2);
  return 0;
}

}  // namespace weft::fuzz

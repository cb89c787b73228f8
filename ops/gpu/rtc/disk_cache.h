// The kernel library's disk cache: one file per compiled kernel, named by a hash of everything
// that went into the compile (source, included files, options, architecture, NVRTC version).
// Internal to the kernel library.
//
// A file holds a magic string, a second, independent hash of that key (so that a collision of
// the first one, which names the file, is caught), the lowered name, the CUBIN and a checksum of
// both. A file that does not check out in every part is ignored (and overwritten by the caller).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ops/gpu/rtc/compile.h"

namespace weft::gpu::rtc {

// 64-bit FNV-1a of `data`, continuing from `hash`.
uint64_t Fnv1a(std::string_view data, uint64_t hash = 0xcbf29ce484222325ull);

// The file a key is kept in, under `dir`.
std::string CachePath(const std::string& dir, std::string_view key);

enum class CacheRead { kHit, kMissing, kRejected };

// Reads the CUBIN stored for `key` into *cubin. kMissing when there is no file, kRejected when
// there is one but it is not a complete, valid entry for this key.
CacheRead ReadCachedCubin(const std::string& dir, std::string_view key, Cubin* cubin);

// Writes the entry atomically (a temporary file renamed into place). Returns false, never
// throws, when it cannot: a cache that cannot be written only costs compile time.
bool WriteCachedCubin(const std::string& dir, std::string_view key, const Cubin& cubin);

}  // namespace weft::gpu::rtc

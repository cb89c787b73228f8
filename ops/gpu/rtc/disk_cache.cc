#include "ops/gpu/rtc/disk_cache.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/file.h"

namespace weft::gpu::rtc {
namespace {

constexpr char kMagic[8] = {'W', 'E', 'F', 'T', 'R', 'T', 'C', '1'};
constexpr uint64_t kSecondSeed = 0x84222325cbf29ce4ull;  // any basis other than FNV's own

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Reads fields front to back; any read past the end marks the whole parse as failed.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint64_t U64() {
    if (!Has(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string Bytes(uint64_t n) {
    if (!Has(n)) return "";
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  bool Has(uint64_t n) {
    ok_ = ok_ && n <= data_.size() - pos_;
    return ok_;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

uint64_t Checksum(const Cubin& cubin) { return Fnv1a(cubin.image, Fnv1a(cubin.lowered_name)); }

}  // namespace

uint64_t Fnv1a(std::string_view data, uint64_t hash) {
  for (const char c : data) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string CachePath(const std::string& dir, std::string_view key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.cubin", static_cast<unsigned long long>(Fnv1a(key)));
  return dir + "/" + name;
}

CacheRead ReadCachedCubin(const std::string& dir, std::string_view key, Cubin* cubin) {
  std::ifstream in(CachePath(dir, key), std::ios::binary);
  if (!in) return CacheRead::kMissing;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || data.size() < sizeof(kMagic) ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return CacheRead::kRejected;
  }
  Reader r(std::string_view(data).substr(sizeof(kMagic)));
  const uint64_t key_hash = r.U64();
  Cubin read;
  read.lowered_name = r.Bytes(r.U64());
  read.image = r.Bytes(r.U64());
  const uint64_t checksum = r.U64();
  if (!r.ok() || !r.at_end() || key_hash != Fnv1a(key, kSecondSeed) || checksum != Checksum(read) ||
      read.lowered_name.empty() || read.image.empty()) {
    return CacheRead::kRejected;
  }
  *cubin = std::move(read);
  return CacheRead::kHit;
}

bool WriteCachedCubin(const std::string& dir, std::string_view key, const Cubin& cubin) {
  std::string data(kMagic, sizeof(kMagic));
  PutU64(data, Fnv1a(key, kSecondSeed));
  PutU64(data, cubin.lowered_name.size());
  data += cubin.lowered_name;
  PutU64(data, cubin.image.size());
  data += cubin.image;
  PutU64(data, Checksum(cubin));
  try {
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    WriteFileAtomically(CachePath(dir, key), data);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace weft::gpu::rtc

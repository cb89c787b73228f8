#include "weft/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"

namespace weft {

bool IsGzip(std::span<const unsigned char> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

namespace {

// One inflate stream, ended however the decoding ends.
class Inflater {
 public:
  explicit Inflater(const std::string& file) : file_(file) {
    // 16 + MAX_WBITS: a gzip wrapper (header and CRC-32 trailer), the largest window.
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)
      WEFT_THROW("gzip: cannot start decompressing '" << file << "': " << Reason());
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Decompresses one gzip member from `in` onto `out`; returns the bytes of `in` it used.
  size_t Member(std::span<const unsigned char> in, std::vector<unsigned char>* out) {
    if (inflateReset(&z_) != Z_OK) WEFT_THROW("gzip: '" << file_ << "': " << Reason());
    z_.next_in = const_cast<unsigned char*>(in.data());
    z_.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), std::numeric_limits<uInt>::max()));
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      const size_t used = out->size();
      out->resize(used + std::max<size_t>(used, 1 << 16));
      z_.next_out = out->data() + used;
      z_.avail_out = static_cast<uInt>(std::min<size_t>(out->size() - used, 1u << 30));
      rc = inflate(&z_, Z_NO_FLUSH);
      out->resize(out->size() - z_.avail_out);
      if (rc == Z_BUF_ERROR && z_.avail_in == 0) {
        WEFT_THROW("gzip: '" << file_ << "' is truncated: its compressed stream ends after "
                             << in.size() << " bytes, before the end of its data");
      }
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        WEFT_THROW("gzip: '" << file_ << "' is corrupt at compressed byte " << z_.total_in << ": "
                             << Reason());
      }
    }
    return static_cast<size_t>(z_.next_in - in.data());
  }

 private:
  std::string Reason() const { return z_.msg != nullptr ? z_.msg : "no reason given by zlib"; }

  const std::string& file_;
  z_stream z_{};
};

}  // namespace

std::vector<unsigned char> Gunzip(std::span<const unsigned char> bytes, const std::string& file) {
  std::vector<unsigned char> out;
  Inflater inflater(file);
  size_t at = 0;
  do {
    if (!IsGzip(bytes.subspan(at))) {
      WEFT_THROW("gzip: '" << file << "': expected another gzip member (1f 8b) or the end of the "
                           << "file at byte " << at << ", found " << bytes.size() - at
                           << " other bytes");
    }
    at += inflater.Member(bytes.subspan(at), &out);
  } while (at < bytes.size());
  return out;
}

}  // namespace weft

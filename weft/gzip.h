// gzip files as shipped (Debian's dataset-fashion-mnist, MNIST's own site): the readers of
// weft/data_iter.h take a file compressed or not, and look at its first two bytes to tell.
//
//   std::vector<unsigned char> bytes = ReadFileBytes(path);
//   if (IsGzip(bytes)) bytes = Gunzip(bytes, path);  // throws weft::Error naming `path`
#pragma once

#include <span>
#include <string>
#include <vector>

namespace weft {

// True when `bytes` begin with gzip's magic number (1f 8b).
bool IsGzip(std::span<const unsigned char> bytes);

// The decompressed contents of a whole gzip file: every member, one after the other, as gunzip
// writes them. A truncated stream, a corrupt one (a bad header, bad data, a checksum that does not
// match) or bytes after the last member that are not another member throw weft::Error naming
// `file` and zlib's reason.
std::vector<unsigned char> Gunzip(std::span<const unsigned char> bytes, const std::string& file);

}  // namespace weft

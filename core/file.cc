#include "core/file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace weft {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)),
      temp_(path_ + ".tmp"),
      out_(temp_, std::ios::binary | std::ios::trunc) {
  if (!out_)
    WEFT_THROW("cannot create '" << temp_ << "' (to write '" << path_
                                 << "'): " << std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::remove(temp_.c_str());
  }
}

void AtomicFile::Commit() {
  out_.close();
  if (!out_)
    WEFT_THROW("writing '" << temp_ << "' (for '" << path_
                           << "') failed: " << std::strerror(errno));
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    WEFT_THROW("cannot rename '" << temp_ << "' to '" << path_ << "': " << std::strerror(errno));
  }
  committed_ = true;
}

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  AtomicFile file(path);
  file.stream() << contents;
  file.Commit();
}

std::optional<std::string> OpenForReading(const std::string& path, std::ifstream& in) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return std::string(std::strerror(errno));
  if (S_ISDIR(info.st_mode)) return std::string("is a directory, expected a file");
  in.open(path, std::ios::binary);
  if (!in) return std::string(std::strerror(errno));
  return std::nullopt;
}

}  // namespace weft

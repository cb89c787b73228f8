#include "core/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace weft {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_(path_ + ".tmp"), out_(temp_, std::ios::binary | std::ios::trunc) {
  if (!out_) WEFT_THROW("cannot create '" << temp_ << "' (to write '" << path_ << "'): " << std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::remove(temp_.c_str());
  }
}

void AtomicFile::Commit() {
  out_.close();
  if (!out_) WEFT_THROW("writing '" << temp_ << "' (for '" << path_ << "') failed: " << std::strerror(errno));
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

}  // namespace weft

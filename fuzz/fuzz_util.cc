// What the fuzz targets share: temporary files and reporting a finding.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/targets.h"

namespace weft::fuzz {
namespace {

// $TMPDIR, else /dev/shm: a file rewritten thousands of times a second stays in memory (on a disk
// each truncation can cost a discard, twenty times the run itself), else /tmp.
std::string TempDir() {
  const char* dir = std::getenv("TMPDIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

}  // namespace

void Fail(const std::string& what) {
  std::fprintf(stderr, "weft fuzz finding: %s\n", what.c_str());
  std::abort();
}

TempFile::TempFile(const std::string& tag)
    : path_(TempDir() + "/weft-fuzz-" + std::to_string(getpid()) + "-" + tag) {}

TempFile::~TempFile() { std::remove(path_.c_str()); }

void TempFile::Write(const uint8_t* data, size_t size) const {
  FILE* f = std::fopen(path_.c_str(), "wb");
  if (f == nullptr) Fail("cannot create " + path_);
  const bool ok = (size == 0 || std::fwrite(data, 1, size, f) == size) & (std::fclose(f) == 0);
  if (!ok) Fail("cannot write " + path_);
}

}  // namespace weft::fuzz

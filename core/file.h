// Writing files so that a failure never leaves a half-written one: the data goes to
// "<path>.tmp", which is renamed over <path> only when complete, and removed otherwise.
//
//   AtomicFile file(path);                  // throws weft::Error if it cannot be created
//   file.stream() << ...;
//   file.Commit();                           // renames into place; throws on failure
//   WriteFileAtomically(path, json_text);    // the same in one call
//
// Reading: OpenForReading says why a path cannot be read, a directory included (a stream on a
// directory opens on Linux, and then every read fails).
#pragma once

#include <fstream>
#include <optional>
#include <string>

namespace weft {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ofstream& stream() { return out_; }
  const std::string& temp_path() const { return temp_; }
  // Flushes, checks every write succeeded, and renames the file into place.
  void Commit();

 private:
  std::string path_, temp_;
  std::ofstream out_;
  bool committed_ = false;
};

void WriteFileAtomically(const std::string& path, const std::string& contents);

// Opens `path` for binary reading into `in`. Returns why it cannot be read ("is a directory", or
// the system's reason), or nullopt when `in` is open.
std::optional<std::string> OpenForReading(const std::string& path, std::ifstream& in);

}  // namespace weft

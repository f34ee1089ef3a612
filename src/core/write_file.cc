#include "core/write_file.h"

#include <cerrno>
#include <cstdio>
#include <system_error>

namespace icecache {

Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return IoError(path + ": cannot create: " + std::generic_category().message(errno));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_errno = errno;
  if (std::fclose(f) != 0 || written != bytes.size()) {
    return IoError(path + ": write failed: " + std::generic_category().message(write_errno));
  }
  return Status::Ok();
}

}  // namespace icecache

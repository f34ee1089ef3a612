#include "core/write_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <system_error>

namespace icecache {

namespace {

std::string Reason(int err) { return std::generic_category().message(err); }

// WriteAll, then close `fd`: the first errno of the two, or 0.
int WriteAllAndClose(int fd, std::span<const uint8_t> bytes) {
  int err = WriteAll(fd, bytes);
  if (close(fd) != 0 && err == 0) err = errno;
  return err;
}

// For a path that exists but is no regular file (a link, a device, a pipe): written through, as
// a plain open would, since renaming over it would replace the link or the device node.
Status WriteInPlace(const std::string& path, std::span<const uint8_t> bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return IoError(path + ": cannot open: " + Reason(errno));
  const int err = WriteAllAndClose(fd, bytes);
  if (err != 0) return IoError(path + ": write failed: " + Reason(err));
  return Status::Ok();
}

}  // namespace

Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return WriteInPlace(path, bytes);
  // The new contents go to a file of a fresh name in the same folder (a rename is atomic within
  // one file system), created as a plain create would be (mode 0666 less the umask).
  static std::atomic<uint64_t> serial{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
    tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(serial.fetch_add(1));
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return IoError(path + ": cannot create: " + Reason(errno));
  int err = WriteAllAndClose(fd, bytes);
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    unlink(tmp.c_str());
    return IoError(path + ": write failed: " + Reason(err));
  }
  return Status::Ok();
}

int WriteAll(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return n == 0 ? EIO : errno;
    }
  }
  return 0;
}

Status WriteFileText(const std::string& path, std::string_view text) {
  return WriteFileBytes(
      path, {reinterpret_cast<const uint8_t*>(text.data()), static_cast<size_t>(text.size())});
}

}  // namespace icecache

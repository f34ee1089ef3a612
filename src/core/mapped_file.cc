#include "core/mapped_file.h"

#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace icecache {

namespace {

std::string SystemError(int err) { return std::generic_category().message(err); }

Status OpenError(const std::string& path, const char* what, int err) {
  std::string msg = path + ": " + what + ": " + SystemError(err);
  if (err == ENOENT) return NotFound(std::move(msg));
  return IoError(std::move(msg));
}

// Closes a descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return OpenError(path, "cannot open", errno);

  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return OpenError(path, "cannot stat", errno);
  if (S_ISDIR(st.st_mode)) return InvalidArgument(path + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": is not a regular file");

  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    // mmap refuses a zero length; an empty file is a valid (empty) mapping.
    return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) return OpenError(path, "cannot memory-map", errno);
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace icecache

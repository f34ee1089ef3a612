// Writing a whole file from memory, with errors that name the path and the system's reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "icecache/status.h"

namespace icecache {

// Writes `bytes` as the whole contents of `path`, replacing it at once: the bytes go to a new
// file beside it, which is renamed over `path` only when completely written. So a failure (a
// full disk, a bad folder) leaves any earlier `path` as it was, and a reader never sees half a
// file. A `path` that exists but is no regular file (a symbolic link, a device, a pipe) is
// written through instead, as a plain open would. IoError names `path` and the system's reason.
Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes);
Status WriteFileText(const std::string& path, std::string_view text);

// Writes all of `bytes` to the open file descriptor `fd`, retrying short and interrupted writes.
// Returns 0, or the errno of the write that failed (EIO for one that wrote nothing).
int WriteAll(int fd, std::span<const uint8_t> bytes);

}  // namespace icecache

// Writing a whole file from memory, with errors that name the path and the system's reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "icecache/status.h"

namespace icecache {

// Creates or truncates `path` and writes `bytes` to it. IoError when the file cannot be created
// or written (a short write or a failed close count as failures).
Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace icecache

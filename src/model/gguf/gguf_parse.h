// Internal: the bounds-checked GGUF parser behind GgufFile (gguf_file.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "icecache/status.h"
#include "model/gguf/gguf_file.h"

namespace icecache {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kGgufDefaultAlignment = 32;
constexpr int kGgufMaxDims = 4;

struct ParsedGguf {
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorInfo> tensors;  // data pointers point into the parsed bytes
};

// Parses and validates a whole GGUF file held in `bytes`; errors start with "<name>: ".
Result<ParsedGguf> ParseGguf(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace icecache

// Element types of tensors, including the block-quantized GGUF formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace icecache {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kQ8_0,  // blocks of 32: f16 scale + 32 x int8
  kQ4_0,  // blocks of 32: f16 scale + 16 bytes of 4-bit values (offset 8)
  kQ4_1,  // blocks of 32: f16 scale, f16 min + 16 bytes of 4-bit values
  kQ4_K,  // super-blocks of 256, 144 bytes
  kQ5_K,  // super-blocks of 256, 176 bytes
  kQ6_K,  // super-blocks of 256, 210 bytes
};

// Number of elements in one block (1 for plain types).
int64_t BlockElems(DType t);
// Bytes of one block (the element size for plain types).
int64_t BlockBytes(DType t);
bool IsQuantized(DType t);
// Bytes of a row of `n` elements. REQUIRES: n % BlockElems(t) == 0.
inline int64_t RowBytes(DType t, int64_t n) { return n / BlockElems(t) * BlockBytes(t); }
std::string_view DTypeName(DType t);
// Parses a DTypeName() string ("f32", "q4_k", ...). Returns false if unknown.
bool ParseDType(std::string_view name, DType* out);

}  // namespace icecache

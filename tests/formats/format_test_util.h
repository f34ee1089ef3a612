// Helpers for the format tests: file I/O and a raw GGUF byte builder that can write files the
// GgufWriter never would (bad versions, counts, offsets) to exercise the reader's checks.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "icecache/status.h"

namespace icecache::testing {

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

template <typename T>
std::vector<T> ReadArray(const std::string& path) {
  const std::vector<uint8_t> b = ReadBytes(path);
  std::vector<T> out(b.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

// Little-endian byte appender.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(b_.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& U8(uint8_t v) { return Put(v); }
  Bytes& U32(uint32_t v) { return Put(v); }
  Bytes& U64(uint64_t v) { return Put(v); }
  Bytes& Str(const std::string& s) {
    U64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Append(const std::vector<uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& PadTo(size_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }
  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

// One tensor directory entry, written as is.
struct RawTensor {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order
  uint32_t ggml_type = 0;    // F32
  uint64_t offset = 0;
};

// A GGUF file: header, `kv` (already encoded, `n_kv` entries), the tensor directory, padding to
// `alignment`, then `data_bytes` zero bytes of data.
struct RawGguf {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  uint64_t n_kv = 0;
  Bytes kv;
  std::vector<RawTensor> tensors;
  uint64_t alignment = 32;
  uint64_t data_bytes = 0;

  std::vector<uint8_t> Build() const {
    Bytes b;
    b.U32(magic).U32(version).U64(tensors.size()).U64(n_kv).Append(kv.bytes());
    for (const RawTensor& t : tensors) {
      b.Str(t.name).U32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) b.U64(d);
      b.U32(t.ggml_type).U64(t.offset);
    }
    b.PadTo(alignment).Zeros(data_bytes);
    return b.bytes();
  }
};

// Asserts that `status` failed and that its message contains every one of `parts`.
inline void ExpectErrorMentions(const Status& status, const std::vector<std::string>& parts) {
  ASSERT_FALSE(status.ok()) << "expected an error mentioning " << parts.front();
  for (const std::string& p : parts) {
    EXPECT_NE(status.message().find(p), std::string::npos)
        << "message \"" << status.message() << "\" does not mention \"" << p << "\"";
  }
}

}  // namespace icecache::testing

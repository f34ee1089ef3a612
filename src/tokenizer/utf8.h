// UTF-8 helpers shared by the tokenizer: decoding one code point, lossy repair of invalid input
// (the way Rust's String::from_utf8_lossy does it, which is what Hugging Face decoders use), and
// GPT-2's byte <-> printable character table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace icecache::tok {

// Length of the valid UTF-8 sequence that starts at s[i], or 0 if the bytes there are not a
// complete valid sequence (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF or
// truncated). When 0, *maximal_invalid (if non-null) receives the length of the maximal
// subpart that must be replaced by one U+FFFD (1..3), and *truncated whether the sequence is only
// cut short by the end of `s` (it could still become valid when more bytes arrive).
size_t ValidSequenceLength(std::string_view s, size_t i, size_t* maximal_invalid = nullptr,
                           bool* truncated = nullptr);

// Decodes the valid sequence at s[i] of length `len` (from ValidSequenceLength).
uint32_t DecodeAt(std::string_view s, size_t i, size_t len);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(uint32_t cp, std::string& out);

// Length of the character starting at the lead byte `c` of valid UTF-8 (1 for other bytes).
inline size_t CharLength(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// `s` with every invalid sequence replaced by U+FFFD (one per maximal invalid subpart).
std::string ToValidUtf8(std::string_view s);
bool IsValidUtf8(std::string_view s);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;  // the code point of each byte, UTF-8 encoded
  std::array<int16_t, 512> cp_to_byte;        // code point (< 512) -> byte, or -1
};
const ByteLevelTable& GetByteLevelTable();

// Appends the byte-level form of `bytes` (each byte replaced by its code point).
void AppendByteLevel(std::string_view bytes, std::string& out);
// Maps a byte-level string back to bytes. Returns false (leaving `out` untouched) if some
// character is not in the alphabet.
bool ByteLevelToBytes(std::string_view text, std::string& out);

}  // namespace icecache::tok

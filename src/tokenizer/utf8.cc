#include "tokenizer/utf8.h"

namespace icecache::tok {

size_t ValidSequenceLength(std::string_view s, size_t i, size_t* maximal_invalid, bool* truncated) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (truncated) *truncated = false;
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2, hi = 0x9F;
  } else if (c == 0xF0) {
    need = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    if (maximal_invalid) *maximal_invalid = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      if (maximal_invalid) *maximal_invalid = k;
      if (truncated) *truncated = true;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      if (maximal_invalid) *maximal_invalid = k;
      return 0;
    }
  }
  return need + 1;
}

uint32_t DecodeAt(std::string_view s, size_t i, size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + i);
  switch (len) {
    case 1:
      return p[0];
    case 2:
      return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3:
      return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
  }
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    const size_t n = ValidSequenceLength(s, i, &bad);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += bad;
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = ValidSequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {

ByteLevelTable BuildByteLevelTable() {
  // Printable bytes keep their code point; the others are moved to 256, 257, ... in byte order.
  ByteLevelTable t;
  t.cp_to_byte.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    AppendUtf8(cp, t.byte_to_utf8[b]);
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

}  // namespace

const ByteLevelTable& GetByteLevelTable() {
  static const ByteLevelTable table = BuildByteLevelTable();
  return table;
}

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const auto& t = GetByteLevelTable();
  for (char c : bytes) out.append(t.byte_to_utf8[static_cast<unsigned char>(c)]);
}

bool ByteLevelToBytes(std::string_view text, std::string& out) {
  const auto& t = GetByteLevelTable();
  std::string bytes;
  bytes.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = ValidSequenceLength(text, i);
    if (n == 0) return false;
    const uint32_t cp = DecodeAt(text, i, n);
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return false;
    bytes.push_back(static_cast<char>(t.cp_to_byte[cp]));
    i += n;
  }
  out.append(bytes);
  return true;
}

}  // namespace icecache::tok

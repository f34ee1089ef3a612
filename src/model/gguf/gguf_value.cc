// GgufValue: one metadata value of a GGUF file, and the names of GGUF value types.
#include <charconv>
#include <cstdio>
#include <limits>
#include <string>

#include "core/check.h"
#include "model/gguf/gguf_file.h"

namespace icecache {

namespace {

bool IsIntType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool IsFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// Integers are held as int64_t; a uint64 above INT64_MAX is held as its bit pattern.
bool FitsInt64(GgufType t, int64_t v) { return t != GgufType::kUint64 || v >= 0; }

double IntToDouble(GgufType t, int64_t v) {
  if (t == GgufType::kUint64) return static_cast<double>(static_cast<uint64_t>(v));
  return static_cast<double>(v);
}

std::string IntToString(GgufType t, int64_t v) {
  if (t == GgufType::kBool) return v != 0 ? "true" : "false";
  if (t == GgufType::kUint64) return std::to_string(static_cast<uint64_t>(v));
  return std::to_string(v);
}

std::string FloatToString(GgufType t, double v) {
  char buf[64];
  std::to_chars_result r = t == GgufType::kFloat32
                               ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v))
                               : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Control characters become escapes so that a value prints on one line.
void AppendEscaped(std::string* out, const std::string& s, size_t max_chars) {
  size_t n = 0;
  for (char c : s) {
    if (n >= max_chars) {
      *out += "...";
      return;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c == '\r') {
      *out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      *out += buf;
    } else {
      *out += c;
    }
    ++n;
  }
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

size_t GgufValue::array_size() const {
  if (!is_array()) return 1;
  if (array_type_ == GgufType::kString) return as_.size();
  if (IsFloatType(array_type_)) return af_.size();
  return ai_.size();
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (!IsIntType(type_) || !FitsInt64(type_, i_)) return std::nullopt;
  return i_;
}

std::optional<double> GgufValue::AsFloat() const {
  if (IsFloatType(type_)) return f_;
  if (IsIntType(type_) && type_ != GgufType::kBool) return IntToDouble(type_, i_);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return i_ != 0;
}

const std::string* GgufValue::AsString() const {
  return type_ == GgufType::kString ? &s_ : nullptr;
}

const std::vector<std::string>* GgufValue::AsStringArray() const {
  return is_array() && array_type_ == GgufType::kString ? &as_ : nullptr;
}

std::optional<std::vector<int64_t>> GgufValue::AsIntArray() const {
  if (!is_array() || !IsIntType(array_type_)) return std::nullopt;
  for (int64_t v : ai_) {
    if (!FitsInt64(array_type_, v)) return std::nullopt;
  }
  return ai_;
}

std::optional<std::vector<float>> GgufValue::AsFloatArray() const {
  if (!is_array()) return std::nullopt;
  std::vector<float> out;
  if (IsFloatType(array_type_)) {
    out.reserve(af_.size());
    for (double v : af_) out.push_back(static_cast<float>(v));
  } else if (IsIntType(array_type_) && array_type_ != GgufType::kBool) {
    out.reserve(ai_.size());
    for (int64_t v : ai_) out.push_back(static_cast<float>(IntToDouble(array_type_, v)));
  } else {
    return std::nullopt;
  }
  return out;
}

std::string GgufValue::ToDisplayString(size_t max_chars) const {
  if (!is_array()) {
    if (type_ == GgufType::kString) {
      std::string out;
      AppendEscaped(&out, s_, max_chars);
      return out;
    }
    if (IsFloatType(type_)) return FloatToString(type_, f_);
    return IntToString(type_, i_);
  }
  std::string out = "[";
  out += GgufTypeName(array_type_);
  out += " x " + std::to_string(array_size()) + "]";
  const size_t n = array_size();
  for (size_t i = 0; i < n; ++i) {
    if (out.size() >= max_chars) {
      out += " ...";
      break;
    }
    out += i == 0 ? " " : ", ";
    if (array_type_ == GgufType::kString) {
      out += '"';
      AppendEscaped(&out, as_[i], max_chars);
      out += '"';
    } else if (IsFloatType(array_type_)) {
      out += FloatToString(array_type_, af_[i]);
    } else {
      out += IntToString(array_type_, ai_[i]);
    }
  }
  return out;
}

GgufValue GgufValue::Int(GgufType t, int64_t v) {
  ICECACHE_CHECK(IsIntType(t));
  GgufValue g;
  g.type_ = g.array_type_ = t;
  g.i_ = t == GgufType::kBool ? (v != 0) : v;
  return g;
}

GgufValue GgufValue::Float(GgufType t, double v) {
  ICECACHE_CHECK(IsFloatType(t));
  GgufValue g;
  g.type_ = g.array_type_ = t;
  g.f_ = t == GgufType::kFloat32 ? static_cast<double>(static_cast<float>(v)) : v;
  return g;
}

GgufValue GgufValue::Bool(bool v) { return Int(GgufType::kBool, v ? 1 : 0); }

GgufValue GgufValue::String(std::string v) {
  GgufValue g;
  g.type_ = g.array_type_ = GgufType::kString;
  g.s_ = std::move(v);
  return g;
}

GgufValue GgufValue::StringArray(std::vector<std::string> v) {
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.array_type_ = GgufType::kString;
  g.as_ = std::move(v);
  return g;
}

GgufValue GgufValue::IntArray(GgufType elem, std::vector<int64_t> v) {
  ICECACHE_CHECK(IsIntType(elem));
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.array_type_ = elem;
  g.ai_ = std::move(v);
  if (elem == GgufType::kBool) {
    for (int64_t& x : g.ai_) x = x != 0;
  }
  return g;
}

GgufValue GgufValue::FloatArray(GgufType elem, std::vector<double> v) {
  ICECACHE_CHECK(IsFloatType(elem));
  GgufValue g;
  g.type_ = GgufType::kArray;
  g.array_type_ = elem;
  g.af_ = std::move(v);
  if (elem == GgufType::kFloat32) {
    for (double& x : g.af_) x = static_cast<float>(x);
  }
  return g;
}

}  // namespace icecache

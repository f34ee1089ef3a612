#include "model/gguf/gguf_parse.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace icecache {

namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string NeString(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

bool IsValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Smallest encoding of one value of type `t` (a string is at least its 8-byte length).
uint64_t MinValueBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kString:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kArray:
      return 4 + 8;  // element type and count
  }
  return 1;
}

// Minimal encodings, used to refuse impossible counts before looping over them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, value type, a 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name, n_dims, one dim, type, offset

std::string SupportedTypeList() {
  return "F32, F16, BF16, I32, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K";
}

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& name) : b_(bytes), name_(name) {}

  Result<ParsedGguf> Run() {
    ICECACHE_RETURN_IF_ERROR(ReadHeader());
    for (uint64_t i = 0; i < n_kv_; ++i) ICECACHE_RETURN_IF_ERROR(ReadKv(i));
    ICECACHE_RETURN_IF_ERROR(ReadAlignment());
    for (uint64_t i = 0; i < n_tensors_; ++i) ICECACHE_RETURN_IF_ERROR(ReadTensorInfo(i));
    ICECACHE_RETURN_IF_ERROR(PlaceTensorData());
    return std::move(out_);
  }

 private:
  Status Error(const std::string& msg) const { return Corrupt(name_ + ": " + msg); }

  uint64_t Remaining() const { return b_.size() - pos_; }

  template <typename WhatFn>
  Status Truncated(uint64_t need, WhatFn&& what) const {
    return Error("file ends inside " + what() + " (at offset " + std::to_string(pos_) + ", needs " +
                 std::to_string(need) + " bytes, " + std::to_string(Remaining()) +
                 " remain; file size " + std::to_string(b_.size()) + ")");
  }

  // REQUIRES: Remaining() >= sizeof(T).
  template <typename T>
  T Take() {
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  template <typename T, typename WhatFn>
  Status Read(T* out, WhatFn&& what) {
    if (Remaining() < sizeof(T)) return Truncated(sizeof(T), what);
    *out = Take<T>();
    return Status::Ok();
  }

  template <typename WhatFn>
  Status ReadString(std::string* out, WhatFn&& what) {
    uint64_t len = 0;
    if (Remaining() < 8) return Truncated(8, [&] { return "the length of " + what(); });
    len = Take<uint64_t>();
    if (len > Remaining()) {
      return Error("string length " + std::to_string(len) + " of " + what() + " at offset " +
                   std::to_string(pos_ - 8) + " runs past the end of the file (" +
                   std::to_string(Remaining()) + " bytes remain)");
    }
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::Ok();
  }

  Status ReadHeader() {
    if (b_.size() < 4) {
      return Error("too small to be a GGUF file (" + std::to_string(b_.size()) + " bytes)");
    }
    const uint32_t magic = Take<uint32_t>();
    if (magic != kGgufMagic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        const char c = static_cast<char>(b_[i]);
        shown += (c >= 0x20 && c < 0x7f) ? c : '.';
      }
      return Error("not a GGUF file (magic '" + shown + "', expected 'GGUF')");
    }
    ICECACHE_RETURN_IF_ERROR(Read(&out_.version, [] { return std::string("the version"); }));
    const uint32_t v = out_.version;
    if (v == 1) {
      return Unsupported(name_ +
                         ": GGUF version 1 is not supported (only versions 2 and 3); convert "
                         "the model again with a current llama.cpp");
    }
    if (v != 2 && v != 3) {
      const uint32_t swapped = __builtin_bswap32(v);
      if (swapped >= 1 && swapped <= 3) {
        return Unsupported(name_ + ": big-endian GGUF files are not supported (version field " +
                           std::to_string(v) + " is " + std::to_string(swapped) + " byte-swapped)");
      }
      return Unsupported(name_ + ": GGUF version " + std::to_string(v) +
                         " is not supported (only versions 2 and 3)");
    }
    // Versions 2 and 3 share one layout: 64-bit counts and lengths (version 1 had 32-bit ones).
    ICECACHE_RETURN_IF_ERROR(Read(&n_tensors_, [] { return std::string("the tensor count"); }));
    ICECACHE_RETURN_IF_ERROR(Read(&n_kv_, [] { return std::string("the metadata count"); }));
    if (n_kv_ > Remaining() / kMinKvBytes) {
      return Error("metadata count " + std::to_string(n_kv_) + " is impossible: the " +
                   std::to_string(Remaining()) + " bytes after the header hold at most " +
                   std::to_string(Remaining() / kMinKvBytes) + " entries");
    }
    if (n_tensors_ > Remaining() / kMinTensorInfoBytes) {
      return Error("tensor count " + std::to_string(n_tensors_) + " is impossible: the " +
                   std::to_string(Remaining()) + " bytes after the header hold at most " +
                   std::to_string(Remaining() / kMinTensorInfoBytes) + " tensor entries");
    }
    return Status::Ok();
  }

  Status ReadKv(uint64_t index) {
    std::string key;
    ICECACHE_RETURN_IF_ERROR(
        ReadString(&key, [&] { return "the key of metadata entry " + std::to_string(index); }));
    auto what = [&] { return "the value of metadata " + Quote(key); };
    uint32_t type = 0;
    ICECACHE_RETURN_IF_ERROR(Read(&type, [&] { return "the type of metadata " + Quote(key); }));
    if (!IsValidType(type)) {
      return Error("metadata " + Quote(key) + " has unknown value type " + std::to_string(type));
    }
    GgufValue value;
    ICECACHE_RETURN_IF_ERROR(ReadValue(static_cast<GgufType>(type), key, what, &value));
    if (!seen_keys_.emplace(key, index).second) {
      return Error("duplicate metadata key " + Quote(key) + " (entries " +
                   std::to_string(seen_keys_[key]) + " and " + std::to_string(index) + ")");
    }
    out_.metadata.emplace_back(std::move(key), std::move(value));
    return Status::Ok();
  }

  // Reads one integer element of type `t`. REQUIRES: enough bytes remain.
  int64_t TakeInt(GgufType t) {
    switch (t) {
      case GgufType::kUint8:
        return Take<uint8_t>();
      case GgufType::kInt8:
        return Take<int8_t>();
      case GgufType::kUint16:
        return Take<uint16_t>();
      case GgufType::kInt16:
        return Take<int16_t>();
      case GgufType::kUint32:
        return Take<uint32_t>();
      case GgufType::kInt32:
        return Take<int32_t>();
      case GgufType::kUint64:
        return static_cast<int64_t>(Take<uint64_t>());  // bit pattern, see GgufValue
      case GgufType::kInt64:
        return Take<int64_t>();
      case GgufType::kBool:
        return Take<uint8_t>() != 0;
      default:
        return 0;
    }
  }

  double TakeFloat(GgufType t) {
    return t == GgufType::kFloat32 ? static_cast<double>(Take<float>()) : Take<double>();
  }

  template <typename WhatFn>
  Status ReadValue(GgufType type, const std::string& key, WhatFn&& what, GgufValue* out) {
    switch (type) {
      case GgufType::kString: {
        std::string s;
        ICECACHE_RETURN_IF_ERROR(ReadString(&s, what));
        *out = GgufValue::String(std::move(s));
        return Status::Ok();
      }
      case GgufType::kFloat32:
      case GgufType::kFloat64:
        if (Remaining() < MinValueBytes(type)) return Truncated(MinValueBytes(type), what);
        *out = GgufValue::Float(type, TakeFloat(type));
        return Status::Ok();
      case GgufType::kArray:
        return ReadArray(key, out);
      default:
        if (Remaining() < MinValueBytes(type)) return Truncated(MinValueBytes(type), what);
        *out = GgufValue::Int(type, TakeInt(type));
        return Status::Ok();
    }
  }

  Status ReadArray(const std::string& key, GgufValue* out) {
    uint32_t elem_raw = 0;
    ICECACHE_RETURN_IF_ERROR(
        Read(&elem_raw, [&] { return "the element type of array " + Quote(key); }));
    if (!IsValidType(elem_raw)) {
      return Error("array " + Quote(key) + " has unknown element type " + std::to_string(elem_raw));
    }
    const auto elem = static_cast<GgufType>(elem_raw);
    if (elem == GgufType::kArray) {
      return Unsupported(name_ + ": array " + Quote(key) +
                         " holds arrays; nested arrays are not supported");
    }
    uint64_t count = 0;
    ICECACHE_RETURN_IF_ERROR(Read(&count, [&] { return "the length of array " + Quote(key); }));
    // Refuse counts the rest of the file cannot hold before allocating anything for them.
    const uint64_t max_count = Remaining() / MinValueBytes(elem);
    if (count > max_count) {
      return Error("array " + Quote(key) + " claims " + std::to_string(count) + " " +
                   GgufTypeName(elem) + " elements, but the " + std::to_string(Remaining()) +
                   " remaining bytes of the file hold at most " + std::to_string(max_count));
    }
    const auto n = static_cast<size_t>(count);
    if (elem == GgufType::kString) {
      std::vector<std::string> v(n);
      for (size_t i = 0; i < n; ++i) {
        ICECACHE_RETURN_IF_ERROR(ReadString(
            &v[i], [&] { return "element " + std::to_string(i) + " of array " + Quote(key); }));
      }
      *out = GgufValue::StringArray(std::move(v));
    } else if (elem == GgufType::kFloat32 || elem == GgufType::kFloat64) {
      std::vector<double> v(n);  // the size check above guarantees the bytes are there
      for (size_t i = 0; i < n; ++i) v[i] = TakeFloat(elem);
      *out = GgufValue::FloatArray(elem, std::move(v));
    } else {
      std::vector<int64_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = TakeInt(elem);
      *out = GgufValue::IntArray(elem, std::move(v));
    }
    return Status::Ok();
  }

  Status ReadAlignment() {
    auto it = seen_keys_.find("general.alignment");
    if (it == seen_keys_.end()) return Status::Ok();
    const GgufValue& v = out_.metadata[it->second].second;
    const std::optional<int64_t> a = v.AsInt();
    if (!a || v.type() == GgufType::kBool) {
      return Error("general.alignment has type " + std::string(GgufTypeName(v.type())) +
                   ", expected an unsigned integer");
    }
    if (*a <= 0 || (*a & (*a - 1)) != 0) {
      return Error("general.alignment is " + std::to_string(*a) + "; it must be a power of two");
    }
    out_.alignment = static_cast<uint64_t>(*a);
    return Status::Ok();
  }

  Status ReadTensorInfo(uint64_t index) {
    GgufTensorInfo t;
    ICECACHE_RETURN_IF_ERROR(
        ReadString(&t.name, [&] { return "the name of tensor " + std::to_string(index); }));
    const std::string tn = "tensor " + Quote(t.name);
    auto what = [&] { return "the directory entry of " + tn; };
    uint32_t n_dims = 0;
    ICECACHE_RETURN_IF_ERROR(Read(&n_dims, what));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return Error(tn + " has n_dims " + std::to_string(n_dims) + "; it must be 1 to " +
                   std::to_string(kGgufMaxDims));
    }
    std::vector<uint64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) ICECACHE_RETURN_IF_ERROR(Read(&ne[d], what));
    ICECACHE_RETURN_IF_ERROR(Read(&t.ggml_type, what));
    ICECACHE_RETURN_IF_ERROR(Read(&t.offset, what));

    if (auto prev = seen_tensors_.find(t.name); prev != seen_tensors_.end()) {
      return Error("duplicate tensor name " + Quote(t.name) + " (tensors " +
                   std::to_string(prev->second) + " and " + std::to_string(index) + ")");
    }
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (ne[d] == 0) {
        return Error(tn + " has dimension " + std::to_string(d) +
                     " of size 0 (ne = " + NeString(ne) + ")");
      }
      if (__builtin_mul_overflow(numel, ne[d], &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(tn + ": the element count of ne = " + NeString(ne) + " overflows");
      }
    }
    if (!DTypeFromGgml(t.ggml_type, &t.dtype)) {
      return Unsupported(name_ + ": " + tn + " has type " + GgmlTypeName(t.ggml_type) +
                         " (ggml type " + std::to_string(t.ggml_type) +
                         "), which is not supported (supported: " + SupportedTypeList() + ")");
    }
    const auto block = static_cast<uint64_t>(BlockElems(t.dtype));
    if (ne[0] % block != 0) {
      return Error(tn + ": innermost dimension " + std::to_string(ne[0]) +
                   " is not a multiple of the " + GgmlTypeName(t.ggml_type) + " block size " +
                   std::to_string(block));
    }
    // numel <= INT64_MAX, but a plain type takes up to 4 bytes per element, so the byte count
    // can still overflow (and wrap to a small number that would pass the bounds checks).
    uint64_t row_bytes;
    if (__builtin_mul_overflow(ne[0] / block, static_cast<uint64_t>(BlockBytes(t.dtype)),
                               &row_bytes) ||
        __builtin_mul_overflow(row_bytes, numel / ne[0], &t.nbytes) ||
        t.nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(tn + ": the byte size of ne = " + NeString(ne) + " overflows");
    }
    t.ne.assign(ne.begin(), ne.end());
    t.data = nullptr;
    seen_tensors_.emplace(t.name, index);
    out_.tensors.push_back(std::move(t));
    return Status::Ok();
  }

  std::string Range(uint64_t data_start, const GgufTensorInfo& t) const {
    uint64_t abs;
    std::string where = __builtin_add_overflow(data_start, t.offset, &abs)
                            ? "data section + " + std::to_string(t.offset)
                            : std::to_string(abs);
    return "[offset " + where + ", " + std::to_string(t.nbytes) + " bytes]";
  }

  Status PlaceTensorData() {
    const uint64_t header_end = pos_;
    const uint64_t a = out_.alignment;
    uint64_t data_start;
    if (__builtin_add_overflow(header_end, a - 1, &data_start)) {
      return Error("general.alignment " + std::to_string(a) + " is too large");
    }
    data_start -= data_start % a;
    const uint64_t size = b_.size();
    for (GgufTensorInfo& t : out_.tensors) {
      const std::string tn = "tensor " + Quote(t.name);
      if (t.offset % a != 0) {
        return Error(tn + ": data offset " + std::to_string(t.offset) +
                     " is not a multiple of the alignment " + std::to_string(a));
      }
      if (data_start > size || t.offset > size - data_start ||
          t.nbytes > size - data_start - t.offset) {
        return Error(tn + ": data " + Range(data_start, t) +
                     " ends past the end of the file (size " + std::to_string(size) + ")");
      }
      t.data = b_.data() + data_start + t.offset;
    }
    std::vector<const GgufTensorInfo*> order;
    order.reserve(out_.tensors.size());
    for (const GgufTensorInfo& t : out_.tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GgufTensorInfo* x, const GgufTensorInfo* y) {
      return x->offset < y->offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& p = *order[i - 1];
      const GgufTensorInfo& q = *order[i];
      if (p.offset + p.nbytes > q.offset) {  // both are inside the file: no overflow
        return Error("tensors " + Quote(p.name) + " " + Range(data_start, p) + " and " +
                     Quote(q.name) + " " + Range(data_start, q) + " overlap");
      }
    }
    return Status::Ok();
  }

  std::span<const uint8_t> b_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  ParsedGguf out_;
  std::unordered_map<std::string, uint64_t> seen_keys_;     // key -> entry index
  std::unordered_map<std::string, uint64_t> seen_tensors_;  // name -> tensor index
};

}  // namespace

Result<ParsedGguf> ParseGguf(std::span<const uint8_t> bytes, const std::string& name) {
  return Parser(bytes, name).Run();
}

}  // namespace icecache

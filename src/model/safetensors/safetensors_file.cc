// safetensors reader. Layout: u64 little-endian header length N, N bytes of JSON (an object
// mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" object of strings), then the data section; offsets are relative to its start.
#include "model/safetensors/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "model/safetensors/safetensors_dtype.h"

namespace icecache {

namespace {

using nlohmann::json;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

struct Entry {
  SafetensorsTensorInfo info;
  uint64_t begin;
  uint64_t end;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& name, const uint8_t* data, uint64_t data_size)
      : name_(name), data_(data), data_size_(data_size) {}

  Status Error(const std::string& msg) const { return Corrupt(name_ + ": " + msg); }

  Status ParseMetadata(const json& j, std::map<std::string, std::string>* out) const {
    if (!j.is_object()) return Error("__metadata__ is not a JSON object");
    for (const auto& [k, v] : j.items()) {
      if (!v.is_string()) return Error("__metadata__ value " + Quote(k) + " is not a string");
      (*out)[k] = v.get<std::string>();
    }
    return Status::Ok();
  }

  Status ParseTensor(const std::string& name, const json& j, Entry* e) const {
    const std::string tn = "tensor " + Quote(name);
    if (!j.is_object()) return Error(tn + ": header entry is not a JSON object");
    auto dtype_it = j.find("dtype");
    if (dtype_it == j.end() || !dtype_it->is_string()) {
      return Error(tn + ": missing or non-string \"dtype\"");
    }
    const std::string dtype_name = dtype_it->get<std::string>();
    if (!SafetensorsDTypeFromName(dtype_name, &e->info.dtype)) {
      return Unsupported(name_ + ": " + tn + " has dtype " + dtype_name +
                         "; only F32, F16 and BF16 are supported");
    }
    auto shape_it = j.find("shape");
    if (shape_it == j.end() || !shape_it->is_array()) {
      return Error(tn + ": missing or non-array \"shape\"");
    }
    if (shape_it->size() > static_cast<size_t>(Tensor::kMaxDims)) {
      return Unsupported(name_ + ": " + tn + " has " + std::to_string(shape_it->size()) +
                         " dimensions; at most " + std::to_string(Tensor::kMaxDims) +
                         " are supported");
    }
    const uint64_t elem = static_cast<uint64_t>(BlockBytes(e->info.dtype));
    uint64_t numel = 1;
    for (const json& d : *shape_it) {
      if (!d.is_number_unsigned()) {
        return Error(tn + ": shape " + shape_it->dump() +
                     " holds a value that is not a "
                     "non-negative integer");
      }
      const auto v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, v, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(tn + ": the element count of shape " + shape_it->dump() + " overflows");
      }
      // A row of any dimension is sized in bytes (Tensor::row_bytes), even in a tensor without
      // elements ([0, 2^62], say).
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / elem) {
        return Error(tn + ": dimension " + std::to_string(v) + " of shape " + shape_it->dump() +
                     " is too large: its bytes overflow");
      }
      e->info.shape.push_back(static_cast<int64_t>(v));
    }
    auto off_it = j.find("data_offsets");
    if (off_it == j.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned()) {
      return Error(tn + ": \"data_offsets\" must be two non-negative integers [begin, end]");
    }
    e->begin = (*off_it)[0].get<uint64_t>();
    e->end = (*off_it)[1].get<uint64_t>();
    const std::string range =
        "data_offsets [" + std::to_string(e->begin) + ", " + std::to_string(e->end) + "]";
    if (e->end < e->begin) return Error(tn + ": " + range + " end before they begin");
    if (e->end > data_size_) {
      return Error(tn + ": " + range + " run past the end of the data section (" +
                   std::to_string(data_size_) + " bytes)");
    }
    uint64_t need;
    const bool overflow = __builtin_mul_overflow(numel, elem, &need);
    if (overflow || need != e->end - e->begin) {
      return Error(tn + ": " + range + " hold " + std::to_string(e->end - e->begin) +
                   " bytes, but shape " + ShapeString(e->info.shape) + " of " + dtype_name +
                   " needs " + (overflow ? "more than 2^64" : std::to_string(need)) + " bytes");
    }
    e->info.name = name;
    e->info.nbytes = need;
    e->info.data = data_ + e->begin;
    return Status::Ok();
  }

 private:
  const std::string& name_;
  const uint8_t* data_;
  uint64_t data_size_;
};

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ICECACHE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> st, Parse(file->bytes(), path));
  st->file_ = std::move(file);
  return st;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::span<const uint8_t> bytes,
                                                                const std::string& name) {
  if (bytes.size() < 8) {
    return Corrupt(name + ": too small to be a safetensors file (" + std::to_string(bytes.size()) +
                   " bytes; the header length alone takes 8)");
  }
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) {
    return Corrupt(name + ": header length " + std::to_string(header_len) +
                   " runs past the end of the file (size " + std::to_string(bytes.size()) + ")");
  }
  const uint8_t* header = bytes.data() + 8;
  const uint8_t* data = header + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;

  json j;
  try {
    j = json::parse(header, header + header_len);
  } catch (const json::exception& e) {
    return Corrupt(name + ": header is not valid JSON: " + e.what());
  }
  if (!j.is_object()) return Corrupt(name + ": header is not a JSON object");

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  HeaderParser parser(name, data, data_size);
  std::vector<Entry> entries;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      ICECACHE_RETURN_IF_ERROR(parser.ParseMetadata(value, &f->metadata_));
      continue;
    }
    Entry e;
    ICECACHE_RETURN_IF_ERROR(parser.ParseTensor(key, value, &e));
    entries.push_back(std::move(e));
  }

  // File order; tensors that hold no bytes cannot overlap anything.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.info.name < b.info.name;
  });
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && prev->end > e.begin) {
      return Corrupt(name + ": tensors " + Quote(prev->info.name) + " [" +
                     std::to_string(prev->begin) + ", " + std::to_string(prev->end) + ") and " +
                     Quote(e.info.name) + " [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + ") overlap");
    }
    prev = &e;
  }
  for (Entry& e : entries) {
    f->index_[e.info.name] = f->tensors_.size();
    f->tensors_.push_back(std::move(e.info));
  }
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::TensorView(const SafetensorsTensorInfo& info) const {
  // The mapping is read-only; Tensor has no const view, so writes through it would fault.
  return Tensor(const_cast<uint8_t*>(info.data), info.dtype, info.shape, Device::kCpu, file_);
}

}  // namespace icecache

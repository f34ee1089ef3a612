// libFuzzer target for the GGUF reader: parse, touch every metadata value and every tensor's
// bytes, check the reader's promises (data inside the input, no overlaps), then write the parsed
// file back with GgufWriter and check that it parses to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/quant.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"

namespace {

using namespace icecache;

volatile uint64_t g_sink;  // keeps reads from being optimized away

#define FUZZ_ASSERT(cond)          \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void TouchValue(const GgufFile& f, const std::string& key, const GgufValue& v) {
  uint64_t acc = v.ToDisplayString().size() + v.ToDisplayString(5).size() + v.array_size();
  if (auto i = v.AsInt()) acc += static_cast<uint64_t>(*i);
  if (auto d = v.AsFloat()) acc += static_cast<uint64_t>(*d != *d);
  if (auto b = v.AsBool()) acc += *b;
  if (const std::string* s = v.AsString()) acc += s->size();
  if (const auto* sa = v.AsStringArray()) {
    for (const std::string& s : *sa) acc += s.size();
  }
  if (auto ia = v.AsIntArray()) acc += ia->size();
  if (auto fa = v.AsFloatArray()) acc += fa->size();
  FUZZ_ASSERT(f.Find(key) == &v);
  acc += f.GetString(key).ok() + f.GetInt(key).ok() + f.GetFloat(key).ok();
  acc += f.GetBool(key, false).ok() + f.GetInt(key, 0).ok() + f.GetFloat(key, 0.0).ok();
  g_sink = g_sink + acc;
}

void TouchTensor(const GgufFile& f, std::span<const uint8_t> input, const GgufTensorInfo& t) {
  FUZZ_ASSERT(f.FindTensor(t.name) == &t);
  FUZZ_ASSERT(t.data >= input.data() && t.nbytes <= input.size() &&
              static_cast<size_t>(t.data - input.data()) <= input.size() - t.nbytes);
  FUZZ_ASSERT((t.data - input.data()) % static_cast<ptrdiff_t>(f.alignment()) == 0);
  const Tensor view = f.TensorView(t);
  FUZZ_ASSERT(view.nbytes() == static_cast<int64_t>(t.nbytes));
  uint64_t acc = 0;
  for (uint64_t i = 0; i < t.nbytes; ++i) acc += t.data[i];
  if (t.dtype != DType::kI32) {
    std::vector<float> row(static_cast<size_t>(view.cols()));
    for (int64_t r = 0; r < view.rows(); ++r) {
      DequantizeRow(t.dtype, view.row(r), row.data(), view.cols());
      for (float x : row) acc += static_cast<uint64_t>(x != x);
    }
  }
  g_sink = g_sink + acc;
}

void CheckNoOverlap(const GgufFile& f) {
  const auto& ts = f.tensors();
  for (size_t i = 0; i < ts.size() && i < 64; ++i) {
    for (size_t j = i + 1; j < ts.size() && j < 64; ++j) {
      FUZZ_ASSERT(ts[i].data + ts[i].nbytes <= ts[j].data ||
                  ts[j].data + ts[j].nbytes <= ts[i].data);
    }
  }
}

// Writes what was parsed with GgufWriter and parses it again: same metadata, same tensors.
void CheckRewrite(const GgufFile& f) {
  GgufWriter w(f.alignment());
  for (const auto& [key, value] : f.metadata()) w.Add(key, value);
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::vector<int64_t> shape = t.Shape();
    w.AddTensor(t.name, t.dtype, shape, t.data);
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  auto again = GgufFile::Parse(bytes, "rewrite.gguf");
  FUZZ_ASSERT(again.ok());
  const GgufFile& g = **again;
  FUZZ_ASSERT(g.metadata().size() == f.metadata().size());
  FUZZ_ASSERT(g.tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    FUZZ_ASSERT(g.metadata()[i].first == f.metadata()[i].first);
    FUZZ_ASSERT(g.metadata()[i].second.ToDisplayString(1 << 20) ==
                f.metadata()[i].second.ToDisplayString(1 << 20));
  }
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& a = f.tensors()[i];
    const GgufTensorInfo& b = g.tensors()[i];
    FUZZ_ASSERT(a.name == b.name && a.dtype == b.dtype && a.ne == b.ne && a.nbytes == b.nbytes);
    FUZZ_ASSERT(std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto r = GgufFile::Parse(input, "fuzz.gguf");
  if (!r.ok()) {
    FUZZ_ASSERT(!r.status().message().empty());
    return 0;
  }
  const GgufFile& f = **r;
  FUZZ_ASSERT(f.version() == 2 || f.version() == 3);
  for (const auto& [key, value] : f.metadata()) TouchValue(f, key, value);
  for (const GgufTensorInfo& t : f.tensors()) TouchTensor(f, input, t);
  CheckNoOverlap(f);
  // The writer pads to the alignment even with no tensors; a file that parses with a huge one
  // (and no tensors) is valid but would make the rewrite allocate that much.
  if (f.alignment() <= 4096) CheckRewrite(f);
  return 0;
}

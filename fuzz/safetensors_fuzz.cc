// libFuzzer target for the safetensors reader: parse, touch metadata and every tensor's bytes,
// check that data lies inside the input without overlaps, and check a writer round trip.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/quant.h"
#include "model/safetensors/safetensors_file.h"

namespace {

using namespace icecache;

volatile uint64_t g_sink;

#define FUZZ_ASSERT(cond)          \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void TouchTensor(const SafetensorsFile& f, std::span<const uint8_t> input,
                 const SafetensorsTensorInfo& t) {
  FUZZ_ASSERT(f.FindTensor(t.name) == &t);
  FUZZ_ASSERT(t.data >= input.data() && t.nbytes <= input.size() &&
              static_cast<size_t>(t.data - input.data()) <= input.size() - t.nbytes);
  const Tensor view = f.TensorView(t);
  FUZZ_ASSERT(view.nbytes() == static_cast<int64_t>(t.nbytes));
  uint64_t acc = t.name.size();
  for (uint64_t i = 0; i < t.nbytes; ++i) acc += t.data[i];
  // A tensor without elements may still have huge dimensions ([0, 2^40] or [2^40, 0]): its rows
  // and columns are not read.
  if (view.numel() > 0) {
    std::vector<float> row(static_cast<size_t>(view.cols()));
    for (int64_t r = 0; r < view.rows(); ++r) {
      DequantizeRow(t.dtype, view.row(r), row.data(), view.cols());
      for (float x : row) acc += static_cast<uint64_t>(x != x);
    }
  }
  g_sink = g_sink + acc;
}

void CheckNoOverlap(const SafetensorsFile& f) {
  const auto& ts = f.tensors();
  for (size_t i = 0; i < ts.size() && i < 64; ++i) {
    for (size_t j = i + 1; j < ts.size() && j < 64; ++j) {
      if (ts[i].nbytes == 0 || ts[j].nbytes == 0) continue;
      FUZZ_ASSERT(ts[i].data + ts[i].nbytes <= ts[j].data ||
                  ts[j].data + ts[j].nbytes <= ts[i].data);
    }
  }
}

void CheckRewrite(const SafetensorsFile& f) {
  SafetensorsWriter w;
  for (const auto& [k, v] : f.metadata()) w.AddMetadata(k, v);
  for (const SafetensorsTensorInfo& t : f.tensors()) w.AddTensor(t.name, t.dtype, t.shape, t.data);
  const std::vector<uint8_t> bytes = w.Serialize();
  auto again = SafetensorsFile::Parse(bytes, "rewrite.safetensors");
  FUZZ_ASSERT(again.ok());
  FUZZ_ASSERT((*again)->metadata() == f.metadata());
  FUZZ_ASSERT((*again)->tensors().size() == f.tensors().size());
  for (const SafetensorsTensorInfo& t : f.tensors()) {
    const SafetensorsTensorInfo* u = (*again)->FindTensor(t.name);
    FUZZ_ASSERT(u != nullptr && u->dtype == t.dtype && u->shape == t.shape &&
                u->nbytes == t.nbytes && std::memcmp(u->data, t.data, t.nbytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  auto r = SafetensorsFile::Parse(input, "fuzz.safetensors");
  if (!r.ok()) {
    FUZZ_ASSERT(!r.status().message().empty());
    return 0;
  }
  const SafetensorsFile& f = **r;
  uint64_t acc = 0;
  for (const auto& [k, v] : f.metadata()) acc += k.size() + v.size();
  g_sink = g_sink + acc;
  for (const SafetensorsTensorInfo& t : f.tensors()) TouchTensor(f, input, t);
  CheckNoOverlap(f);
  CheckRewrite(f);
  return 0;
}

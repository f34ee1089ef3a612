// Writes seed inputs for the fuzz targets: small valid GGUF and safetensors files covering every
// metadata type, every tensor type, custom alignment and GGUF version 2.
// Usage: make_fuzz_seeds OUT_DIR   (writes OUT_DIR/gguf/* and OUT_DIR/safetensors/*)
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/half.h"
#include "model/gguf/gguf_writer.h"
#include "model/safetensors/safetensors_file.h"

namespace {

using namespace icecache;

bool Write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  return v;
}

GgufWriter TinyModel(uint64_t alignment) {
  GgufWriter w(alignment);
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 1);
  w.AddF32("llama.rope.freq_base", 10000.0f);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.Add("i8", GgufValue::Int(GgufType::kInt8, -1));
  w.Add("u16", GgufValue::Int(GgufType::kUint16, 7));
  w.Add("i16", GgufValue::Int(GgufType::kInt16, -7));
  w.Add("i32", GgufValue::Int(GgufType::kInt32, -70));
  w.Add("u64", GgufValue::Int(GgufType::kUint64, 1 << 20));
  w.Add("i64", GgufValue::Int(GgufType::kInt64, -(1 << 20)));
  w.Add("f64", GgufValue::Float(GgufType::kFloat64, 0.125));
  w.Add("u8", GgufValue::Int(GgufType::kUint8, 1));
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"<s>", "</s>", "a", "b"}));
  w.Add("tokenizer.ggml.scores", GgufValue::FloatArray(GgufType::kFloat32, {0, 0, -1, -2}));
  w.Add("tokenizer.ggml.token_type", GgufValue::IntArray(GgufType::kInt32, {3, 3, 1, 1}));
  w.Add("bools", GgufValue::IntArray(GgufType::kBool, {1, 0}));
  const std::vector<float> data = Ramp(2 * 256);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    w.AddTensorF32("t." + std::string(DTypeName(t)), t, std::vector<int64_t>{2, 256}, data.data());
  }
  w.AddTensorF32("norm", DType::kF32, std::vector<int64_t>{8}, data.data());
  w.AddTensorF32("t3d", DType::kF32, std::vector<int64_t>{2, 2, 4}, data.data());
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path out = argv[1];
  fs::create_directories(out / "gguf");
  fs::create_directories(out / "safetensors");
  bool ok = true;

  ok &= Write(out / "gguf" / "tiny_model.gguf", TinyModel(32).Serialize());
  ok &= Write(out / "gguf" / "align1.gguf", TinyModel(1).Serialize());
  std::vector<uint8_t> v2 = TinyModel(64).Serialize();
  v2[4] = 2;  // version 2 has the same layout
  ok &= Write(out / "gguf" / "v2_align64.gguf", v2);
  ok &= Write(out / "gguf" / "empty.gguf", GgufWriter().Serialize());
  GgufWriter one;
  const std::vector<float> q = Ramp(32);
  one.AddTensorF32("q", DType::kQ8_0, std::vector<int64_t>{32}, q.data());
  ok &= Write(out / "gguf" / "one_q8_0.gguf", one.Serialize());

  SafetensorsWriter st;
  const std::vector<float> f = Ramp(12);
  std::vector<uint16_t> h(8), b(8);
  for (int i = 0; i < 8; ++i) {
    h[i] = F32ToF16(f[i]);
    b[i] = F32ToBf16(f[i]);
  }
  st.AddTensor("model.embed_tokens.weight", DType::kF32, std::vector<int64_t>{3, 4}, f.data());
  st.AddTensor("model.norm.weight", DType::kF16, std::vector<int64_t>{8}, h.data());
  st.AddTensor("lm_head.weight", DType::kBF16, std::vector<int64_t>{2, 2, 2}, b.data());
  st.AddTensor("scalar", DType::kF32, std::vector<int64_t>{}, f.data());
  st.AddTensor("empty", DType::kF32, std::vector<int64_t>{0, 3}, nullptr);
  st.AddMetadata("format", "pt");
  ok &= Write(out / "safetensors" / "small.safetensors", st.Serialize());
  ok &= Write(out / "safetensors" / "empty.safetensors", SafetensorsWriter().Serialize());
  // Tensors without elements whose other dimensions are huge (valid files).
  SafetensorsWriter zero;
  zero.AddTensor("wide", DType::kF32, std::vector<int64_t>{0, int64_t{1} << 40}, nullptr);
  zero.AddTensor("tall", DType::kBF16, std::vector<int64_t>{int64_t{1} << 40, 0}, nullptr);
  ok &= Write(out / "safetensors" / "zero_elements.safetensors", zero.Serialize());

  if (!ok) {
    std::fprintf(stderr, "make_fuzz_seeds: cannot write under %s\n", out.c_str());
    return 1;
  }
  return 0;
}

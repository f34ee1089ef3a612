#include "model/synthetic.h"

#include <cmath>

#include "model/arch/arch.h"

namespace icecache {

namespace {

// A tokenizer with a vocabulary size and nothing else: ids decode to "" (speed runs only).
class SyntheticTokenizer final : public Tokenizer {
 public:
  explicit SyntheticTokenizer(int32_t vocab) : vocab_(vocab) {}
  std::vector<int32_t> Encode(std::string_view, bool, bool) const override { return {}; }
  std::string Decode(std::span<const int32_t>, bool) const override { return {}; }
  std::string TokenBytes(int32_t, int32_t) const override { return {}; }
  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  int32_t vocab_size() const override { return vocab_; }
  std::string_view TokenText(int32_t) const override { return {}; }
  bool IsSpecial(int32_t) const override { return false; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  bool adds_bos() const override { return false; }
  std::vector<int32_t> StopTokenIds() const override { return {}; }
  int32_t FindToken(std::string_view) const override { return -1; }

 private:
  int32_t vocab_;
};

struct Preset {
  const char* name;
  const ArchSpec& (*arch)();
  int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_context;
  float rope_theta, norm_eps;
  bool tied;
  float llama3_factor;  // 0: no rope scaling
};

// Shapes from the models' config.json files.
const Preset kPresets[] = {
    {"llama-3.1-8b", LlamaArch, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 1e-5f,
     false, 8.0f},
    {"llama-3.2-3b", LlamaArch, 28, 3072, 24, 8, 128, 8192, 128256, 131072, 500000.0f, 1e-5f, true,
     32.0f},
    {"qwen2.5-7b", Qwen2Arch, 28, 3584, 28, 4, 128, 18944, 152064, 32768, 1000000.0f, 1e-6f, false,
     0.0f},
    {"smollm2-135m", LlamaArch, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, 1e-5f, true, 0.0f},
    {"tiny", LlamaArch, 2, 256, 4, 2, 64, 512, 1024, 4096, 10000.0f, 1e-5f, false, 0.0f},
};

}  // namespace

std::string SyntheticPresetList() {
  std::string s;
  for (const Preset& p : kPresets) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

Result<ModelConfig> SyntheticConfig(const std::string& preset) {
  for (const Preset& p : kPresets) {
    if (preset != p.name) continue;
    ModelConfig c;
    c.arch = &p.arch();
    c.name = "synthetic " + preset;
    c.n_layers = p.layers;
    c.hidden = p.hidden;
    c.n_heads = p.heads;
    c.n_kv_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.ffn = p.ffn;
    c.vocab = p.vocab;
    c.max_context = p.max_context;
    c.rope_theta = p.rope_theta;
    c.norm_eps = p.norm_eps;
    c.tie_embeddings = p.tied;
    if (p.llama3_factor > 0.0f) {
      c.rope_scaling.type = RopeScaling::Type::kLlama3;
      c.rope_scaling.factor = p.llama3_factor;
      c.rope_scaling.low_freq_factor = 1.0f;
      c.rope_scaling.high_freq_factor = 4.0f;
      c.rope_scaling.original_max_position = 8192;
    }
    return c;
  }
  return InvalidArgument("unknown synthetic model '" + preset +
                         "' (expected one of: " + SyntheticPresetList() + ")");
}

Result<std::unique_ptr<LoadedModel>> MakeSyntheticModel(const std::string& preset, Backend& backend,
                                                        uint64_t seed) {
  ICECACHE_ASSIGN_OR_RETURN(ModelConfig c, SyntheticConfig(preset));
  auto m = std::make_unique<LoadedModel>();
  m->config = c;
  m->path = "synthetic:" + preset;
  m->format = "synthetic";
  m->tokenizer = std::make_unique<SyntheticTokenizer>(c.vocab);
  m->chat_template_note = "a synthetic model has no tokenizer or chat template";
  uint64_t next_seed = seed * 1000003u;
  // Matrices: uniform with the standard deviation of Hugging Face's init (0.02).
  const float matrix_scale = 0.02f * std::sqrt(3.0f);
  // Fills an allocated tensor (possibly a block of a larger one) with the next seed.
  auto fill = [&](const std::string& name, const Tensor& t, float scale, float offset = 0.0f) {
    backend.FillRandom(t, ++next_seed, scale, offset);
    m->tensors.push_back(
        {name, t.dtype(), std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.nbytes()});
  };
  auto make = [&](const std::string& name, std::initializer_list<int64_t> shape, float scale,
                  float offset, Tensor* out) -> Status {
    const DType dtype = shape.size() == 1 ? DType::kF32 : DType::kBF16;
    ICECACHE_ASSIGN_OR_RETURN(*out, backend.Allocate(dtype, shape));
    fill(name, *out, scale, offset);
    return Status::Ok();
  };
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn, v = c.vocab;
  ModelWeights& w = m->weights;
  ICECACHE_RETURN_IF_ERROR(make("token_embd", {v, h}, matrix_scale, 0.0f, &w.tok_embd));
  ICECACHE_RETURN_IF_ERROR(make("output_norm", {h}, 0.0f, 1.0f, &w.output_norm));
  if (c.tie_embeddings) {
    w.output = w.tok_embd;
  } else {
    ICECACHE_RETURN_IF_ERROR(make("output", {v, h}, matrix_scale, 0.0f, &w.output));
  }
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    ICECACHE_RETURN_IF_ERROR(make(p + "attn_norm", {h}, 0.0f, 1.0f, &l.attn_norm));
    // q/k/v and gate/up lie one after another (a backend may read each set as one matrix,
    // Backend::PrepareStacked); every matrix still gets its own seed.
    ICECACHE_ASSIGN_OR_RETURN(Tensor qkv, backend.Allocate(DType::kBF16, {q + 2 * kv, h}));
    l.wq = qkv.Slice(0, q);
    l.wk = qkv.Slice(q, q + kv);
    l.wv = qkv.Slice(q + kv, q + 2 * kv);
    fill(p + "attn_q", l.wq, matrix_scale);
    fill(p + "attn_k", l.wk, matrix_scale);
    fill(p + "attn_v", l.wv, matrix_scale);
    ICECACHE_RETURN_IF_ERROR(make(p + "attn_output", {h, q}, matrix_scale, 0.0f, &l.wo));
    if (c.arch->qkv_bias) {
      ICECACHE_RETURN_IF_ERROR(make(p + "attn_q.bias", {q}, matrix_scale, 0.0f, &l.bq));
      ICECACHE_RETURN_IF_ERROR(make(p + "attn_k.bias", {kv}, matrix_scale, 0.0f, &l.bk));
      ICECACHE_RETURN_IF_ERROR(make(p + "attn_v.bias", {kv}, matrix_scale, 0.0f, &l.bv));
    }
    ICECACHE_RETURN_IF_ERROR(make(p + "ffn_norm", {h}, 0.0f, 1.0f, &l.ffn_norm));
    ICECACHE_ASSIGN_OR_RETURN(Tensor gate_up, backend.Allocate(DType::kBF16, {2 * f, h}));
    l.w_gate = gate_up.Slice(0, f);
    l.w_up = gate_up.Slice(f, 2 * f);
    fill(p + "ffn_gate", l.w_gate, matrix_scale);
    fill(p + "ffn_up", l.w_up, matrix_scale);
    ICECACHE_RETURN_IF_ERROR(make(p + "ffn_down", {h, f}, matrix_scale, 0.0f, &l.w_down));
  }
  backend.Synchronize();
  ICECACHE_RETURN_IF_ERROR(ValidateWeights(c, w));
  return m;
}

}  // namespace icecache

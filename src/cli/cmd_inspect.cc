// icecache inspect: what a model file holds (architecture, dimensions, KV cost, tensors).
#include <cstdio>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/stats_json.h"
#include "model/arch/arch.h"
#include "model/loader.h"

namespace icecache::cli {

namespace {

struct InspectArgs {
  std::string model = "default";
  std::string positional;
  bool json = false;
  bool metadata = false;
  int max_tensors = 40;
};

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int Run(const InspectArgs& a) {
  auto path = ResolveModelPath(a.positional.empty() ? a.model : a.positional);
  if (!path.ok()) return ReportError(path.status());
  auto loaded = LoadModel(*path);
  if (!loaded.ok()) return ReportError(loaded.status());
  const LoadedModel& m = **loaded;
  const ModelConfig& c = m.config;
  const int64_t kv_f32 = c.KvBytesPerToken(DType::kF32);
  const int64_t kv_bf16 = c.KvBytesPerToken(DType::kBF16);
  int64_t weight_bytes = 0;
  std::map<std::string, int> dtype_count;
  for (const TensorEntry& t : m.tensors) {
    weight_bytes += t.bytes;
    ++dtype_count[std::string(DTypeName(t.dtype))];
  }
  if (a.json) {
    nlohmann::json j;
    j["path"] = m.path;
    j["format"] = m.format;
    j["name"] = c.name;
    j["arch"] = std::string(c.arch->name);
    j["layers"] = c.n_layers;
    j["hidden"] = c.hidden;
    j["heads"] = c.n_heads;
    j["kv_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim;
    j["ffn"] = c.ffn;
    j["vocab"] = c.vocab;
    j["context_length"] = c.max_context;
    j["rope_theta"] = c.rope_theta;
    j["norm_eps"] = c.norm_eps;
    j["tied_embeddings"] = c.tie_embeddings;
    j["kv_bytes_per_token_f32"] = kv_f32;
    j["kv_bytes_per_token_bf16"] = kv_bf16;
    j["weight_bytes"] = weight_bytes;
    j["chat_template"] = m.chat_template.has_value();
    j["tokenizer_vocab"] = m.tokenizer->vocab_size();
    nlohmann::json tensors = nlohmann::json::array();
    for (const TensorEntry& t : m.tensors) {
      tensors.push_back({{"name", t.name},
                         {"dtype", std::string(DTypeName(t.dtype))},
                         {"shape", t.shape},
                         {"bytes", t.bytes}});
    }
    j["tensors"] = tensors;
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : m.metadata) meta[k] = v;
    j["metadata"] = meta;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::string dtypes;
  for (const auto& [name, n] : dtype_count)
    dtypes += fmt::format("{}{} x{}", dtypes.empty() ? "" : ", ", name, n);
  std::printf("%s",
              fmt::format("model         {}\n"
                          "file          {} ({})\n"
                          "architecture  {}\n"
                          "layers        {}\n"
                          "hidden        {}\n"
                          "heads         {} query, {} KV (head dim {})\n"
                          "ffn           {}\n"
                          "vocab         {} (tokenizer: {} tokens)\n"
                          "context       {} (RoPE theta {})\n"
                          "tied output   {}\n"
                          "chat template {}\n"
                          "weights       {} in {} tensors ({})\n"
                          "KV per token  {} at f32, {} at bf16 ({} B f32 x 1K tokens = {})\n",
                          c.name, m.path, m.format, c.arch->name, c.n_layers, c.hidden, c.n_heads,
                          c.n_kv_heads, c.head_dim, c.ffn, c.vocab, m.tokenizer->vocab_size(),
                          c.max_context, c.rope_theta, c.tie_embeddings ? "yes" : "no",
                          m.chat_template ? "yes" : "no (" + m.chat_template_note + ")",
                          HumanBytes(weight_bytes), m.tensors.size(), dtypes, HumanBytes(kv_f32),
                          HumanBytes(kv_bf16), kv_f32, HumanBytes(kv_f32 * 1024))
                  .c_str());
  if (a.metadata) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : m.metadata) std::printf("  %-45s %s\n", k.c_str(), v.c_str());
  }
  std::printf("\ntensors:\n  %-40s %-6s %-16s %s\n", "name", "type", "shape", "bytes");
  int shown = 0;
  for (const TensorEntry& t : m.tensors) {
    if (a.max_tensors > 0 && shown++ >= a.max_tensors) {
      std::printf("  ... %zu more (--all-tensors)\n", m.tensors.size() - a.max_tensors);
      break;
    }
    std::printf("  %-40s %-6s %-16s %s\n", t.name.c_str(), std::string(DTypeName(t.dtype)).c_str(),
                ShapeStr(t.shape).c_str(), HumanBytes(t.bytes).c_str());
  }
  return 0;
}

}  // namespace

Command AddInspectCommand(CLI::App& root) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* app = root.add_subcommand("inspect", "Show a model's architecture, sizes and tensors");
  app->add_option("model_path", args->positional, "model (same as -m)");
  app->add_option("-m,--model", args->model, "GGUF file, model folder, or 'default'");
  app->add_flag("--json", args->json, "print everything as JSON");
  app->add_flag("--metadata", args->metadata, "also print all metadata keys");
  app->add_flag(
      "--all-tensors", [args](int64_t) { args->max_tensors = 0; }, "list every tensor");
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli

#include "cli/stats_json.h"

#include <fmt/format.h>

namespace icecache::cli {

nlohmann::json StatsToJson(const GenerateStats& s) {
  return {
      {"prompt_tokens", s.prompt_tokens},
      {"cached_tokens", s.cached_tokens},
      {"generated_tokens", s.generated_tokens},
      {"prefill_seconds", s.prefill_seconds},
      {"decode_seconds", s.decode_seconds},
      {"prefill_tokens_per_second", s.prefill_tokens_per_second},
      {"decode_tokens_per_second", s.decode_tokens_per_second},
      {"kv_bytes", s.kv_bytes},
      {"kv_bytes_per_token", s.kv_bytes_per_token},
      {"peak_rss_bytes", s.peak_rss_bytes},
      {"finish_reason", s.finish_reason},
  };
}

nlohmann::json ModelInfoToJson(const ModelInfo& i) {
  return {
      {"name", i.name},
      {"arch", i.arch},
      {"format", i.format},
      {"path", i.path},
      {"layers", i.n_layers},
      {"hidden", i.hidden},
      {"heads", i.n_heads},
      {"kv_heads", i.n_kv_heads},
      {"head_dim", i.head_dim},
      {"ffn", i.ffn},
      {"vocab", i.vocab},
      {"trained_context", i.trained_context},
      {"context_size", i.context_size},
      {"kv_bytes_per_token", i.kv_bytes_per_token},
      {"weight_bytes", i.weight_bytes},
      {"backend", i.backend},
  };
}

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string StatsLine(const GenerateStats& s) {
  return fmt::format(
      "prefill {} tokens ({} cached) at {:.1f} tok/s | decode {} tokens at {:.1f} tok/s | "
      "KV {} ({} per token) | peak RSS {} | finish: {}",
      s.prompt_tokens, s.cached_tokens, s.prefill_tokens_per_second, s.generated_tokens,
      s.decode_tokens_per_second, HumanBytes(s.kv_bytes), HumanBytes(s.kv_bytes_per_token),
      HumanBytes(s.peak_rss_bytes), s.finish_reason);
}

}  // namespace icecache::cli

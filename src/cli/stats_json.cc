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
      {"device_peak_bytes", s.device_peak_bytes},
      {"finish_reason", s.finish_reason},
      {"kv", KvStatsToJson(s.kv)},
  };
}

nlohmann::json KvStatsToJson(const KvStats& s) {
  return {
      {"policy", s.policy},
      {"decode_steps", s.decode_steps},
      {"sparse_layers", s.sparse_layers},
      {"dense_layers", s.dense_layers},
      {"tokens_attended", s.tokens_attended},
      {"tokens_attended_dense", s.tokens_attended_dense},
      {"context_tokens", s.context_tokens},
      {"nodes_visited", s.nodes_visited},
      {"pages_fetched", s.pages_fetched},
      {"pages_prefetched", s.pages_prefetched},
      {"pages_deferred", s.pages_deferred},
      {"prefetch_steps", s.prefetch_steps},
      {"prefetch_probe_on_seconds", s.prefetch_probe_on_seconds},
      {"prefetch_probe_off_seconds", s.prefetch_probe_off_seconds},
      {"bytes_fetched", s.bytes_fetched},
      {"hit_rate", s.hit_rate},
      {"select_seconds", s.select_seconds},
      {"fetch_seconds", s.fetch_seconds},
      {"attend_seconds", s.attend_seconds},
      {"update_seconds", s.update_seconds},
      {"update_beside_seconds", s.update_beside_seconds},
      {"prepare_seconds", s.prepare_seconds},
      {"other_seconds", s.other_seconds},
      {"prompt_index_seconds", s.prompt_index_seconds},
      {"host_kv_bytes", s.host_kv_bytes},
      {"kv_offloaded", s.kv_offloaded},
      {"kv_on_device", s.kv_on_device},
      {"working_set_bytes", s.working_set_bytes},
      {"index_bytes", s.index_bytes},
      {"device_select", s.device_select},
      {"device_index_bytes", s.device_index_bytes},
      {"tokens_routed_device", s.tokens_routed_device},
      {"tokens_routed_host", s.tokens_routed_host},
      {"recall_samples", s.recall_samples},
      {"recall_mean", s.recall_mean},
      {"recall_p10", s.recall_p10},
      {"recall_min", s.recall_min},
  };
}

std::string KvStatsText(const KvStats& s, double prefill_seconds) {
  const double step =
      s.select_seconds + s.fetch_seconds + s.attend_seconds + s.update_seconds + s.other_seconds;
  auto ms = [](double sec) { return sec * 1e3; };
  auto pct = [step](double sec) { return step > 0 ? 100.0 * sec / step : 0.0; };
  std::string text = fmt::format(
      "kv policy        {}\n"
      "decode steps     {} (average context {:.0f} tokens)\n"
      "layers           {} sparse, {} dense\n"
      "tokens attended  {:.1f} per (layer, KV head) per step in sparse layers; {:.1f} in dense "
      "layers\n"
      "index            {:.1f} nodes visited per (layer, KV head) per step; {} of metadata\n"
      "fetch            {:.1f} pages, {} per step; hit rate {:.1f}%\n"
      "memory           {} KV {}{}, working set {}{}\n",
      s.policy, s.decode_steps, s.context_tokens, s.sparse_layers, s.dense_layers,
      s.tokens_attended, s.tokens_attended_dense, s.nodes_visited, HumanBytes(s.index_bytes),
      s.pages_fetched, HumanBytes(static_cast<int64_t>(s.bytes_fetched)), 100.0 * s.hit_rate,
      s.kv_on_device ? "device" : "host", HumanBytes(s.host_kv_bytes),
      s.kv_offloaded ? " (pinned host memory)" : "", HumanBytes(s.working_set_bytes),
      s.kv_offloaded ? " (device memory)" : "");
  // A device that selects queues select, fetch and attend with the model's work: the host sees
  // them apart only with --kv-timing (events around each phase), so without it they are not
  // shown as zeros.
  if (s.device_select && s.select_seconds + s.fetch_seconds + s.attend_seconds == 0) {
    text += fmt::format(
        "time per step    {:.3f} ms: index update {:.3f} ms ({:.1f}%), rest {:.3f} ms ({:.1f}%), "
        "select, fetch and attend included (run with --kv-timing to split them out)",
        ms(step), ms(s.update_seconds), pct(s.update_seconds), ms(s.other_seconds),
        pct(s.other_seconds));
  } else {
    text += fmt::format(
        "time per step    {:.3f} ms: select {:.3f} ms ({:.1f}%), fetch {:.3f} ms ({:.1f}%), "
        "attend {:.3f} ms ({:.1f}%), index update {:.3f} ms ({:.1f}%), rest {:.3f} ms ({:.1f}%)",
        ms(step), ms(s.select_seconds), pct(s.select_seconds), ms(s.fetch_seconds),
        pct(s.fetch_seconds), ms(s.attend_seconds), pct(s.attend_seconds), ms(s.update_seconds),
        pct(s.update_seconds), ms(s.other_seconds), pct(s.other_seconds));
    // With the KV offloaded, the rate of the fetches timed above over the host link: the bytes
    // of the pages fetched in their own layer (prefetched ones cross beside other work and are
    // not in the fetch time). None without offloading: with both tiers in host memory the
    // fetch is mostly bookkeeping.
    const double pages = s.pages_fetched + s.pages_prefetched;
    if (s.kv_offloaded && s.fetch_seconds > 0 && s.pages_fetched > 0 && s.bytes_fetched > 0) {
      const double bytes = s.bytes_fetched * s.pages_fetched / pages;
      text += fmt::format(
          "\nfetch rate       {:.1f} GB/s over the host link ({} per step in the fetch time above)",
          bytes / s.fetch_seconds / 1e9, HumanBytes(static_cast<int64_t>(bytes)));
    }
  }
  if (s.update_beside_seconds > 0) {
    text += fmt::format(
        "\nindex update     {:.3f} ms per step beside the next step's device work (not in the "
        "split above)",
        ms(s.update_beside_seconds));
  }
  if (s.device_select) {
    const int64_t device = s.working_set_bytes + s.device_index_bytes;
    text += fmt::format(
        "\nselection        on the device: {} of bounds, lists and residency; device KV + index "
        "{} = {:.2f}% of the full KV; {:.3f} ms per step on the host before the step's device "
        "work (in 'rest')",
        HumanBytes(s.device_index_bytes), HumanBytes(device),
        s.host_kv_bytes > 0 ? 100.0 * static_cast<double>(device) / s.host_kv_bytes : 0.0,
        ms(s.prepare_seconds));
    if (s.tokens_routed_device > 0) {
      const int64_t all = s.tokens_routed_device + s.tokens_routed_host;
      text += fmt::format(
          "\ninsertion        {} of {} tokens placed at the leaf routed on the device ({:.1f}%), "
          "the rest by the host's tree search",
          s.tokens_routed_device, all, 100.0 * static_cast<double>(s.tokens_routed_device) / all);
    }
    if (s.prefetch_steps > 0) {
      text += fmt::format(
          "\nprefetch         {:.1f} pages per step brought in ahead of their layer (in the "
          "bytes above), in {} of {} steps",
          s.pages_prefetched, s.prefetch_steps, s.decode_steps);
    }
    if (s.pages_deferred > 0) {
      text += fmt::format(
          "\nfetch behind     {:.1f} selected pages per step not attended (not resident), "
          "copied in beside the step for the next one ({:.1f} pages, in the bytes above)",
          s.pages_deferred, s.pages_prefetched);
    }
    if (s.prefetch_probe_on_seconds > 0) {
      text += fmt::format(
          "\nprefetch timing  {:.3f} ms per step with it, {:.3f} ms without (the last probe of "
          "--kv-prefetch auto; it keeps the faster)",
          ms(s.prefetch_probe_on_seconds), ms(s.prefetch_probe_off_seconds));
    }
  }
  if (s.prompt_index_seconds > 0) {
    text += fmt::format("\nprompt index     built in {:.3f} s at the end of the prompt's prefill",
                        s.prompt_index_seconds);
    if (prefill_seconds >= s.prompt_index_seconds) {
      text += fmt::format(" ({:.1f}% of the prefill's {:.3f} s)",
                          100.0 * s.prompt_index_seconds / prefill_seconds, prefill_seconds);
    }
  }
  if (s.recall_samples > 0) {
    text += fmt::format(
        "\nrecall           attention mass on attended tokens: mean {:.4f}, p10 {:.3f}, min "
        "{:.4f} over {} (step, layer, query head) samples",
        s.recall_mean, s.recall_p10, s.recall_min, s.recall_samples);
  }
  return text;
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
      {"kv_offloaded", i.kv_offloaded},
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
      "KV {} ({} per token) | peak RSS {}{} | finish: {}",
      s.prompt_tokens, s.cached_tokens, s.prefill_tokens_per_second, s.generated_tokens,
      s.decode_tokens_per_second, HumanBytes(s.kv_bytes), HumanBytes(s.kv_bytes_per_token),
      HumanBytes(s.peak_rss_bytes),
      s.device_peak_bytes > 0 ? " | peak device " + HumanBytes(s.device_peak_bytes) : "",
      s.finish_reason);
}

}  // namespace icecache::cli

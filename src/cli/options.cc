#include "cli/options.h"

#include <cstdio>

namespace icecache::cli {

EngineOptions ModelOptions::ToEngineOptions() const {
  EngineOptions e;
  e.model = model;
  e.device = device;
  e.threads = threads;
  e.context_size = ctx_size;
  e.prefill_chunk = prefill_chunk;
  e.kv_page_size = kv_page;
  return e;
}

SamplingParams SamplingOptions::ToParams() const {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.repetition_window = repeat_last_n;
  p.seed = seed;
  return p;
}

void AddModelOptions(CLI::App& app, ModelOptions* o) {
  app.add_option("-m,--model", o->model,
                 "GGUF file, Hugging Face model folder, or 'default' (SmolLM2-135M-Instruct)")
      ->capture_default_str();
  app.add_option("--device", o->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("-t,--threads", o->threads, "CPU threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-c,--ctx-size", o->ctx_size,
                 "context limit in tokens (0: the model's trained context)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefill-chunk", o->prefill_chunk, "prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--kv-page", o->kv_page, "tokens per KV page")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
}

void AddSamplingOptions(CLI::App& app, SamplingOptions* o) {
  app.add_option("--temp", o->temp, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o->top_p, "nucleus sampling mass (1: off)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", o->min_p, "drop tokens below min-p times the top probability")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1: off)")
      ->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--repeat-last-n", o->repeat_last_n,
                 "tokens the repetition penalty looks back over (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-s,--seed", o->seed, "random seed");
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

}  // namespace icecache::cli

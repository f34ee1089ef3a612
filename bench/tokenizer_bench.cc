// Tokenizer throughput: encoding ~100K tokens of English with the SmolLM2 vocabulary (warm and
// cold word cache), decoding and stream-decoding them, and the SentencePiece-BPE fixture model.
//
//   build/bench/tokenizer_bench [--benchmark_filter=Encode]
//
// The SmolLM2 GGUF is looked up in $ICECACHE_MODEL_DIR, then <repo>/.cache/models; benchmarks
// that need it are skipped with a message when it is absent.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path();

std::string ModelPath() {
  const char* kFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* dir = std::getenv("ICECACHE_MODEL_DIR")) {
    if (fs::exists(fs::path(dir) / kFile)) return (fs::path(dir) / kFile).string();
  }
  const fs::path p = kRepo / ".cache" / "models" / kFile;
  return fs::exists(p) ? p.string() : "";
}

// English prose: sentences drawn (seeded) from a fixed set until `words` words.
std::string EnglishText(size_t words) {
  static const char* kSentences[] = {
      "The committee met on Tuesday to discuss the budget for the coming year.",
      "Researchers have found that regular exercise improves memory and sleep quality.",
      "She opened the window, and the smell of rain filled the small apartment.",
      "In 1969, astronauts landed on the Moon and returned safely to Earth.",
      "Most programming languages provide loops, conditionals, and functions.",
      "He wasn't sure whether the train would arrive before midnight.",
      "The museum's new exhibition features paintings from the nineteenth century.",
      "Prices rose by 3.5 percent last quarter, according to the latest report.",
      "Children learn languages quickly when they hear them spoken every day.",
      "We'll need at least twelve volunteers to finish the project on time.",
      "Although the road was narrow, the driver navigated it with remarkable ease.",
      "Scientists are studying how glaciers respond to rising ocean temperatures.",
      "The recipe calls for two cups of flour, one egg, and a pinch of salt.",
      "They've been working on the bridge since early spring.",
      "Economic growth depends on investment, education, and stable institutions.",
      "A quiet evening walk can be the best way to end a busy day.",
  };
  std::mt19937 rng(42);
  std::string text;
  size_t count = 0;
  while (count < words) {
    const std::string s = kSentences[rng() % std::size(kSentences)];
    text += s;
    text += (rng() % 5 == 0) ? "\n\n" : " ";
    count += static_cast<size_t>(std::count(s.begin(), s.end(), ' ')) + 1;
  }
  return text;
}

struct SmolLm2 {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
  std::string text;
};

// Loaded once; null when the model file is missing.
const SmolLm2* GetSmolLm2() {
  static const SmolLm2* state = []() -> const SmolLm2* {
    const std::string path = ModelPath();
    if (path.empty()) return nullptr;
    auto gguf = GgufFile::Open(path);
    if (!gguf.ok()) return nullptr;
    auto tok = Tokenizer::FromGguf(*gguf.value());
    if (!tok.ok()) return nullptr;
    auto* s = new SmolLm2{std::move(gguf).value(), std::move(tok).value(), EnglishText(80000)};
    return s;
  }();
  return state;
}

void SetTokenCounters(benchmark::State& state, size_t tokens, size_t bytes) {
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

void BM_EncodeEnglishWarm(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  size_t n = m->tok->Encode(m->text, false, true).size();  // fills the word cache
  for (auto _ : state) {
    auto ids = m->tok->Encode(m->text, false, true);
    benchmark::DoNotOptimize(ids.data());
    n = ids.size();
  }
  SetTokenCounters(state, n, m->text.size());
}
BENCHMARK(BM_EncodeEnglishWarm)->Unit(benchmark::kMillisecond);

// A fresh tokenizer each iteration: every word goes through BPE merges once.
void BM_EncodeEnglishCold(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  size_t n = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = Tokenizer::FromGguf(*m->gguf);
    state.ResumeTiming();
    auto ids = tok.value()->Encode(m->text, false, true);
    benchmark::DoNotOptimize(ids.data());
    n = ids.size();
    state.PauseTiming();
    tok = Status();  // destroy outside the timed region
    state.ResumeTiming();
  }
  SetTokenCounters(state, n, m->text.size());
}
BENCHMARK(BM_EncodeEnglishCold)->Unit(benchmark::kMillisecond);

// Made-up words (almost every word new to the cache): the cost of the BPE merges themselves.
void BM_EncodeMadeUpWords(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  std::mt19937 rng(7);
  std::string text;
  for (int w = 0; w < 30000; ++w) {
    const int len = 3 + static_cast<int>(rng() % 9);
    for (int i = 0; i < len; ++i) text.push_back(static_cast<char>('a' + rng() % 26));
    text.push_back(' ');
  }
  size_t n = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = Tokenizer::FromGguf(*m->gguf);  // empty word cache
    state.ResumeTiming();
    auto ids = tok.value()->Encode(text, false, true);
    benchmark::DoNotOptimize(ids.data());
    n = ids.size();
    state.PauseTiming();
    tok = Status();
    state.ResumeTiming();
  }
  SetTokenCounters(state, n, text.size());
}
BENCHMARK(BM_EncodeMadeUpWords)->Unit(benchmark::kMillisecond);

void BM_DecodeEnglish(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  const auto ids = m->tok->Encode(m->text, false, true);
  for (auto _ : state) {
    std::string text = m->tok->Decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  SetTokenCounters(state, ids.size(), m->text.size());
}
BENCHMARK(BM_DecodeEnglish)->Unit(benchmark::kMillisecond);

void BM_StreamDecodeEnglish(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  const auto ids = m->tok->Encode(m->text, false, true);
  for (auto _ : state) {
    StreamDecoder dec(*m->tok);
    size_t bytes = 0;
    for (int32_t id : ids) bytes += dec.Push(id).size();
    benchmark::DoNotOptimize(bytes);
  }
  SetTokenCounters(state, ids.size(), m->text.size());
}
BENCHMARK(BM_StreamDecodeEnglish)->Unit(benchmark::kMillisecond);

void BM_LoadSmolLm2Tokenizer(benchmark::State& state) {
  const SmolLm2* m = GetSmolLm2();
  if (m == nullptr) return state.SkipWithError("SmolLM2 GGUF not found");
  for (auto _ : state) {
    auto tok = Tokenizer::FromGguf(*m->gguf);
    benchmark::DoNotOptimize(tok.ok());
  }
}
BENCHMARK(BM_LoadSmolLm2Tokenizer)->Unit(benchmark::kMillisecond);

// SentencePiece-style BPE (the fixture model: no pre-tokenizer, byte fallback).
void BM_EncodeSentencePiece(benchmark::State& state) {
  auto tok = Tokenizer::FromHfFiles(
      (kRepo / "tests/data/tokenizer/spm_legacy.tokenizer.json").string(), "");
  if (!tok.ok()) return state.SkipWithError(tok.status().ToString().c_str());
  // One line per Encode call: SentencePiece models see a whole line as one piece.
  const std::string text = EnglishText(20000);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(". ", start);
    end = end == std::string::npos ? text.size() : end + 2;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  size_t n = 0;
  for (auto _ : state) {
    n = 0;
    for (const auto& line : lines) n += tok.value()->Encode(line, false, false).size();
  }
  SetTokenCounters(state, n, text.size());
}
BENCHMARK(BM_EncodeSentencePiece)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace icecache

BENCHMARK_MAIN();

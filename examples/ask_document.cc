// Asks one question about a long document under several KV policies, from one prefill: an
// example of the C++ API (include/icecache/). The document is prefilled once with full KV in a
// session; each policy then answers in a fork of that session (Session::Fork copies the KV and
// builds the policy's index over it), and its KvStats say what each decode step attended.
//
//   ask_document DOCUMENT "QUESTION" [--model M] [--budget N] [--policies full,icecache,quest]
//       [--max-tokens N] [--threads N]
//
// Exit status: 0 when every policy answered, 2 for bad arguments or input the engine cannot take
// (a document longer than the context), 1 when something else failed (a missing file).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "icecache/engine.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "error: %s\nusage: ask_document DOCUMENT \"QUESTION\" [--model M] [--budget N] "
               "[--policies full,icecache,quest] [--max-tokens N] [--threads N]\n",
               why);
  return 2;
}

// Input the engine cannot take (a prompt longer than the context, say) exits 2 like a bad
// argument; any other failure 1.
int Fail(const std::string& what, const icecache::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", what.c_str(), status.message().c_str());
  const icecache::StatusCode code = status.code();
  return code == icecache::StatusCode::kInvalidArgument || code == icecache::StatusCode::kOutOfRange
             ? 2
             : 1;
}

// A whole number in [lo, hi], or -1.
int ParseCount(const std::string& text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) return -1;
  return static_cast<int>(v);
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace icecache;
  if (argc < 3) return Usage("a document and a question are needed");
  const std::string path = argv[1], question = argv[2];
  EngineOptions options;
  int budget = 256, max_tokens = 32;
  std::vector<std::string> policies = {"full", "icecache", "quest"};
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage((flag + " needs a value").c_str());
    const std::string value = argv[i + 1];
    if (flag == "--model") {
      options.model = value;
    } else if (flag == "--budget") {
      if ((budget = ParseCount(value, 1, 1 << 20)) < 0) return Usage("--budget: not a count");
    } else if (flag == "--max-tokens") {
      if ((max_tokens = ParseCount(value, 1, 4096)) < 0) return Usage("--max-tokens: 1 to 4096");
    } else if (flag == "--threads") {
      if ((options.threads = ParseCount(value, 0, 1024)) < 0) return Usage("--threads: 0 to 1024");
    } else if (flag == "--policies") {
      policies = SplitCommas(value);
      if (policies.empty()) return Usage("--policies: no policy named");
    } else {
      return Usage(("unknown option " + flag).c_str());
    }
  }

  // Every policy is checked before the model loads.
  std::vector<KvConfig> configs;
  for (const std::string& policy : policies) {
    KvConfig kv;
    kv.policy = policy;
    kv.budget = budget;
    if (Status valid = kv.Validate(); !valid.ok()) return Usage(valid.message().c_str());
    configs.push_back(kv);
  }

  std::ifstream file(path, std::ios::binary);
  if (!file) return Fail(path, Status(StatusCode::kNotFound, "cannot open the document"));
  std::stringstream text;
  text << file.rdbuf();

  Result<std::unique_ptr<Engine>> engine = Engine::Create(options);
  if (!engine.ok()) return Fail("model", engine.status());
  const ModelInfo& info = (*engine)->info();

  // The chat prompt as the engine would build it from `messages`: the template writes any BOS.
  const std::vector<ChatMessage> messages = {
      {"user", "<document>\n" + text.str() + "\n</document>\n\nQuestion: " + question}};
  Result<std::string> prompt = (*engine)->FormatChat(messages, /*add_generation_prompt=*/true);
  if (!prompt.ok()) return Fail("chat template", prompt.status());
  Result<std::vector<int32_t>> tokens =
      (*engine)->Tokenize(*prompt, /*add_bos=*/false, /*parse_special=*/true);
  if (!tokens.ok()) return Fail("tokenizer", tokens.status());
  if (tokens->size() < 2) return Usage("the prompt is too short");
  if (static_cast<int64_t>(tokens->size()) >= info.context_size) {
    return Fail(path, Status(StatusCode::kOutOfRange,
                             "the prompt is " + std::to_string(tokens->size()) +
                                 " tokens, which does not fit the context limit of " +
                                 std::to_string(info.context_size)));
  }
  std::printf("model: %s, %d layers, %d KV heads; prompt: %zu tokens (context limit %d)\n",
              info.name.c_str(), info.n_layers, info.n_kv_heads, tokens->size(), info.context_size);

  // Prefill every prompt token but the last with full KV, once. Each fork runs the last token
  // itself, so that its first decode step comes from its own policy's state.
  Result<std::unique_ptr<Session>> base = (*engine)->NewSession();
  if (!base.ok()) return Fail("session", base.status());
  GenerateRequest prefill;
  prefill.prompt_tokens.assign(tokens->begin(), tokens->end() - 1);
  prefill.max_tokens = 0;
  Result<GenerateResult> pre = (*base)->Generate(prefill);
  if (!pre.ok()) return Fail("prefill", pre.status());
  std::printf("prefill: %.2f s (%.0f tok/s)\n\n", pre->stats.prefill_seconds,
              pre->stats.prefill_tokens_per_second);

  for (const KvConfig& kv : configs) {
    Result<std::unique_ptr<Session>> fork = (*base)->Fork(kv);
    if (!fork.ok()) return Fail(kv.Describe(), fork.status());
    GenerateRequest ask;
    ask.prompt_tokens = *tokens;
    ask.max_tokens = max_tokens;
    ask.sampling.temperature = 0;  // greedy: the policies' answers are comparable
    Result<GenerateResult> out = (*fork)->Generate(ask);
    if (!out.ok()) return Fail(kv.Describe(), out.status());
    const KvStats& s = out->stats.kv;
    // Full KV reports its layers as dense, a sparse policy its selections.
    const double attended = s.sparse_layers > 0 ? s.tokens_attended : s.tokens_attended_dense;
    std::printf("[%s]\n  answer: %s\n", kv.Describe().c_str(), out->text.c_str());
    std::printf("  prompt tokens taken from the prefill: %lld of %lld\n",
                static_cast<long long>(out->stats.cached_tokens),
                static_cast<long long>(out->stats.prompt_tokens));
    std::printf(
        "  decode: %.1f tok/s; attended %.1f of %.1f tokens per (layer, KV head) and step\n",
        out->stats.decode_tokens_per_second, attended, s.context_tokens);
  }
  return 0;
}

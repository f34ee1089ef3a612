// Whole models on the GPU against the CPU backend, through the public Engine API: logits at
// fixture positions within a bf16 tolerance and greedy continuations that agree (a divergence
// is accepted only at a near tie: a step where the CPU's top-2 logit margin is below twice the
// largest logit difference measured between the backends on that model). Also: decode steps,
// which run as CUDA graphs from the second step on, agree with teacher-forced prefill logits on
// the GPU; batched decoding agrees with single-sequence decoding.
//
// Models: tiny random llama and qwen2 GGUFs (always), the synthetic "tiny" preset (bf16
// weights made identically on both backends), and SmolLM2-135M (the default model, when present:
// tests/data/reference/smollm2.json prompts, 16-token greedy continuations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "cuda_test_util.h"
#include "icecache/engine.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

// Whole models, bf16 weights and activations against f32 on the CPU: |logit difference| at most
// 5% of the largest |logit| (measured on the tiny models: up to 3%).
constexpr double kModelTolerance = 5e-2;

struct PromptCase {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;  // where logits are compared
};

std::unique_ptr<Engine> MakeEngine(EngineOptions o, const std::string& device) {
  o.device = device;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << device << ": " << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

double Margin(const std::vector<float>& logits) {
  float a = -INFINITY, b = -INFINITY;
  for (float v : logits) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Compares the two engines on `prompts`; *worst_out gets the largest |logit diff| seen.
void CompareBackends(Engine& cpu, Engine& gpu, const std::vector<PromptCase>& prompts,
                     double rel_tol, int greedy_tokens, double* worst_out = nullptr) {
  double worst = 0;
  for (const PromptCase& p : prompts) {
    SCOPED_TRACE("prompt " + p.name);
    auto lc = cpu.Logits(p.ids, p.positions);
    auto lg = gpu.Logits(p.ids, p.positions);
    EXPECT_TRUE(lc.ok() && lg.ok());
    if (!lc.ok() || !lg.ok()) continue;
    for (size_t i = 0; i < p.positions.size(); ++i) {
      double max_ref = 0, max_diff = 0;
      for (size_t v = 0; v < (*lc)[i].size(); ++v) {
        max_ref = std::max(max_ref, std::abs(static_cast<double>((*lc)[i][v])));
        max_diff = std::max(max_diff, std::abs(static_cast<double>((*lc)[i][v]) - (*lg)[i][v]));
      }
      worst = std::max(worst, max_diff);
      EXPECT_LE(max_diff, rel_tol * max_ref) << "position " << p.positions[i] << ": max |diff| "
                                             << max_diff << ", max |logit| " << max_ref;
      std::printf("[ logits ] %s pos %lld: max |cpu - gpu| %.4f (max |logit| %.2f)\n",
                  p.name.c_str(), static_cast<long long>(p.positions[i]), max_diff, max_ref);
    }
  }
  if (worst_out != nullptr) *worst_out = worst;
  const double tie = std::max(2 * worst, 1e-3);
  for (const PromptCase& p : prompts) {
    SCOPED_TRACE("prompt " + p.name);
    GenerateRequest req;
    req.prompt_tokens = p.ids;
    req.max_tokens = greedy_tokens;
    req.ignore_eos = true;
    auto oc = cpu.Generate(req);
    auto og = gpu.Generate(req);
    ASSERT_TRUE(oc.ok() && og.ok());
    size_t agree = 0;
    while (agree < oc->tokens.size() && agree < og->tokens.size() &&
           oc->tokens[agree] == og->tokens[agree]) {
      ++agree;
    }
    std::printf("[ greedy ] %s: %zu of %d tokens agree\n", p.name.c_str(), agree, greedy_tokens);
    if (agree < static_cast<size_t>(greedy_tokens)) {
      // The CPU's margin at the divergent step.
      std::vector<int32_t> ctx = p.ids;
      ctx.insert(ctx.end(), oc->tokens.begin(), oc->tokens.begin() + agree);
      const std::vector<int64_t> last = {static_cast<int64_t>(ctx.size()) - 1};
      auto l = cpu.Logits(ctx, last);
      ASSERT_TRUE(l.ok());
      const double m = Margin((*l)[0]);
      std::printf(
          "[ greedy ] %s: diverges at step %zu where the CPU top-2 margin is %.4f (tie "
          "threshold %.4f)\n",
          p.name.c_str(), agree, m, tie);
      EXPECT_LT(m, tie) << "greedy tokens diverge at step " << agree
                        << " although the CPU's choice leads by " << m;
    }
  }
}

// Greedy decoding on the GPU (graph replays) against GPU teacher-forced prefill logits.
void CheckDecodeMatchesPrefill(Engine& gpu, const std::vector<int32_t>& prompt, int n) {
  GenerateRequest req;
  req.prompt_tokens = prompt;
  req.max_tokens = n;
  req.ignore_eos = true;
  auto out = gpu.Generate(req);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(static_cast<int>(out->tokens.size()), n);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out->tokens.begin(), out->tokens.end());
  std::vector<int64_t> pos;
  for (int i = 0; i < n; ++i) pos.push_back(static_cast<int64_t>(prompt.size()) - 1 + i);
  auto l = gpu.Logits(all, pos);
  ASSERT_TRUE(l.ok());
  for (int i = 0; i < n; ++i) {
    const int32_t best = Argmax((*l)[i]);
    if (best != out->tokens[i]) {
      const double gap = (*l)[i][best] - (*l)[i][out->tokens[i]];
      EXPECT_LT(gap, 0.1) << "decode step " << i << " chose " << out->tokens[i]
                          << " but prefill logits prefer " << best << " by " << gap;
    }
  }
}

void CheckBatchEqualsSingle(Engine& gpu, int vocab) {
  std::vector<GenerateRequest> reqs(3);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 20 + 13 * r; ++i) reqs[r].prompt_tokens.push_back((i * 31 + r * 7) % vocab);
    reqs[r].max_tokens = 10 + 3 * r;  // finish at different steps: batch shapes 3, 2, 1
    reqs[r].ignore_eos = true;
  }
  auto batch = gpu.GenerateBatch(reqs);
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  for (int r = 0; r < 3; ++r) {
    auto single = gpu.Generate(reqs[r]);
    ASSERT_TRUE(single.ok());
    EXPECT_EQ((*batch)[r].tokens, single->tokens) << "request " << r;
  }
}

class CudaModelParity : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (testing::TryCudaBackend(&why) == nullptr) GTEST_SKIP() << "no CUDA backend here: " << why;
  }
};

TEST_F(CudaModelParity, TinyGgufModels) {
  for (const testing::TinyModelSpec& spec : {testing::TinyLlamaSpec(), testing::TinyQwen2Spec()}) {
    SCOPED_TRACE(spec.name);
    const std::string path = testing::MakeTempDir(spec.name) + "/model.gguf";
    ASSERT_TRUE(
        testing::WriteTinyGgufModel(spec, path, testing::TinyTokenizerPath(spec), DType::kF32)
            .ok());
    const EngineOptions o{
        .model = path, .context_size = 1024, .prefill_chunk = 100, .max_sequences = 4};
    auto cpu = MakeEngine(o, "cpu");
    auto gpu = MakeEngine(o, "cuda");
    ASSERT_TRUE(cpu && gpu);
    std::vector<PromptCase> prompts;
    for (int len : {7, 150, 333}) {
      PromptCase p{spec.name + "/" + std::to_string(len), {}, {}};
      for (int i = 0; i < len; ++i) p.ids.push_back((i * 37 + len) % 1000 + 3);
      p.positions = {0, len / 2, len - 1};
      prompts.push_back(p);
    }
    CompareBackends(*cpu, *gpu, prompts, kModelTolerance, 24);
    CheckDecodeMatchesPrefill(*gpu, prompts[1].ids, 24);
    CheckBatchEqualsSingle(*gpu, 1000);
  }
}

TEST_F(CudaModelParity, SyntheticTinyHasTheSameWeightsOnBothBackends) {
  const EngineOptions o{.context_size = 2048, .prefill_chunk = 256, .synthetic = "tiny"};
  auto cpu = MakeEngine(o, "cpu");
  auto gpu = MakeEngine(o, "cuda");
  ASSERT_TRUE(cpu && gpu);
  PromptCase p{"synthetic", {}, {}};
  for (int i = 0; i < 600; ++i) p.ids.push_back((i * 53) % 1024);
  p.positions = {0, 255, 256, 599};
  CompareBackends(*cpu, *gpu, {p}, kModelTolerance, 16);
}

TEST_F(CudaModelParity, SmolLM2MatchesCpuBackend) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not present (.cache/models); skipping";
  const nlohmann::json fx = testing::ReadDataJson("reference/smollm2.json");
  std::vector<PromptCase> prompts;
  for (const nlohmann::json& p : fx["prompts"]) {
    PromptCase c{p["name"], p["input_ids"].get<std::vector<int32_t>>(), {}};
    for (const nlohmann::json& pos : p["positions"]) c.positions.push_back(pos["position"]);
    prompts.push_back(c);
  }
  const EngineOptions o{.model = model, .context_size = 4096, .prefill_chunk = 512};
  auto cpu = MakeEngine(o, "cpu");
  auto gpu = MakeEngine(o, "cuda");
  ASSERT_TRUE(cpu && gpu);
  double worst = 0;
  CompareBackends(*cpu, *gpu, prompts, kModelTolerance, 16, &worst);
  std::printf("[ smollm2 ] largest |cpu - gpu| logit difference: %.4f\n", worst);
  CheckDecodeMatchesPrefill(*gpu, prompts[0].ids, 32);
}

// Greedy decode on the GPU queues each step before the host reads the token of the step before
// (decode_ahead.cc). A request that ends on a token the host only then sees (here a cancelled
// stream) leaves a queued step to drop: the session must hold exactly the fed tokens, agree
// with the CPU, and continue as a fresh sequence would.
TEST_F(CudaModelParity, SmolLM2CancelledGreedyDecodeLeavesTheSessionExact) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not present (.cache/models); skipping";
  const EngineOptions o{.model = model, .context_size = 4096, .prefill_chunk = 512};
  auto cpu = MakeEngine(o, "cpu");
  auto gpu = MakeEngine(o, "cuda");
  ASSERT_TRUE(cpu && gpu);
  auto prompt = gpu->Tokenize("The three largest cities of France are", true, false);
  ASSERT_TRUE(prompt.ok());
  GenerateRequest req;
  req.prompt_tokens = *prompt;
  req.max_tokens = 24;
  req.ignore_eos = true;
  std::vector<int32_t> tokens[2], history[2];
  Engine* engines[2] = {cpu.get(), gpu.get()};
  std::unique_ptr<Session> gpu_session;
  for (int e = 0; e < 2; ++e) {
    auto session = engines[e]->NewSession();
    ASSERT_TRUE(session.ok());
    int texts = 0;
    GenerateCallbacks cb;
    cb.on_text = [&](std::string_view) { return ++texts < 5; };
    auto out = (*session)->Generate(req, cb);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->stats.finish_reason, "cancelled");
    tokens[e] = out->tokens;
    history[e] = (*session)->history();
    if (e == 1) gpu_session = std::move(*session);
  }
  ASSERT_GE(tokens[1].size(), 2u);
  ASSERT_LT(tokens[1].size(), static_cast<size_t>(req.max_tokens));
  EXPECT_EQ(tokens[1], tokens[0]);
  // The last token was accepted but never fed: the KV holds the prompt and the others.
  EXPECT_EQ(history[1].size(), prompt->size() + tokens[1].size() - 1);
  EXPECT_EQ(history[1], history[0]);
  // A follow-up continues exactly as on a session that produced the same tokens and stopped at
  // its token budget (known in advance, so no step was queued past the end there).
  auto budgeted = gpu->NewSession();
  ASSERT_TRUE(budgeted.ok());
  GenerateRequest same = req;
  same.max_tokens = static_cast<int>(tokens[1].size());
  auto again = (*budgeted)->Generate(same);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, tokens[1]);
  EXPECT_EQ((*budgeted)->history(), history[1]);
  GenerateRequest more;
  more.prompt_tokens = *prompt;
  more.prompt_tokens.insert(more.prompt_tokens.end(), tokens[1].begin(), tokens[1].end());
  more.max_tokens = 8;
  more.ignore_eos = true;
  auto cont = gpu_session->Generate(more);
  auto cont_budgeted = (*budgeted)->Generate(more);
  ASSERT_TRUE(cont.ok() && cont_budgeted.ok());
  EXPECT_EQ(cont->tokens, cont_budgeted->tokens);
  EXPECT_EQ(gpu_session->history().size(), more.prompt_tokens.size() + cont->tokens.size() - 1);
  std::printf("[ ahead ] cancelled after %zu tokens; %zu continuation tokens as after a budget\n",
              tokens[1].size(), cont->tokens.size());
}

}  // namespace
}  // namespace icecache

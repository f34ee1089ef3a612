#include "eval/fidelity.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eval/demo_document.h"
#include "eval/fidelity_metrics.h"
#include "eval/lists.h"
#include "eval/words.h"

namespace icecache::eval {

namespace fs = std::filesystem;

namespace {

Result<std::string> ReadWhole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status LoadJsonl(const fs::path& path, std::vector<FidelityDocument>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot open");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgument(fmt::format("{}:{}: malformed JSON", path.string(), n));
    }
    const char* field = j.contains("input") ? "input" : "context";
    if (!j.contains(field) || !j[field].is_string()) {
      return InvalidArgument(
          fmt::format("{}:{}: missing string field 'input' or 'context'", path.string(), n));
    }
    out.push_back({path.stem().string(), "line" + std::to_string(n), j[field].get<std::string>()});
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<FidelityDocument>> LoadFidelityDocuments(const std::vector<std::string>& paths) {
  std::vector<FidelityDocument> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) return NotFound(p + ": no .txt files");
      for (const fs::path& f : files) {
        ICECACHE_ASSIGN_OR_RETURN(std::string text, ReadWhole(f));
        out.push_back({fs::path(p).filename().string(), f.filename().string(), std::move(text)});
      }
    } else if (fs::path(p).extension() == ".jsonl") {
      ICECACHE_RETURN_IF_ERROR(LoadJsonl(p, out));
    } else {
      ICECACHE_ASSIGN_OR_RETURN(std::string text, ReadWhole(p));
      out.push_back({fs::path(p).stem().string(), fs::path(p).filename().string(), text});
    }
  }
  if (out.empty()) return InvalidArgument("fidelity: no documents in the given files");
  return out;
}

std::vector<FidelityDocument> FillerFidelityDocuments(int count, int tokens, uint64_t seed) {
  std::vector<FidelityDocument> out;
  for (int i = 0; i < count; ++i) {
    // About 1.3 tokens per word; a margin so that every document reaches `tokens`.
    out.push_back({"filler", "filler" + std::to_string(i),
                   MakeFillerText(tokens, MixSeed(seed, 50, static_cast<uint64_t>(i)))});
  }
  return out;
}

Result<std::vector<FidelityItem>> SelectFidelityItems(const TextCodec& codec,
                                                      const std::vector<FidelityDocument>& docs,
                                                      const std::vector<int>& lengths,
                                                      const FidelityOptions& options,
                                                      int* skipped) {
  std::vector<FidelityItem> items;
  std::vector<std::vector<int32_t>> cache(docs.size());
  *skipped = 0;
  for (int length : lengths) {
    if (length <= options.steps + 1) {
      return InvalidArgument(fmt::format("fidelity: length {} must exceed --steps {}",
                                         FormatLength(length), options.steps));
    }
    int taken = 0;
    for (size_t d = 0; d < docs.size() && taken < options.limit; ++d) {
      if (cache[d].empty()) {
        ICECACHE_ASSIGN_OR_RETURN(cache[d], codec.EncodeDocument(docs[d].text));
      }
      if (static_cast<int>(cache[d].size()) < length) {
        ++*skipped;
        continue;
      }
      items.push_back({&docs[d], {cache[d].begin(), cache[d].begin() + length}, length});
      ++taken;
    }
  }
  return items;
}

PendingWork CountPendingFidelity(const EvalContext& ctx, const std::vector<FidelityItem>& items,
                                 const FidelityOptions& options) {
  PendingWork w;
  for (const FidelityItem& it : items) {
    const auto pending = ctx.Pending(it.doc->source, it.doc->id, -1, it.length);
    if (pending.empty()) continue;
    w.runs += static_cast<int64_t>(pending.size());
    // Prefill, the reference, and each run: steps + gen_tokens decode steps.
    w.work +=
        it.length + (pending.size() + 1.0) * (options.steps + options.gen_tokens) * kDecodeWork;
  }
  return w;
}

namespace {

struct Reference {
  ScoreResult score;
  std::vector<int32_t> generated;
};

// Teacher-forced score and greedy generation of one configuration, from a fork of `base`.
Result<Reference> RunOne(Session& base, const KvConfig& kv, const FidelityItem& item,
                         const FidelityOptions& o) {
  Reference r;
  const size_t ctx_len = item.tokens.size() - o.steps;
  ScoreRequest sreq;
  sreq.context.assign(item.tokens.begin(), item.tokens.begin() + ctx_len);
  sreq.continuation.assign(item.tokens.begin() + ctx_len, item.tokens.end());
  sreq.full_logprobs = true;
  {
    ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<Session> fork, base.Fork(kv));
    ICECACHE_ASSIGN_OR_RETURN(r.score, fork->Score(sreq));
  }
  if (o.gen_tokens > 0) {
    ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<Session> fork, base.Fork(kv));
    GenerateRequest g;
    g.prompt_tokens = sreq.context;
    g.max_tokens = o.gen_tokens;
    g.ignore_eos = true;  // compare the same number of tokens every time
    g.sampling.temperature = 0;
    ICECACHE_ASSIGN_OR_RETURN(GenerateResult out, fork->Generate(g));
    r.generated = std::move(out.tokens);
  }
  return r;
}

void Compare(const Reference& ref, const Reference& got, int gen_tokens, EvalRecord& r) {
  const size_t steps = ref.score.logprobs.size();
  double kl_sum = 0, kl_max = 0;
  int agree = 0;
  for (size_t i = 0; i < steps; ++i) {
    const double kl = KlDivergence(ref.score.logprobs[i], got.score.logprobs[i]);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    agree += ref.score.top1[i] == got.score.top1[i];
  }
  const double n = static_cast<double>(std::max<size_t>(steps, 1));
  r.metrics["kl_mean"] = kl_sum / n;
  r.metrics["kl_max"] = kl_max;
  r.metrics["top1_agreement"] = agree / n;
  r.metrics["nll"] = MeanNll(got.score.token_logprobs);
  r.metrics["ppl"] = std::exp(MeanNll(got.score.token_logprobs));
  r.metrics["nll_full"] = MeanNll(ref.score.token_logprobs);
  r.metrics["ppl_full"] = std::exp(MeanNll(ref.score.token_logprobs));
  r.metrics["steps"] = static_cast<double>(steps);
  const size_t first = FirstDivergence(ref.generated, got.generated);
  r.metrics["first_divergence"] = static_cast<double>(first);
  r.metrics["gen_tokens"] = gen_tokens;
  r.metrics["gen_agreement"] = gen_tokens > 0 ? static_cast<double>(first) / gen_tokens : 1.0;
  r.score = agree / n;
}

}  // namespace

Status RunFidelity(EvalContext& ctx, const std::vector<FidelityItem>& items,
                   const FidelityOptions& options, ProgressMeter& progress) {
  KvConfig full = ctx.runs().front().kv;
  full.policy = "full";
  for (const FidelityItem& item : items) {
    if (ctx.stopped()) return Status::Ok();
    const FidelityDocument& doc = *item.doc;
    const std::vector<PolicyRun> pending = ctx.Pending(doc.source, doc.id, -1, item.length);
    if (pending.empty()) continue;
    const std::string where =
        fmt::format("{} {} {}", doc.source, FormatLength(item.length), doc.id);
    auto fail = [&](const Status& s, const std::string& what) {
      return Status(s.code(), fmt::format("{} {}: {}", where, what, s.message()));
    };
    ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<Session> base, ctx.engine().NewSession(&full));
    const size_t ctx_len = item.tokens.size() - options.steps;
    GenerateRequest prefill;
    prefill.prompt_tokens.assign(item.tokens.begin(), item.tokens.begin() + ctx_len - 1);
    prefill.max_tokens = 0;
    Result<GenerateResult> pre = base->Generate(prefill);
    if (!pre.ok()) return fail(pre.status(), "prefill");
    Result<Reference> ref = RunOne(*base, full, item, options);
    if (!ref.ok()) return fail(ref.status(), "full-KV reference");
    progress.AddWork(item.length + (options.steps + options.gen_tokens) * kDecodeWork, where);

    for (const PolicyRun& run : pending) {
      Result<Reference> got = RunOne(*base, run.kv, item, options);
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kUnsupported) {
          ctx.MarkUnavailable(run, got.status().message());
          continue;
        }
        return fail(got.status(), run.Label());
      }
      EvalRecord r = ctx.NewRecord(doc.source, doc.id, -1, item.length, run);
      r.scorer = "top1_agreement";
      r.prompt_tokens = static_cast<int64_t>(ctx_len);
      r.generated_tokens = static_cast<int64_t>(got->generated.size());
      r.metrics["prefill_s"] = pre->stats.prefill_seconds;
      Compare(*ref, *got, options.gen_tokens, r);
      if (got->score.kv.decode_steps > 0) {
        r.metrics["kv_tokens_attended"] = got->score.kv.tokens_attended;
        r.metrics["kv_context_tokens"] = got->score.kv.context_tokens;
      }
      if (got->score.kv.recall_samples > 0) {  // --kv-recall, over the teacher-forced steps
        r.metrics["recall_mean"] = got->score.kv.recall_mean;
        r.metrics["recall_p10"] = got->score.kv.recall_p10;
        r.metrics["recall_min"] = got->score.kv.recall_min;
      }
      ICECACHE_RETURN_IF_ERROR(ctx.Save(r));
      progress.Advance((options.steps + options.gen_tokens) * kDecodeWork,
                       where + " " + run.Label());
      if (ctx.stopped()) return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace icecache::eval

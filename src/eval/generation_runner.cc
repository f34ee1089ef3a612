#include "eval/generation_runner.h"

#include <fmt/format.h>

#include "eval/lists.h"
#include "eval/scorer.h"

namespace icecache::eval {

Result<std::vector<PreparedSample>> PrepareSamples(const TextCodec& codec,
                                                   std::vector<Sample> samples, int length) {
  std::vector<PreparedSample> out;
  for (Sample& s : samples) {
    PreparedSample p;
    p.length = length;
    Result<FittedPrompt> fitted = FitPrompt(codec, s.prompt, length - s.max_new_tokens);
    if (!fitted.ok()) {
      return Status(fitted.status().code(),
                    fmt::format("{} {} at {}: {}", s.subtask, s.id, FormatLength(length),
                                fitted.status().message()));
    }
    p.prompt = std::move(*fitted);
    p.sample = std::move(s);
    out.push_back(std::move(p));
  }
  return out;
}

PendingWork CountPending(const EvalContext& ctx, const std::vector<PreparedSample>& samples) {
  PendingWork w;
  for (const PreparedSample& p : samples) {
    const auto pending = ctx.Pending(p.sample.subtask, p.sample.id, p.sample.depth, p.length);
    if (pending.empty()) continue;
    w.runs += static_cast<int64_t>(pending.size());
    w.work += static_cast<double>(p.prompt.tokens.size()) +
              static_cast<double>(pending.size()) * p.sample.max_new_tokens * kDecodeWork;
  }
  return w;
}

namespace {

void AddKvMetrics(const GenerateStats& st, EvalRecord& r) {
  r.metrics["decode_s"] = st.decode_seconds;
  r.metrics["decode_tok_s"] = st.decode_tokens_per_second;
  const KvStats& kv = st.kv;
  if (kv.decode_steps == 0) return;
  r.metrics["kv_tokens_attended"] = kv.tokens_attended;
  r.metrics["kv_tokens_attended_dense"] = kv.tokens_attended_dense;
  r.metrics["kv_context_tokens"] = kv.context_tokens;
  r.metrics["kv_sparse_layers"] = kv.sparse_layers;
  r.metrics["kv_dense_layers"] = kv.dense_layers;
  r.metrics["kv_hit_rate"] = kv.hit_rate;
  r.metrics["kv_select_s"] = kv.select_seconds;
}

}  // namespace

Status RunGeneration(EvalContext& ctx, const std::vector<PreparedSample>& samples,
                     ProgressMeter& progress) {
  KvConfig full = ctx.runs().front().kv;
  full.policy = "full";
  // One full-KV session for all samples: consecutive prompts that share a prefix (the same
  // document, or the haystack up to a needle) prefill only what differs.
  ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<Session> base, ctx.engine().NewSession(&full));
  for (const PreparedSample& p : samples) {
    if (ctx.stopped()) return Status::Ok();
    const Sample& s = p.sample;
    const std::vector<PolicyRun> pending = ctx.Pending(s.subtask, s.id, s.depth, p.length);
    if (pending.empty()) continue;
    const std::string where = fmt::format("{} {} {}", s.subtask, FormatLength(p.length), s.id);
    const std::vector<int32_t>& tokens = p.prompt.tokens;
    if (tokens.size() < 2) return Internal(where + ": prompt too short");
    // Prefill all but the last prompt token; each fork then runs the last token itself.
    GenerateRequest prefill;
    prefill.prompt_tokens.assign(tokens.begin(), tokens.end() - 1);
    prefill.max_tokens = 0;
    Result<GenerateResult> pre = base->Generate(prefill);
    if (!pre.ok()) return Status(pre.status().code(), where + ": " + pre.status().message());
    progress.AddWork(static_cast<double>(tokens.size()), where);

    for (const PolicyRun& run : pending) {
      Result<std::unique_ptr<Session>> fork = base->Fork(run.kv);
      if (!fork.ok()) {
        if (fork.status().code() == StatusCode::kUnsupported) {
          ctx.MarkUnavailable(run, fork.status().message());
          continue;
        }
        return Status(fork.status().code(),
                      where + " " + run.Label() + ": " + fork.status().message());
      }
      GenerateRequest req;
      req.prompt_tokens = tokens;
      req.max_tokens = s.max_new_tokens;
      req.sampling.temperature = 0;  // greedy: runs are reproducible and comparable
      Result<GenerateResult> out = (*fork)->Generate(req);
      if (!out.ok()) {
        return Status(out.status().code(),
                      where + " " + run.Label() + ": " + out.status().message());
      }
      const ReplyScore score = ScoreReply(s, out->text);
      EvalRecord r = ctx.NewRecord(s.subtask, s.id, s.depth, p.length, run);
      r.score = score.score;
      r.reply = out->text;
      r.extracted = score.extracted;
      r.answers = s.answers;
      r.scorer = ScoreKindName(s.score_kind);
      r.prompt_tokens = static_cast<int64_t>(tokens.size());
      r.cut_tokens = p.prompt.cut_tokens;
      r.generated_tokens = out->stats.generated_tokens;
      r.metrics["prefill_s"] = pre->stats.prefill_seconds;
      r.metrics["prefill_reused_tokens"] = static_cast<double>(pre->stats.cached_tokens);
      AddKvMetrics(out->stats, r);
      ICECACHE_RETURN_IF_ERROR(ctx.Save(r));
      progress.Advance(s.max_new_tokens * kDecodeWork, where + " " + run.Label());
      if (ctx.stopped()) return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace icecache::eval

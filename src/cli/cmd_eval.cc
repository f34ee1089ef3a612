// icecache eval TASK: long-context accuracy and fidelity of KV policies x budgets x lengths on
// generated tasks (needle, ruler), task files (leval, jsonl) and real text (fidelity). Results
// go to DIR/TASK.jsonl (one line per run, appended as it finishes; a rerun skips finished runs),
// DIR/TASK.md (the summary table, also printed) and SVG plots.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/write_file.h"
#include "eval/fidelity.h"
#include "eval/generation_runner.h"
#include "eval/lists.h"
#include "eval/plots.h"
#include "eval/summary.h"
#include "eval/task_source.h"

namespace icecache::cli {

namespace {

using namespace icecache::eval;

struct EvalArgs {
  ModelOptions model;
  std::string task;
  std::string policies = "full";
  std::string budgets = "256";
  std::string lengths;
  int limit = 0;
  uint64_t seed = 0;
  std::string out = "eval-out";
  std::vector<std::string> task_files;
  std::string haystack;
  std::string depths;
  std::string subtasks;
  std::string scorer;
  int max_new_tokens = 0;
  int steps = 128;
  int gen_tokens = 64;
  int64_t max_runs = -1;
  std::string progress = "auto";
};

std::string DefaultLengths(const std::string& task) {
  if (task == "needle") return "2K,4K";
  if (task == "ruler") return "4K";
  if (task == "fidelity") return "2K";
  return "";  // leval, jsonl: the model's context
}

// The settings that change samples or scores, part of every record's key: a rerun with other
// settings must not take the old results for its own.
std::string Variant(const EvalArgs& a) {
  std::string v;
  auto add = [&v](const std::string& item) { v += (v.empty() ? "" : ",") + item; };
  if (a.task == "needle" || a.task == "ruler") {
    std::filesystem::path dir = std::filesystem::path(a.haystack).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "essays/" names "essays"
    add("haystack=" + (a.haystack.empty() ? std::string("filler") : dir.filename().string()));
  }
  if (a.task == "fidelity") add(fmt::format("steps={},gen={}", a.steps, a.gen_tokens));
  if (!a.scorer.empty()) add("scorer=" + a.scorer);
  if (a.max_new_tokens > 0) add(fmt::format("max_new_tokens={}", a.max_new_tokens));
  if (a.model.kv.fetch != "now") add("fetch=" + a.model.kv.fetch);
  // What a step attends depends on the working set's size only when fetching behind.
  if (a.model.kv.fetch != "now" && a.model.kv.working_set > 0) {
    add(fmt::format("working_set={}", a.model.kv.working_set));
  }
  return v;
}

// Writes the plots of the task; returns the files written.
Result<std::vector<std::string>> WritePlots(const std::string& dir, const std::string& task,
                                            const std::vector<EvalRecord>& records,
                                            const std::vector<PolicyRun>& planned, int trained) {
  std::vector<std::string> written;
  std::vector<int> budgets;
  for (const PolicyRun& r : planned) {
    if (r.policy != "full" && std::find(budgets.begin(), budgets.end(), r.budget) == budgets.end())
      budgets.push_back(r.budget);
  }
  auto write = [&](const std::string& name, const std::string& svg) -> Status {
    ICECACHE_RETURN_IF_ERROR(WriteFileText(dir + "/" + name, svg));
    written.push_back(dir + "/" + name);
    return Status::Ok();
  };
  if (task == "needle") {
    std::set<std::pair<std::string, int>> configs;
    for (const EvalRecord& r : records) configs.insert({r.policy, r.budget});
    for (const auto& [policy, budget] : configs) {
      // A policy written NAME:RANK names its file NAME-RANK.
      std::string label = policy == "full" ? policy : fmt::format("{}_{}", policy, budget);
      std::replace(label.begin(), label.end(), ':', '-');
      const std::string title = policy == "full"
                                    ? "needle: full KV"
                                    : fmt::format("needle: {}, budget {}", policy, budget);
      ICECACHE_RETURN_IF_ERROR(write("needle_heatmap_" + label + ".svg",
                                     NeedleHeatmapSvg(records, policy, budget, title, trained)));
    }
  }
  if (task == "fidelity") {
    ICECACHE_RETURN_IF_ERROR(
        write("fidelity_budget.svg",
              BudgetPlotSvg(records,
                            {"fidelity: top-1 agreement with full KV against budget",
                             "top-1 agreement", 0, 1, [](const EvalRecord& r) { return r.score; }},
                            budgets, trained)));
    ICECACHE_RETURN_IF_ERROR(
        write("fidelity_kl_budget.svg",
              BudgetPlotSvg(records,
                            {"fidelity: KL(full || policy) against budget", "mean KL (nats)", 0, 0,
                             [](const EvalRecord& r) {
                               auto it = r.metrics.find("kl_mean");
                               return it == r.metrics.end() ? 0.0 : it->second;
                             }},
                            budgets, trained)));
  } else {
    ICECACHE_RETURN_IF_ERROR(write(
        task + "_budget.svg", BudgetPlotSvg(records,
                                            {task + ": score against KV budget", "mean score", 0, 1,
                                             [](const EvalRecord& r) { return r.score; }},
                                            budgets, trained)));
  }
  return written;
}

int Run(const EvalArgs& a) {
  ProgressMeter::Mode pmode;
  if (a.progress == "auto") {
    pmode = ProgressMeter::Mode::kAuto;
  } else if (a.progress == "always") {
    pmode = ProgressMeter::Mode::kAlways;
  } else if (a.progress == "never") {
    pmode = ProgressMeter::Mode::kNever;
  } else {
    return ReportError(InvalidArgument("--progress must be auto, always or never"));
  }
  auto budgets = ParsePositiveInts(a.budgets, "--budgets");
  if (!budgets.ok()) return ReportError(budgets.status());
  const std::vector<std::string> policies = SplitList(a.policies);
  if (policies.empty()) return ReportError(InvalidArgument("--policies: empty list"));
  std::vector<int> lengths;
  const std::string length_list = a.lengths.empty() ? DefaultLengths(a.task) : a.lengths;
  if (!length_list.empty()) {
    auto l = ParseLengths(length_list, 128, 1 << 20);
    if (!l.ok()) return ReportError(l.status());
    lengths = *l;
  }

  // Task input first, so that bad files fail before the model loads.
  std::unique_ptr<TaskSource> source;
  std::vector<FidelityDocument> fidelity_docs;
  FidelityOptions fopt{a.steps, a.gen_tokens, a.limit > 0 ? a.limit : 4};
  if (a.task == "fidelity") {
    if (a.gen_tokens > a.steps) {
      return ReportError(InvalidArgument("--gen-tokens must not exceed --steps"));
    }
    if (!a.task_files.empty()) {
      auto docs = LoadFidelityDocuments(a.task_files);
      if (!docs.ok()) return ReportError(docs.status());
      fidelity_docs = std::move(*docs);
    }
  } else {
    TaskSpec spec;
    spec.task = a.task;
    spec.seed = a.seed;
    spec.limit = a.limit;
    spec.task_files = a.task_files;
    spec.haystack_dir = a.haystack;
    spec.scorer = a.scorer;
    spec.max_new_tokens = a.max_new_tokens;
    spec.subtasks = SplitList(a.subtasks);
    if (!a.depths.empty()) {
      auto d = ParseFractions(a.depths, "--depths");
      if (!d.ok()) return ReportError(d.status());
      spec.depths = *d;
    }
    auto s = TaskSource::Create(spec);
    if (!s.ok()) return ReportError(s.status());
    source = std::move(*s);
  }

  EngineOptions eo = a.model.ToEngineOptions();
  const int max_length = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  eo.context_size = std::max(max_length, a.model.ctx_size);
  eo.max_sequences = 2;  // the prefilled sample and one fork at a time
  eo.kv.policy = "full";
  OffloadForPolicies(policies, &eo);
  auto engine_or = Engine::Create(eo);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  Engine& engine = **engine_or;
  const ModelInfo& info = engine.info();
  if (lengths.empty()) lengths = {info.context_size};
  const std::unique_ptr<TextCodec> codec = MakeEngineCodec(engine);
  // Information lines wait until the input has passed every check, so that an error is the
  // only line a failed command prints.
  std::vector<std::string> info_lines = {
      fmt::format("model: {} on {}, context {} tokens (trained {})", info.name, info.backend,
                  info.context_size, info.trained_context)};
  for (int l : lengths) {
    if (l > info.trained_context) {
      info_lines.push_back(fmt::format(
          "note: {} is beyond the model's trained context ({}): RoPE extrapolation, marked with "
          "a dagger in the table",
          FormatLength(l), info.trained_context));
    }
  }
  auto print_info = [&info_lines] {
    for (const std::string& l : info_lines) std::fprintf(stderr, "%s\n", l.c_str());
    info_lines.clear();
  };

  const std::vector<PolicyRun> planned = ExpandPolicies(policies, *budgets, eo.kv);
  auto avail = ProbePolicies(engine, planned);
  if (!avail.ok()) return ReportError(avail.status());
  {
    std::set<std::string> told;
    for (const auto& [run, reason] : avail->unavailable) {
      if (told.insert(run.policy).second) {
        info_lines.push_back(fmt::format(
            "note: KV policy {} is not available yet ({}); its rows are marked \"not yet "
            "available\"",
            run.policy, reason));
      }
    }
  }

  const std::string jsonl = a.out + "/" + a.task + ".jsonl";
  auto store = ResultStore::Open(jsonl);
  if (!store.ok()) return ReportError(store.status());
  RunSettings settings{a.task, info.name, a.seed, info.trained_context, a.max_runs, Variant(a)};
  EvalContext ctx(engine, **store, settings, avail->available);
  std::vector<std::string> notes = {fmt::format(
      "Model file {}, {}.", info.path.substr(info.path.find_last_of('/') + 1), info.backend)};
  if (source) notes.insert(notes.end(), source->notes().begin(), source->notes().end());

  Status status;
  if (a.task == "fidelity") {
    if (fidelity_docs.empty()) {
      fidelity_docs = FillerFidelityDocuments(fopt.limit, max_length, a.seed);
      notes.push_back("Documents: generated filler prose (no --task).");
    } else {
      notes.push_back(fmt::format("Documents: {}.", fmt::join(a.task_files, ", ")));
    }
    notes.push_back(fmt::format("{} teacher-forced steps and {} greedy tokens per document.",
                                a.steps, a.gen_tokens));
    int skipped = 0;
    auto items = SelectFidelityItems(*codec, fidelity_docs, lengths, fopt, &skipped);
    if (!items.ok()) return ReportError(items.status());
    if (skipped > 0) {
      info_lines.push_back(
          fmt::format("note: {} documents passed over for being shorter than the length", skipped));
    }
    if (items->empty()) {
      return ReportError(InvalidArgument("fidelity: no document is as long as the lengths asked"));
    }
    print_info();
    const PendingWork w = CountPendingFidelity(ctx, *items, fopt);
    ProgressMeter progress(w.runs, w.work, pmode);
    status = RunFidelity(ctx, *items, fopt, progress);
  } else {
    std::vector<PreparedSample> all;
    for (int length : lengths) {
      auto samples = source->Samples(*codec, length);
      if (!samples.ok()) return ReportError(samples.status());
      auto prepared = PrepareSamples(*codec, std::move(*samples), length);
      if (!prepared.ok()) return ReportError(prepared.status());
      std::move(prepared->begin(), prepared->end(), std::back_inserter(all));
    }
    print_info();
    const PendingWork w = CountPending(ctx, all);
    std::fprintf(stderr,
                 "%lld runs to do (%zu samples x %zu KV configurations, %lld done before)\n",
                 static_cast<long long>(w.runs), all.size(), ctx.runs().size(),
                 static_cast<long long>(all.size() * ctx.runs().size() - w.runs));
    ProgressMeter progress(w.runs, w.work, pmode);
    status = RunGeneration(ctx, all, progress);
  }
  if (!status.ok()) return ReportError(status);

  SummaryInput sum;
  sum.task = a.task;
  sum.model = info.name;
  sum.seed = a.seed;
  sum.trained_context = info.trained_context;
  sum.variant = settings.variant;
  sum.records = SelectRecords((*store)->records(), a.task, info.name, a.seed, settings.variant);
  sum.planned = planned;
  sum.unavailable = avail->unavailable;
  for (const auto& u : ctx.late_unavailable()) sum.unavailable.push_back(u);
  sum.notes = notes;
  const std::string md = SummaryMarkdown(sum);
  const std::string md_path = a.out + "/" + a.task + ".md";
  if (Status s = WriteFileText(md_path, md); !s.ok()) return ReportError(s);
  auto plots = WritePlots(a.out, a.task, sum.records, planned, info.trained_context);
  if (!plots.ok()) return ReportError(plots.status());
  std::printf("%s", md.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "wrote %s (%lld new runs), %s, %s\n", jsonl.c_str(),
               static_cast<long long>(ctx.new_runs()), md_path.c_str(),
               fmt::format("{}", fmt::join(*plots, ", ")).c_str());
  if (ctx.stopped()) {
    std::fprintf(stderr,
                 "stopped after %lld new runs (--max-runs); run the same command again "
                 "to continue\n",
                 static_cast<long long>(ctx.new_runs()));
  }
  return 0;
}

}  // namespace

Command AddEvalCommand(CLI::App& root) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* app = root.add_subcommand(
      "eval",
      "Accuracy and fidelity of KV policies x budgets x lengths (needle, ruler, leval, "
      "jsonl, fidelity)");
  app->add_option("task", args->task, "needle, ruler, leval, jsonl or fidelity")
      ->required()
      ->check(CLI::IsMember({"needle", "ruler", "leval", "jsonl", "fidelity"}));
  AddModelOptions(*app, &args->model);
  app->add_option("--policies", args->policies,
                  "KV policies to compare (full is always run: the reference); NAME:RANK runs "
                  "NAME with that --kv-rank (icecache:soft, lychee:centroid)")
      ->capture_default_str();
  app->add_option("--budgets", args->budgets, "KV budgets of the sparse policies (tokens)")
      ->capture_default_str();
  app->add_option("--lengths", args->lengths,
                  "context lengths, e.g. 2K,4K,8K (default: needle 2K,4K; ruler 4K; fidelity 2K; "
                  "leval/jsonl the model's context)");
  app->add_option("--limit", args->limit,
                  "samples per length (needle: depths, default 5; ruler: per subtask, default 4; "
                  "leval/jsonl: per file, default all; fidelity: documents, default 4)")
      ->check(NonNegativeInt());
  app->add_option("--seed", args->seed, "seed of the generated tasks")->capture_default_str();
  app->add_option("--out", args->out, "results folder")->capture_default_str();
  app->add_option(
      "--task", args->task_files,
      "task file(s): leval/jsonl JSONL; fidelity: JSONL (input/context), .txt or folder");
  app->add_option(
      "--haystack", args->haystack,
      "needle/ruler: folder of .txt files for the haystack (default: generated filler)");
  app->add_option("--depths", args->depths, "needle: depths in 0..1 (default: --limit points)");
  app->add_option("--subtasks", args->subtasks, "ruler: subtasks to run (default: all)");
  app->add_option("--scorer", args->scorer,
                  "leval/jsonl: contains, contains_all, option, exact, number, topic or f1 "
                  "(default: chosen per file)");
  app->add_option("--max-new-tokens", args->max_new_tokens,
                  "answer tokens (default: per task and scorer)")
      ->check(NonNegativeInt());
  app->add_option("--steps", args->steps, "fidelity: teacher-forced tokens per document")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app->add_option("--gen-tokens", args->gen_tokens, "fidelity: greedy tokens compared with full KV")
      ->check(NonNegativeInt())
      ->capture_default_str();
  app->add_option("--max-runs", args->max_runs,
                  "stop after this many new runs (a rerun continues where it stopped)")
      ->check(NonNegativeInt());
  app->add_option("--progress", args->progress, "progress bar: auto, always, never")
      ->capture_default_str();
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli

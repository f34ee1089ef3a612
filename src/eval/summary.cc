#include "eval/summary.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "eval/lists.h"

namespace icecache::eval {

namespace {

using Config = std::pair<std::string, int>;

struct Mean {
  double sum = 0;
  int n = 0;
  void Add(double v) {
    sum += v;
    ++n;
  }
  double value() const { return n > 0 ? sum / n : 0; }
};

std::string LengthHeader(int length, int trained) {
  return FormatLength(length) + (trained > 0 && length > trained ? " †" : "");
}

const std::string* UnavailableReason(const SummaryInput& in, const Config& c) {
  for (const auto& [run, reason] : in.unavailable) {
    if (run.policy == c.first && run.budget == c.second) return &reason;
  }
  return nullptr;
}

std::vector<int> Lengths(const std::vector<EvalRecord>& records) {
  std::set<int> s;
  for (const EvalRecord& r : records) s.insert(r.length);
  return {s.begin(), s.end()};
}

// Mean of `value(record)` per (config, column).
template <typename Column, typename Value>
std::map<std::pair<Config, Column>, Mean> Means(const std::vector<EvalRecord>& records,
                                                Column (*column)(const EvalRecord&), Value value) {
  std::map<std::pair<Config, Column>, Mean> m;
  for (const EvalRecord& r : records) m[{{r.policy, r.budget}, column(r)}].Add(value(r));
  return m;
}

int ByLength(const EvalRecord& r) { return r.length; }
double ByDepth(const EvalRecord& r) { return r.depth; }

// One table: a row per configuration, a column per key of `columns`.
template <typename Column>
std::string ScoreTable(const SummaryInput& in, const std::vector<Config>& configs,
                       const std::map<std::pair<Config, Column>, Mean>& means,
                       const std::vector<Column>& columns,
                       const std::vector<std::string>& headers) {
  std::string out = "| policy | budget |";
  for (const std::string& h : headers) out += " " + h + " |";
  out += "\n| --- | --- |";
  for (size_t i = 0; i < headers.size(); ++i) out += " --- |";
  out += "\n";
  const Config full{"full", 0};
  for (const Config& c : configs) {
    out += fmt::format("| {} | {} |", c.first, c.first == "full" ? "-" : std::to_string(c.second));
    const std::string* reason = UnavailableReason(in, c);
    for (const Column& col : columns) {
      auto it = means.find({c, col});
      if (it == means.end()) {
        out += reason ? " not yet available |" : " - |";
        continue;
      }
      std::string cell = fmt::format(" {:.1f}", 100 * it->second.value());
      auto f = means.find({full, col});
      if (c != full && f != means.end()) {
        cell += f->second.value() > 0
                    ? fmt::format(" ({:.0f}%)", 100 * it->second.value() / f->second.value())
                    : " (full: 0)";
        if (f->second.n != it->second.n) cell += fmt::format(" n={}", it->second.n);
      }
      out += cell + " |";
    }
    out += "\n";
  }
  return out;
}

std::string LengthTable(const SummaryInput& in, const std::vector<EvalRecord>& records,
                        const std::vector<Config>& configs) {
  const std::vector<int> lengths = Lengths(records);
  std::vector<std::string> headers;
  for (int l : lengths) headers.push_back(LengthHeader(l, in.trained_context));
  auto means = Means(records, ByLength, [](const EvalRecord& r) { return r.score; });
  std::string out = ScoreTable(in, configs, means, lengths, headers);
  std::string counts;
  for (int l : lengths) {
    auto it = means.find({{"full", 0}, l});
    if (it != means.end()) {
      counts += fmt::format("{}{}: {}", counts.empty() ? "" : ", ", FormatLength(l), it->second.n);
    }
  }
  if (!counts.empty()) out += "\nSamples per length (full KV): " + counts + ".\n";
  return out;
}

std::string CutNote(const std::vector<EvalRecord>& records) {
  std::map<int, std::pair<int, Mean>> cut;  // length -> (samples, tokens removed of cut ones)
  for (const EvalRecord& r : records) {
    if (r.policy != "full") continue;
    auto& [n, removed] = cut[r.length];
    ++n;
    if (r.cut_tokens > 0) removed.Add(static_cast<double>(r.cut_tokens));
  }
  std::string out;
  for (const auto& [length, c] : cut) {
    if (c.second.n == 0) continue;
    out += fmt::format("{}{}: {} of {} samples cut (mean {:.0f} tokens removed)",
                       out.empty() ? "" : "; ", FormatLength(length), c.second.n, c.first,
                       c.second.value());
  }
  if (out.empty()) return "";
  return "Documents longer than the length were cut in the middle (first and last halves kept, "
         "the LongBench convention): " +
         out + ".\n";
}

std::string FidelityTable(const SummaryInput& in, const std::vector<Config>& configs) {
  // The attention-mass recall columns appear when the runs measured it (--kv-recall).
  const bool recall = std::any_of(in.records.begin(), in.records.end(), [](const EvalRecord& r) {
    return r.metrics.count("recall_mean") > 0;
  });
  std::string out = fmt::format(
      "| policy | budget | length | KL(full‖policy) mean | KL max | top-1 agreement | ppl policy "
      "| ppl full | first divergence | n |{}\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |{}\n",
      recall ? " recall mean | recall p10 |" : "", recall ? " --- | --- |" : "");
  const std::vector<int> lengths = Lengths(in.records);
  for (const Config& c : configs) {
    const std::string budget = c.first == "full" ? "-" : std::to_string(c.second);
    if (UnavailableReason(in, c) != nullptr) {
      out += fmt::format("| {} | {} | all | not yet available | | | | | | |\n", c.first, budget);
      continue;
    }
    for (int l : lengths) {
      std::map<std::string, Mean> m;
      int n = 0;
      for (const EvalRecord& r : in.records) {
        if (r.policy != c.first || r.budget != c.second || r.length != l) continue;
        ++n;
        for (const auto& [k, v] : r.metrics) m[k].Add(v);
      }
      if (n == 0) continue;
      out += fmt::format(
          "| {} | {} | {} | {:.4f} | {:.4f} | {:.3f} | {:.2f} | {:.2f} | {:.1f} of {:.0f} | {} |",
          c.first, budget, LengthHeader(l, in.trained_context), m["kl_mean"].value(),
          m["kl_max"].value(), m["top1_agreement"].value(), m["ppl"].value(), m["ppl_full"].value(),
          m["first_divergence"].value(), m["gen_tokens"].value(), n);
      if (recall) {
        out += m["recall_mean"].n > 0 ? fmt::format(" {:.4f} | {:.3f} |", m["recall_mean"].value(),
                                                    m["recall_p10"].value())
                                      : " - | - |";
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace

std::vector<EvalRecord> SelectRecords(const std::vector<EvalRecord>& all, const std::string& task,
                                      const std::string& model, uint64_t seed,
                                      const std::string& variant) {
  std::vector<EvalRecord> out;
  for (const EvalRecord& r : all) {
    if (r.task == task && r.model == model && r.seed == seed && r.variant == variant) {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<std::pair<std::string, int>> DisplayConfigs(const SummaryInput& in) {
  std::vector<std::string> policies = {"full"};
  auto add_policy = [&](const std::string& p) {
    if (std::find(policies.begin(), policies.end(), p) == policies.end()) policies.push_back(p);
  };
  for (const PolicyRun& r : in.planned) add_policy(r.policy);
  for (const EvalRecord& r : in.records) add_policy(r.policy);
  std::set<Config> all;
  for (const PolicyRun& r : in.planned) all.insert({r.policy, r.budget});
  for (const auto& u : in.unavailable) all.insert({u.first.policy, u.first.budget});
  for (const EvalRecord& r : in.records) all.insert({r.policy, r.budget});
  std::vector<Config> out;
  for (const std::string& p : policies) {
    for (const Config& c : all) {
      if (c.first == p) out.push_back(c);
    }
  }
  return out;
}

std::string SummaryMarkdown(const SummaryInput& in) {
  const std::vector<Config> configs = DisplayConfigs(in);
  std::string out = fmt::format("# {}: {}\n\n", in.task, in.model);
  out += fmt::format("- Seed {}{}.\n", in.seed, in.variant.empty() ? "" : "; " + in.variant);
  for (const std::string& n : in.notes) out += "- " + n + "\n";
  out += "\n";
  if (in.task == "fidelity") {
    out +=
        "Teacher-forced over real text: KL(full‖policy) of the next-token distributions "
        "(nats, mean and max over steps), top-1 agreement with full KV, perplexity of the "
        "true tokens; free generation: greedy tokens equal to full KV's before the first "
        "difference. Full KV against its own reference checks the harness: it must show KL 0 "
        "and agreement 1. With --kv-recall, the share of the exact softmax mass on the attended "
        "tokens over the teacher-forced steps (mean, and the mean of each run's 10th "
        "percentile).\n\n";
    out += FidelityTable(in, configs);
  } else {
    out +=
        "Cells: mean score x100 over the samples (1 = right); in parentheses, the share of the "
        "full-KV score at the same length. \"not yet available\": the engine does not implement "
        "that KV policy yet. \"-\": no result yet.\n\n";
    std::set<std::string> subtasks;
    for (const EvalRecord& r : in.records) subtasks.insert(r.subtask);
    if (subtasks.size() > 1) {
      // Mean of the subtask means, so that each subtask weighs the same.
      std::vector<EvalRecord> folded;
      for (const std::string& st : subtasks) {
        std::map<std::tuple<std::string, int, int>, Mean> m;
        for (const EvalRecord& r : in.records) {
          if (r.subtask == st) m[{r.policy, r.budget, r.length}].Add(r.score);
        }
        for (const auto& [k, v] : m) {
          EvalRecord f;
          std::tie(f.policy, f.budget, f.length) = k;
          f.score = v.value();
          folded.push_back(f);
        }
      }
      out += fmt::format("## All subtasks (mean of {} subtask means)\n\n", subtasks.size());
      out += LengthTable(in, folded, configs);
      out += "\n";
    }
    for (const std::string& st : subtasks) {
      std::vector<EvalRecord> rs;
      for (const EvalRecord& r : in.records) {
        if (r.subtask == st) rs.push_back(r);
      }
      if (subtasks.size() > 1 || st != in.task) {
        out += fmt::format("## {} (scorer: {})\n\n", st, rs.front().scorer);
      }
      out += LengthTable(in, rs, configs);
      if (const std::string cut = CutNote(rs); !cut.empty()) out += "\n" + cut;
      if (in.task == "needle") {
        std::set<double> depth_set;
        for (const EvalRecord& r : rs) depth_set.insert(r.depth);
        const std::vector<double> depths(depth_set.begin(), depth_set.end());
        std::vector<std::string> headers;
        for (double d : depths) headers.push_back(fmt::format("{:.0f}%", 100 * d));
        out += "\nBy needle depth (all lengths together):\n\n";
        out +=
            ScoreTable(in, configs, Means(rs, ByDepth, [](const EvalRecord& r) { return r.score; }),
                       depths, headers);
      }
      out += "\n";
    }
    if (in.records.empty()) out += "No results yet.\n\n";
  }
  bool extrapolated = false;
  for (const EvalRecord& r : in.records) extrapolated = extrapolated || r.extrapolated;
  if (extrapolated) {
    out += fmt::format(
        "† beyond the model's trained context ({} tokens): positions extrapolated with RoPE.\n\n",
        in.trained_context);
  }
  // One line per policy: its budgets share the reason.
  std::set<std::string> told;
  for (const auto& [run, reason] : in.unavailable) {
    if (told.insert(run.policy).second) {
      out += fmt::format("Not yet available: {} ({}).\n", run.policy, reason);
    }
  }
  return out;
}

}  // namespace icecache::eval

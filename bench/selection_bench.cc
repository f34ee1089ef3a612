// Selection cost against context length: drives quest's linear scan, lychee and icecache
// SequenceIndexes directly (no model in the loop) and prints, per context and budget, the time
// per Select call, the index work per (Select, KV head) (SelectionStats: nodes whose bound was
// computed, exact q.k products) and the attention-mass recall of the selection.
//
//   selection_bench record --text F --out KEYS [--contexts 1K,...,32K] [--steps 16]
//                          [--layers 1,7,13,19,25] [--model default] [--threads 0]
//       runs the model over the text (first max(context)+steps tokens) and saves the keys of
//       the chosen layers and the queries of the steps that follow each context.
//   selection_bench real --keys KEYS [--contexts ...] [--budgets 256,1024]
//                        [--policies quest,lychee,icecache] [--model default]
//                        [--search-radius W] [--page 16]
//       measures on the recorded keys (the model's tokenizer gives lychee its text boundaries);
//       --search-radius sets icecache's and lychee's (--kv-search-radius; default: theirs),
//       --page the tokens per page of every policy (--kv-page).
//   selection_bench build [--context 128K] [--layers 32] [--kv-heads 8] [--dim 128]
//                         [--threads 0,1,...] [--policy icecache] [--budget 2048] [--dtype bf16]
//                         [--decode N] [--rank auto] [--prepare 0|1] [--route host|device]
//       the prompt's bulk index build as the engine runs it after prefill (every list of a
//       sequence, one OnAppend, host worker threads), timed for each thread count listed; with
//       --decode N, then N decode tokens appended one at a time, each OnAppend timed; with
//       --prepare 1 also DeviceSelection::Prepare before each token (rank centroid or quest);
//       --route device (with --prepare 1): icecache inserts at the routes the device selection
//       computes (--kv-route device; here the CPU's reference op, inside Prepare), and the
//       median OnAppend of the steps that insert is printed with the tokens placed each way.
//   selection_bench synthetic [--contexts 1K,...,1M] [--budgets 256,1024] [--policies ...]
//                             [--steps 32] [--topics 256] [--search-radius W] [--page 16]
//       one layer, one KV head, clustered Gaussian keys (bench/selection/synthetic_keys.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "icecache/engine.h"
#include "model/loader.h"
#include "selection/bulk_build.h"
#include "selection/driver.h"
#include "selection/key_file.h"
#include "selection/recorder.h"
#include "selection/synthetic_keys.h"

namespace icecache::bench {
namespace {

using Args = std::map<std::string, std::string>;

std::string Get(const Args& a, const std::string& key, const std::string& fallback) {
  auto it = a.find(key);
  return it == a.end() ? fallback : it->second;
}

Result<std::vector<int64_t>> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) mult = 1024;
    if (!item.empty() && (item.back() == 'M' || item.back() == 'm')) mult = 1024 * 1024;
    if (mult > 1) item.pop_back();
    try {
      size_t used = 0;
      const int64_t v = std::stoll(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v * mult);
    } catch (const std::exception&) {
      return InvalidArgument("'" + item + "' is not a number");
    }
  }
  if (out.empty()) return InvalidArgument("empty list");
  return out;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

int Record(const Args& a) {
  const std::string text_path = Get(a, "text", ""), out = Get(a, "out", "");
  if (text_path.empty() || out.empty())
    return Fail(InvalidArgument("record needs --text and --out"));
  auto contexts = ParseList(Get(a, "contexts", "1K,2K,4K,8K,16K,32K"));
  auto layers = ParseList(Get(a, "layers", "1,7,13,19,25"));
  auto steps = ParseList(Get(a, "steps", "16"));
  if (!contexts.ok() || !layers.ok() || !steps.ok()) return Fail(InvalidArgument("bad list"));
  auto path = ResolveModelPath(Get(a, "model", "default"));
  if (!path.ok()) return Fail(path.status());
  auto model = LoadModel(*path);
  if (!model.ok()) return Fail(model.status());
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return Fail(NotFound(text_path + ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> tokens = (*model)->tokenizer->Encode(ss.str(), true, false);
  int64_t need = 0;
  std::vector<int64_t> qpos;
  for (int64_t c : *contexts) {
    for (int64_t s = 0; s < (*steps)[0]; ++s) qpos.push_back(c + s);
    need = std::max(need, c + (*steps)[0]);
  }
  std::sort(qpos.begin(), qpos.end());
  qpos.erase(std::unique(qpos.begin(), qpos.end()), qpos.end());
  if (static_cast<int64_t>(tokens.size()) < need) {
    return Fail(InvalidArgument(text_path + " has " + std::to_string(tokens.size()) + " tokens; " +
                                std::to_string(need) + " needed"));
  }
  tokens.resize(static_cast<size_t>(need));
  std::vector<int32_t> ls(layers->begin(), layers->end());
  const int threads = static_cast<int>(std::stol(Get(a, "threads", "0")));
  auto rec = RecordKeys(*path, tokens, ls, qpos, threads, 512);
  if (!rec.ok()) return Fail(rec.status());
  rec->source += " of " + text_path;
  Status s = SaveRecordedKeys(*rec, out);
  if (!s.ok()) return Fail(s);
  std::printf("saved %s: %s; layers", out.c_str(), rec->source.c_str());
  for (int l : ls) std::printf(" %d", l);
  std::printf("; %zu query positions\n", qpos.size());
  return 0;
}

struct Row {
  int64_t context;
  int budget;
  std::string policy;
  DriveResult r;
};

void PrintHeader() {
  std::printf(
      "| context | budget | policy | us / Select (median) | nodes / KV head | keys scored / KV "
      "head | nodes vs quest's pages | tokens selected / KV head | recall | build s | index "
      "MiB | us update / step |\n");
  std::printf(
      "|--------:|-------:|:-------|---------------------:|----------------:|-----------------:"
      "|-------:|------:|------:|------:|------:|------:|\n");
  std::fflush(stdout);
}

// One table row; `quest_nodes` is quest's count at the same context and budget (0: none yet).
void PrintRow(const Row& w, double quest_nodes) {
  if (!w.r.supported) {
    std::printf("| %lld | %d | %s | unsupported: %s | | | | | | | | |\n",
                static_cast<long long>(w.context), w.budget, w.policy.c_str(), w.r.note.c_str());
    std::fflush(stdout);
    return;
  }
  std::string vs = "-";
  if (quest_nodes > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * w.r.nodes / quest_nodes);
    vs = buf;
  }
  std::printf("| %lld | %d | %s | %.1f | %.1f | %.1f | %s | %.1f | %.4f | %.2f | %.2f | %.1f |\n",
              static_cast<long long>(w.context), w.budget, w.policy.c_str(),
              1e6 * w.r.MedianSelect(), w.r.nodes, w.r.keys_scored, vs.c_str(), w.r.tokens_selected,
              w.r.recall, w.r.build_seconds,
              static_cast<double>(w.r.index_bytes) / (1024.0 * 1024.0),
              w.r.steps > 0 ? 1e6 * w.r.update_seconds / w.r.steps : 0.0);
  std::fflush(stdout);
}

// Growth: exponent k of cost ~ context^k between the smallest and largest context.
void PrintGrowth(const std::vector<Row>& rows, int kv_heads) {
  std::printf(
      "\ngrowth exponent k (cost ~ context^k, smallest to largest context; %d KV head%s)\n\n",
      kv_heads, kv_heads > 1 ? "s" : "");
  std::printf(
      "| budget | policy | k of us / Select | k of nodes / KV head |\n|---:|:--|---:|---:|\n");
  std::map<std::pair<int, std::string>, std::pair<const Row*, const Row*>> span;
  for (const Row& w : rows) {
    if (!w.r.supported) continue;
    auto& s = span[{w.budget, w.policy}];
    if (s.first == nullptr || w.context < s.first->context) s.first = &w;
    if (s.second == nullptr || w.context > s.second->context) s.second = &w;
  }
  for (const auto& [key, s] : span) {
    if (s.first == s.second) continue;
    const double lc = std::log(static_cast<double>(s.second->context) / s.first->context);
    const double kt = std::log(s.second->r.MedianSelect() / s.first->r.MedianSelect()) / lc;
    const double kn =
        std::log(std::max(s.second->r.nodes, 1e-9) / std::max(s.first->r.nodes, 1e-9)) / lc;
    std::printf("| %d | %s | %.2f | %.2f |\n", key.first, key.second.c_str(), kt, kn);
  }
}

float SearchRadius(const Args& a) { return std::stof(Get(a, "search-radius", "-1")); }
int PageSize(const Args& a) { return static_cast<int>(std::stol(Get(a, "page", "16"))); }

// Rows are printed as they are measured (list quest first for the "vs quest" column).
// search_radius: KvConfig::search_radius of icecache and lychee (-1: their defaults); page: tokens
// per page of every policy. A policy written NAME:RANK (lychee:spread) runs with that rank.
int Measure(const KeySource& keys, const std::vector<int64_t>& contexts,
            const std::vector<int64_t>& budgets, const std::vector<std::string>& policies,
            int steps, int chunk, float search_radius, int page) {
  std::vector<Row> rows;
  if (search_radius >= 0) std::printf("icecache and lychee: search radius %g\n\n", search_radius);
  if (page != 16) std::printf("pages of %d tokens\n\n", page);
  KeySource src = keys;
  src.layout.page_size = page;
  PrintHeader();
  for (int64_t c : contexts) {
    for (int64_t b : budgets) {
      double quest_nodes = 0;
      for (const std::string& p : policies) {
        KvConfig kv;
        const size_t colon = p.find(':');  // NAME:RANK, e.g. lychee:spread
        kv.policy = p.substr(0, colon);
        if (colon != std::string::npos) kv.rank = p.substr(colon + 1);
        kv.budget = static_cast<int>(b);
        kv.search_radius = search_radius;
        kv.page_size = page;
        if (Status s = kv.Validate(); !s.ok()) return Fail(s);
        DriveOptions o;
        o.context = c;
        o.steps = steps;
        o.chunk = chunk;
        std::fprintf(stderr, "context %lld budget %lld %s ...\n", static_cast<long long>(c),
                     static_cast<long long>(b), p.c_str());
        auto r = DriveIndex(src, kv, o);
        if (!r.ok()) return Fail(r.status());
        rows.push_back({c, static_cast<int>(b), p, std::move(r).value()});
        if (p == "quest" && rows.back().r.supported) quest_nodes = rows.back().r.nodes;
        PrintRow(rows.back(), quest_nodes);
      }
    }
  }
  PrintGrowth(rows, src.layout.n_kv_heads);
  return 0;
}

int Real(const Args& a) {
  auto keys = LoadRecordedKeys(Get(a, "keys", ""));
  if (!keys.ok()) return Fail(keys.status());
  const RecordedKeys& r = *keys;
  auto contexts = ParseList(Get(a, "contexts", "1K,2K,4K,8K,16K,32K"));
  auto budgets = ParseList(Get(a, "budgets", "256,1024"));
  if (!contexts.ok() || !budgets.ok()) return Fail(InvalidArgument("bad list"));
  const int steps = static_cast<int>(std::stol(Get(a, "steps", "16")));
  for (int64_t c : *contexts) {
    for (int64_t s = 0; s < steps; ++s) {
      if (r.QueryIndex(c + s) < 0) {
        return Fail(InvalidArgument("no recorded query at position " + std::to_string(c + s) +
                                    " (record with these --contexts and --steps)"));
      }
    }
  }
  auto path = ResolveModelPath(Get(a, "model", "default"));
  if (!path.ok()) return Fail(path.status());
  auto model = LoadModel(*path);  // for the tokenizer (lychee's text boundaries)
  if (!model.ok()) return Fail(model.status());
  KeySource src;
  src.layout =
      KvLayout{static_cast<int>(r.layers.size()), r.n_kv_heads, r.head_dim, 16, DType::kF32};
  src.n_heads = r.n_heads;
  src.tokenizer = (*model)->tokenizer.get();
  src.key = [&r](int l, int h, int64_t pos, float* k) {
    const float* s = r.Key(l, pos, h);
    std::copy(s, s + r.head_dim, k);
  };
  src.token = [&r](int64_t pos) { return r.tokens[static_cast<size_t>(pos)]; };
  src.query = [&r](int l, int64_t pos, float* q) {
    const float* s = r.Query(l, r.QueryIndex(pos));
    std::copy(s, s + static_cast<int64_t>(r.n_heads) * r.head_dim, q);
  };
  std::printf("real keys: %s; layers", r.source.c_str());
  for (int l : r.layers) std::printf(" %d", l);
  std::printf(" (%d KV heads, %d query heads, head_dim %d); %d decode steps per context\n\n",
              r.n_kv_heads, r.n_heads, r.head_dim, steps);
  return Measure(src, *contexts, *budgets, Split(Get(a, "policies", "quest,lychee,icecache")),
                 steps, 512, SearchRadius(a), PageSize(a));
}

int Synthetic(const Args& a) {
  auto contexts = ParseList(Get(a, "contexts", "1K,4K,16K,64K,256K,1M"));
  auto budgets = ParseList(Get(a, "budgets", "256,1024"));
  if (!contexts.ok() || !budgets.ok()) return Fail(InvalidArgument("bad list"));
  SyntheticSpec spec;
  spec.topics = static_cast<int>(std::stol(Get(a, "topics", "256")));
  const int steps = static_cast<int>(std::stol(Get(a, "steps", "32")));
  SyntheticKeys gen(spec);
  KeySource src;
  src.layout = KvLayout{1, 1, spec.dim, 16, DType::kF32};
  src.n_heads = 1;
  src.key = [&gen](int, int, int64_t pos, float* k) { gen.Key(pos, k); };
  src.token = [](int64_t) { return 0; };
  src.query = [&gen](int, int64_t pos, float* q) { gen.Query(pos, q); };
  std::printf(
      "synthetic keys: 1 layer, 1 KV head, 1 query head, d %d; %d topics, segments of %d tokens, "
      "key noise %.2f, query noise %.2f around the centre of the topic of a random earlier token; "
      "%d decode steps per "
      "context\n\n",
      spec.dim, spec.topics, spec.segment, spec.key_noise, spec.query_noise, steps);
  return Measure(src, *contexts, *budgets, Split(Get(a, "policies", "quest,lychee,icecache")),
                 steps, static_cast<int>(std::stol(Get(a, "chunk", "512"))), SearchRadius(a),
                 PageSize(a));
}

int Build(const Args& a) {
  auto context = ParseList(Get(a, "context", "128K"));
  auto threads = ParseList(Get(a, "threads", "0"));
  if (!context.ok() || !threads.ok()) return Fail(InvalidArgument("bad list"));
  BulkBuildOptions o;
  o.context = context->front();
  o.layers = static_cast<int>(std::stol(Get(a, "layers", "32")));
  o.kv_heads = static_cast<int>(std::stol(Get(a, "kv-heads", "8")));
  o.dim = static_cast<int>(std::stol(Get(a, "dim", "128")));
  const std::string dtype = Get(a, "dtype", "bf16");
  if (dtype != "bf16" && dtype != "f32") return Fail(InvalidArgument("--dtype: bf16 or f32"));
  o.dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  o.kv.policy = Get(a, "policy", "icecache");
  o.kv.budget = static_cast<int>(std::stol(Get(a, "budget", "2048")));
  o.kv.rank = Get(a, "rank", "auto");
  o.decode = static_cast<int>(std::stol(Get(a, "decode", "0")));
  o.prepare = Get(a, "prepare", "0") == "1";
  const std::string route = Get(a, "route", "host");
  if (route != "host" && route != "device") return Fail(InvalidArgument("--route: host or device"));
  o.device_routes = route == "device";
  std::printf(
      "bulk build of %d x %d lists of %lld keys (d %d, %s pages), policy %s rank %s budget %d\n\n",
      o.layers, o.kv_heads, static_cast<long long>(o.context), o.dim, dtype.c_str(),
      o.kv.policy.c_str(), o.kv.rank.c_str(), o.kv.budget);
  std::printf(
      "| threads | fill s | build s | ms per list | lists / s | index MiB |\n"
      "|--:|--:|--:|--:|--:|--:|\n");
  for (int64_t t : *threads) {
    o.threads = static_cast<int>(t);
    auto r = RunBulkBuild(o);
    if (!r.ok()) return Fail(r.status());
    std::printf("| %d | %.2f | %.2f | %.1f | %.1f | %.1f |\n", r->threads, r->fill_seconds,
                r->build_seconds, 1e3 * r->build_seconds / static_cast<double>(r->lists),
                static_cast<double>(r->lists) / r->build_seconds,
                static_cast<double>(r->index_bytes) / (1 << 20));
    if (!r->step_seconds.empty()) {
      std::printf("\nOnAppend ms of decode tokens 1 to %zu (%d threads):", r->step_seconds.size(),
                  r->threads);
      for (double s : r->step_seconds) std::printf(" %.2f", 1e3 * s);
      // The steps that insert (a build's first steps may not; a step under 0.05 ms took nothing
      // in).
      std::vector<double> busy;
      for (double s : r->step_seconds) {
        if (s >= 5e-5) busy.push_back(1e3 * s);
      }
      std::sort(busy.begin(), busy.end());
      std::printf(
          "\nmedian OnAppend of the %zu steps that took tokens in: %.3f ms; tokens inserted at "
          "device routes %lld, by the tree's search %lld\n\n",
          busy.size(), busy.empty() ? 0.0 : busy[busy.size() / 2],
          static_cast<long long>(r->insertions.routed),
          static_cast<long long>(r->insertions.searched));
    }
    if (!r->prepare_seconds.empty()) {
      std::printf("DeviceSelection::Prepare ms before decode tokens 1 to %zu:",
                  r->prepare_seconds.size());
      for (double s : r->prepare_seconds) std::printf(" %.3f", 1e3 * s);
      std::printf("\n\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace icecache::bench

int main(int argc, char** argv) {
  using namespace icecache::bench;
  if (argc < 2) {
    std::fprintf(stderr, "usage: selection_bench record|real|synthetic|build [--key value ...]\n");
    return 2;
  }
  Args a;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "error: expected --option, got '%s'\n", argv[i]);
      return 2;
    }
    a[k.substr(2)] = argv[i + 1];
  }
  if ((argc - 2) % 2 != 0) {
    std::fprintf(stderr, "error: option '%s' needs a value\n", argv[argc - 1]);
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "record") return Record(a);
    if (mode == "real") return Real(a);
    if (mode == "synthetic") return Synthetic(a);
    if (mode == "build") return Build(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "error: unknown mode '%s' (record, real, synthetic or build)\n",
               mode.c_str());
  return 2;
}

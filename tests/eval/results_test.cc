// The results file (append, reopen, repair of a cut-short last line), the summary table and the
// SVG plots.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "eval/fidelity_metrics.h"
#include "eval/plots.h"
#include "eval/result_store.h"
#include "eval/summary.h"
#include "eval/svg.h"
#include "testing/paths.h"

namespace icecache::eval {
namespace {

EvalRecord Rec(const std::string& policy, int budget, int length, double depth, double score,
               const std::string& id = "s") {
  EvalRecord r;
  r.task = "needle";
  r.subtask = "needle";
  r.id = id;
  r.policy = policy;
  r.budget = budget;
  r.length = length;
  r.depth = depth;
  r.seed = 3;
  r.model = "m";
  r.score = score;
  r.reply = "r\xff";  // invalid UTF-8 must not break the file
  r.answers = {"a"};
  r.metrics["prefill_s"] = 1.5;
  return r;
}

TEST(ResultStoreTest, AppendReopenAndSkip) {
  const std::string path = icecache::testing::MakeTempDir("store") + "/sub/needle.jsonl";
  {
    auto s = ResultStore::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_TRUE((*s)->records().empty());
    ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 0.5, 1)).ok());
    ASSERT_TRUE((*s)->Append(Rec("quest", 64, 1024, 0.5, 0)).ok());
    // Flushed: another reader sees both lines before the store closes.
    const std::string text = icecache::testing::ReadFileText(path);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  }
  auto s = ResultStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->records().size(), 2u);
  EXPECT_TRUE((*s)->Has(Rec("full", 0, 1024, 0.5, 0).Key()));
  EXPECT_FALSE((*s)->Has(Rec("full", 0, 1024, 0.25, 0).Key()));
  EXPECT_FALSE((*s)->Has(Rec("full", 0, 2048, 0.5, 0).Key()));
  const EvalRecord& r = (*s)->records()[1];
  EXPECT_EQ(r.policy, "quest");
  EXPECT_EQ(r.budget, 64);
  EXPECT_DOUBLE_EQ(r.metrics.at("prefill_s"), 1.5);
}

TEST(ResultStoreTest, CutShortLastLineIsDropped) {
  const std::string path = icecache::testing::MakeTempDir("store") + "/needle.jsonl";
  {
    auto s = ResultStore::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 0, 1, "a")).ok());
    ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 1, 1, "b")).ok());
  }
  const std::string text = icecache::testing::ReadFileText(path);
  std::filesystem::resize_file(path, text.size() - 20);  // an interrupted write
  auto s = ResultStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->records().size(), 1u);
  ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 1, 1, "b")).ok());
  auto again = ResultStore::Open(path);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)->records().size(), 2u);
}

// A write that fails part way (here the process's file size limit, as a full disk would)
// returns an error, leaves the records before it intact, and the store goes on appending after
// them: the next line does not start inside the cut-short one.
TEST(ResultStoreTest, AFailedWriteLosesNoRecordAndLeavesNoCutShortLine) {
  const std::string path = icecache::testing::MakeTempDir("store") + "/needle.jsonl";
  auto s = ResultStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 0, 1, "a")).ok());
  const uintmax_t before = std::filesystem::file_size(path);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_TRUE(old.rlim_cur == RLIM_INFINITY || old.rlim_cur > before + 40);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  rlimit small = old;
  small.rlim_cur = before + 40;  // room for part of the next line only
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status failed = (*s)->Append(Rec("full", 0, 1024, 1, 1, "b"));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  EXPECT_NE(failed.message().find(path), std::string::npos) << failed.message();
  EXPECT_EQ(std::filesystem::file_size(path), before);  // the part written was cut back off
  EXPECT_FALSE((*s)->Has(Rec("full", 0, 1024, 1, 1, "b").Key()));

  ASSERT_TRUE((*s)->Append(Rec("full", 0, 1024, 1, 1, "b")).ok());
  auto again = ResultStore::Open(path);
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ((*again)->records().size(), 2u);
  EXPECT_EQ((*again)->records()[0].id, "a");
  EXPECT_EQ((*again)->records()[1].id, "b");
}

TEST(ResultStoreTest, BadMiddleLineIsAnErrorNamingIt) {
  const std::string path = icecache::testing::MakeTempDir("store") + "/needle.jsonl";
  std::ofstream(path) << RecordToJson(Rec("full", 0, 1024, 0, 1)) << "\n{oops\n"
                      << RecordToJson(Rec("full", 0, 1024, 1, 1)) << "\n";
  auto s = ResultStore::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path + ":2:"), std::string::npos) << s.status().message();
}

TEST(SummaryTest, ScoresShareOfFullAndUnavailableRows) {
  SummaryInput in;
  in.task = "needle";
  in.model = "m";
  in.seed = 3;
  in.trained_context = 2048;
  for (double d : {0.0, 1.0}) {
    in.records.push_back(Rec("full", 0, 1024, d, 1, "d" + std::to_string(d)));
    in.records.push_back(Rec("full", 0, 4096, d, d, "d" + std::to_string(d)));
    in.records.push_back(Rec("quest", 64, 1024, d, d, "d" + std::to_string(d)));
  }
  for (EvalRecord& r : in.records) r.extrapolated = r.length > 2048;
  PolicyRun ice{"icecache", 64, {}};
  in.unavailable.push_back({ice, "not implemented yet"});
  in.planned = {PolicyRun{"full", 0, {}}, PolicyRun{"quest", 64, {}}, ice};
  const std::string md = SummaryMarkdown(in);
  EXPECT_NE(md.find("| policy | budget | 1K | 4K † |"), std::string::npos) << md;
  EXPECT_NE(md.find("| full | - | 100.0 | 50.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| quest | 64 | 50.0 (50%) | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| icecache | 64 | not yet available | not yet available |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("RoPE"), std::string::npos);
  EXPECT_NE(md.find("| policy | budget | 0% | 100% |"), std::string::npos) << md;
  // Display order: full, then the planned order.
  const auto configs = DisplayConfigs(in);
  ASSERT_EQ(configs.size(), 3u);
  EXPECT_EQ(configs[0].first, "full");
  EXPECT_EQ(configs[1].first, "quest");
}

TEST(SvgTest, PlotsAreWellFormedAndShowTheData) {
  std::vector<EvalRecord> recs;
  recs.push_back(Rec("full", 0, 1024, 0, 1));
  recs.push_back(Rec("full", 0, 1024, 1, 0));
  recs.push_back(Rec("quest", 64, 1024, 0, 0.5));
  recs.push_back(Rec("quest", 128, 1024, 0, 0.75));
  const std::string heat = NeedleHeatmapSvg(recs, "full", 0, "needle <full>", 0);
  EXPECT_EQ(heat.rfind("<svg", 0), 0u);
  EXPECT_NE(heat.find("</svg>"), std::string::npos);
  EXPECT_NE(heat.find("needle &lt;full&gt;"), std::string::npos);
  EXPECT_NE(heat.find(">1.00<"), std::string::npos);
  EXPECT_NE(heat.find(">0.00<"), std::string::npos);
  EXPECT_NE(heat.find(ScoreColor(1)), std::string::npos);
  const std::string plot = BudgetPlotSvg(
      recs, {"t", "score", 0, 1, [](const EvalRecord& r) { return r.score; }}, {64, 128, 256}, 0);
  EXPECT_NE(plot.find("<polyline"), std::string::npos);
  EXPECT_NE(plot.find(">quest<"), std::string::npos);
  EXPECT_NE(plot.find(">256<"), std::string::npos);
  EXPECT_NE(plot.find("stroke-dasharray"), std::string::npos);  // the full-KV line
  EXPECT_EQ(std::count(plot.begin(), plot.end(), '<'), std::count(plot.begin(), plot.end(), '>'));
  EXPECT_EQ(ScoreColor(0), "#d73027");
  EXPECT_EQ(ScoreColor(1), "#1a9850");
}

TEST(FidelityMetricsTest, KlOnKnownDistributions) {
  const std::vector<float> p = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  const std::vector<float> q = {std::log(0.25f), std::log(0.25f), std::log(0.5f)};
  EXPECT_NEAR(KlDivergence(p, p), 0.0, 1e-12);
  // 0.5 ln 2 + 0 + 0.25 ln 0.5 = 0.25 ln 2
  EXPECT_NEAR(KlDivergence(p, q), 0.25 * std::log(2.0), 1e-6);
  EXPECT_GT(KlDivergence(q, p), 0);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 5, 4}, c = {1, 2};
  EXPECT_EQ(FirstDivergence(a, a), 4u);
  EXPECT_EQ(FirstDivergence(a, b), 2u);
  EXPECT_EQ(FirstDivergence(a, c), 2u);
  const std::vector<float> lp = {std::log(0.5f), std::log(0.25f)};
  EXPECT_NEAR(MeanNll(lp), (std::log(2.0) + std::log(4.0)) / 2, 1e-6);
}

}  // namespace
}  // namespace icecache::eval

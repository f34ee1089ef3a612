// The --kv-stats report (cli/stats_json.h): how it shows a step's time split, the fetch's rate,
// the prefetch and where the KV lives.
#include <gtest/gtest.h>

#include <string>

#include "cli/stats_json.h"

namespace icecache::cli {
namespace {

KvStats Sample() {
  KvStats s;
  s.policy = "icecache";
  s.decode_steps = 16;
  s.kv_offloaded = true;
  s.device_select = true;
  s.update_seconds = 0.5e-3;
  s.other_seconds = 11.5e-3;
  return s;
}

TEST(KvStatsTextTest, DeviceSelectionWithoutTimingIsNotShownAsZeroPhases) {
  const std::string text = KvStatsText(Sample());
  EXPECT_NE(text.find("time per step    12.000 ms: index update 0.500 ms (4.2%), rest 11.500 ms"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("run with --kv-timing"), std::string::npos) << text;
  EXPECT_EQ(text.find("select 0.000"), std::string::npos) << text;
}

TEST(KvStatsTextTest, TimedPhasesAreSplit) {
  KvStats s = Sample();
  s.select_seconds = 1e-3;
  s.fetch_seconds = 4e-3;
  s.attend_seconds = 0.5e-3;
  s.other_seconds = 6e-3;
  const std::string text = KvStatsText(s);
  EXPECT_NE(text.find("time per step    12.000 ms: select 1.000 ms (8.3%), fetch 4.000 ms "
                      "(33.3%), attend 0.500 ms (4.2%), index update 0.500 ms (4.2%), rest "
                      "6.000 ms (50.0%)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("--kv-timing"), std::string::npos) << text;
}

TEST(KvStatsTextTest, TimedFetchShowsItsRateWithoutThePrefetchedBytes) {
  KvStats s = Sample();
  s.select_seconds = 1e-3;
  s.fetch_seconds = 4e-3;
  s.pages_fetched = 24000;
  s.bytes_fetched = 200e6;
  EXPECT_NE(
      KvStatsText(s).find("fetch rate       50.0 GB/s over the host link (190.7 MiB per step"),
      std::string::npos)
      << KvStatsText(s);
  // A quarter of the pages came by the prefetch: only the rest crossed in the fetch time.
  s.pages_prefetched = 8000;
  EXPECT_NE(
      KvStatsText(s).find("fetch rate       37.5 GB/s over the host link (143.1 MiB per step"),
      std::string::npos)
      << KvStatsText(s);
  // KV not offloaded (both tiers in host memory), or phases not timed: no rate.
  s.kv_offloaded = false;
  EXPECT_EQ(KvStatsText(s).find("fetch rate"), std::string::npos) << KvStatsText(s);
  s.kv_offloaded = true;
  s.select_seconds = s.fetch_seconds = 0;
  EXPECT_EQ(KvStatsText(s).find("fetch rate"), std::string::npos) << KvStatsText(s);
}

TEST(KvStatsTextTest, PrefetchShowsItsStepsAndTheTunersTiming) {
  KvStats s = Sample();
  EXPECT_EQ(KvStatsText(s).find("prefetch"), std::string::npos);
  s.prefetch_steps = 6;
  s.pages_prefetched = 120.5;
  s.prefetch_probe_on_seconds = 14.9e-3;
  s.prefetch_probe_off_seconds = 12.0e-3;
  const std::string text = KvStatsText(s);
  EXPECT_NE(text.find("prefetch         120.5 pages per step brought in ahead of their layer "
                      "(in the bytes above), in 6 of 16 steps"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prefetch timing  14.900 ms per step with it, 12.000 ms without"),
            std::string::npos)
      << text;
  const nlohmann::json j = KvStatsToJson(s);
  EXPECT_EQ(j["prefetch_steps"], 6);
  EXPECT_DOUBLE_EQ(j["prefetch_probe_off_seconds"].get<double>(), 12.0e-3);
}

TEST(KvStatsTextTest, MemoryLineSaysWhereTheKvLives) {
  KvStats s = Sample();
  s.host_kv_bytes = int64_t{16} << 30;
  s.working_set_bytes = int64_t{328} << 20;
  EXPECT_NE(KvStatsText(s).find("memory           host KV 16.00 GiB (pinned host memory), working "
                                "set 328.0 MiB (device memory)"),
            std::string::npos)
      << KvStatsText(s);
  // Full attention on a GPU: the whole KV in device memory, no host tier.
  s.kv_offloaded = false;
  s.kv_on_device = true;
  s.working_set_bytes = 0;
  EXPECT_NE(KvStatsText(s).find("memory           device KV 16.00 GiB, working set 0 B"),
            std::string::npos)
      << KvStatsText(s);
  EXPECT_EQ(KvStatsToJson(s)["kv_on_device"], true);
  // The CPU: both tiers in host memory.
  s.kv_on_device = false;
  EXPECT_NE(KvStatsText(s).find("memory           host KV 16.00 GiB, working set 0 B"),
            std::string::npos)
      << KvStatsText(s);
}

}  // namespace
}  // namespace icecache::cli

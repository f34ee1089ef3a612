// CUDA paged attention against a dense float64 reference: shuffled page ids, partly filled
// pages, positions out of order inside rows (semantic pages), sparse page lists, empty rows,
// GQA group sizes 1..9 and 20 (one or two head chunks), head dims 64 and 128, page sizes that do
// and do not divide the 64-slot tiles (and one larger than a tile), causal and not; the split-KV
// decode kernel (one or a few queries per row, many splits) and the tensor-core prefill kernel
// (runs of queries, including a sequence boundary inside a 64-query tile).
#include <gtest/gtest.h>

#include <numeric>

#include "cuda_test_util.h"

namespace icecache {
namespace {

using testing::Bf16Exact;
using testing::I32ToDevice;
using testing::ToDevice;
using testing::ToHostF32;

struct Seq {
  int64_t context;  // keys at positions [0, context)
  int64_t queries;  // queries at positions [context - queries, context)
};

struct Case {
  std::string name;
  int heads, kv_heads, head_dim, page_size;
  bool causal;
  std::vector<Seq> seqs;
  bool shuffle_positions = false;
  bool sparse = false;
  double tol = 1e-2;
};

void RunCase(Backend& gpu, const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name);
  const int d = c.head_dim, ps = c.page_size, group = c.heads / c.kv_heads;
  // Page contents per row, in list order.
  std::vector<std::vector<int64_t>> row_pos;
  for (const Seq& s : c.seqs) {
    for (int g = 0; g < c.kv_heads; ++g) {
      std::vector<int64_t> order(static_cast<size_t>(s.context));
      std::iota(order.begin(), order.end(), 0);
      if (c.shuffle_positions) std::shuffle(order.begin(), order.end(), rng);
      row_pos.push_back(order);
    }
  }
  int64_t max_pages = 3;
  for (const auto& r : row_pos) max_pages += static_cast<int64_t>(r.size());
  std::vector<int32_t> free_pages(static_cast<size_t>(max_pages));
  std::iota(free_pages.begin(), free_pages.end(), 0);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  const auto kvals = Bf16Exact(rng, max_pages * ps * d);
  const auto vvals = Bf16Exact(rng, max_pages * ps * d);
  std::vector<int32_t> pool_pos(static_cast<size_t>(max_pages * ps), -9);
  std::vector<int32_t> indptr = {0}, indices, lens;
  size_t next = 0;
  for (const auto& tokens : row_pos) {
    for (size_t i = 0; i < tokens.size();) {
      const int64_t fill = std::min<int64_t>(static_cast<int64_t>(tokens.size() - i),
                                             1 + static_cast<int64_t>(rng() % ps));
      const int32_t page = free_pages[next++];
      for (int64_t j = 0; j < fill; ++j, ++i)
        pool_pos[page * ps + j] = static_cast<int32_t>(tokens[i]);
      if (c.sparse && rng() % 3 == 0) continue;
      indices.push_back(page);
      lens.push_back(static_cast<int32_t>(fill));
    }
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  if (indices.empty()) {  // keep the device arrays non-empty
    indices.push_back(0);
    lens.push_back(0);
  }
  // Queries.
  std::vector<int32_t> qpos, row_base;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t i = 0; i < c.seqs[s].queries; ++i) {
      qpos.push_back(static_cast<int32_t>(c.seqs[s].context - c.seqs[s].queries + i));
      row_base.push_back(static_cast<int32_t>(s) * c.kv_heads);
    }
  }
  const int64_t n = static_cast<int64_t>(qpos.size());
  const auto q = Bf16Exact(rng, n * c.heads * d, -3.0f, 3.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  // Reference in double.
  std::vector<float> want(static_cast<size_t>(n * c.heads * d), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      const int row = row_base[t] + h / group;
      std::vector<double> sc;
      std::vector<int64_t> slots;
      for (int32_t e = indptr[row]; e < indptr[row + 1]; ++e) {
        for (int j = 0; j < lens[e]; ++j) {
          const int64_t slot = static_cast<int64_t>(indices[e]) * ps + j;
          if (c.causal && pool_pos[slot] > qpos[t]) continue;
          double dot = 0;
          for (int x = 0; x < d; ++x) {
            dot += static_cast<double>(q[(t * c.heads + h) * d + x]) * kvals[slot * d + x];
          }
          sc.push_back(dot * scale);
          slots.push_back(slot);
        }
      }
      if (sc.empty()) continue;
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& s : sc) sum += (s = std::exp(s - mx));
      for (int x = 0; x < d; ++x) {
        double o = 0;
        for (size_t i = 0; i < sc.size(); ++i) o += sc[i] * vvals[slots[i] * d + x];
        want[(t * c.heads + h) * d + x] = static_cast<float>(o / sum);
      }
    }
  }

  // GPU.
  Tensor kg = ToDevice(gpu, kvals, DType::kBF16, {max_pages, ps, d});
  Tensor vg = ToDevice(gpu, vvals, DType::kBF16, {max_pages, ps, d});
  Tensor pg = I32ToDevice(gpu, pool_pos, {max_pages, ps});
  Tensor ip = I32ToDevice(gpu, indptr, {static_cast<int64_t>(indptr.size())});
  Tensor ix = I32ToDevice(gpu, indices, {static_cast<int64_t>(indices.size())});
  Tensor ln = I32ToDevice(gpu, lens, {static_cast<int64_t>(lens.size())});
  AttentionArgs a;
  a.q = ToDevice(gpu, q, DType::kBF16, {n, c.heads, d});
  // Poison the output: every element must be written.
  a.out = ToDevice(gpu, std::vector<float>(static_cast<size_t>(n * c.heads * d), std::nanf("")),
                   DType::kBF16, {n, c.heads, d});
  a.positions = I32ToDevice(gpu, qpos, {n});
  a.row_base = I32ToDevice(gpu, row_base, {n});
  a.table = {ip.data_as<int32_t>(), ix.data_as<int32_t>(), ln.data_as<int32_t>(),
             static_cast<int32_t>(indptr.size() - 1)};
  a.pool = {kg.data(), vg.data(), pg.data_as<int32_t>(), DType::kBF16, max_pages, ps, d};
  a.n_heads = c.heads;
  a.n_kv_heads = c.kv_heads;
  a.scale = scale;
  a.causal = c.causal;
  gpu.Attention(a);
  const std::vector<float> got = ToHostF32(gpu, a.out);
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "element " << i << " not written or not finite";
    max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(max_err, c.tol * std::max(max_ref, 1e-6))
      << "max |err| " << max_err << ", max |ref| " << max_ref;
  ::testing::Test::RecordProperty(c.name, testing::Sci(max_err / std::max(max_ref, 1e-6)));
  std::printf("[ attention ] %s: max rel err %.3g\n", c.name.c_str(),
              max_err / std::max(max_ref, 1e-6));
}

TEST(CudaAttention, DecodeMatchesDenseReference) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const std::vector<Case> cases = {
      {"llama 32/8 d128 p16 batch 3", 32, 8, 128, 16, true, {{3000, 1}, {17, 1}, {1200, 1}}},
      {"qwen 28/4 d128 (group 7)", 28, 4, 128, 16, true, {{777, 1}, {64, 1}}},
      {"group 9, d64", 9, 1, 64, 16, true, {{500, 1}}},
      {"group 20 = two head chunks of 16, d64", 40, 2, 64, 16, true, {{500, 1}, {70, 1}}},
      {"smollm 9/3 d64 page 5, shuffled, sparse",
       9,
       3,
       64,
       5,
       true,
       {{900, 1}, {33, 1}},
       true,
       true},
      {"MHA 4/4 d128 page 1", 4, 4, 128, 1, true, {{300, 1}}},
      {"two queries per row, page 7", 8, 2, 64, 7, true, {{200, 2}, {90, 2}, {5, 1}}},
      {"non-causal, empty row", 8, 2, 128, 16, false, {{400, 1}, {0, 1}}},
  };
  for (const Case& c : cases) RunCase(*gpu, c, rng);
}

TEST(CudaAttention, PrefillMatchesDenseReference) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  std::vector<Case> cases = {
      {"chunk of 200 after 800, 32/8 d128 p16", 32, 8, 128, 16, true, {{1000, 200}}},
      {"whole prompt 130, d64 group 3", 9, 3, 64, 16, true, {{130, 130}}},
      {"two sequences, boundary inside a tile, page 5", 8, 2, 64, 5, true, {{70, 70}, {150, 90}}},
      {"shuffled positions, sparse, d128", 8, 4, 128, 16, true, {{300, 100}}, true, true},
      {"non-causal, page 128 > tile", 4, 2, 128, 128, false, {{333, 40}}},
      {"page 1, group 7", 28, 4, 128, 1, true, {{150, 64}}},
      {"three short sequences", 4, 1, 64, 16, true, {{20, 20}, {9, 9}, {40, 40}}},
  };
  for (Case& c : cases) {
    c.tol = 2e-2;  // probabilities enter the P.V product as bf16
    RunCase(*gpu, c, rng);
  }
}

}  // namespace
}  // namespace icecache

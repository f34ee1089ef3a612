// Paged attention of the CPU backend against a dense float64 reference: shuffled page ids,
// partially filled pages, non-contiguous positions inside pages, GQA, causal and not, empty
// rows, sparse page lists, decode (one query per row) and prefill (many queries per row) paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "core/half.h"

namespace icecache {
namespace {

using testing::F32Tensor;
using testing::I32Tensor;
using testing::RandomVector;

struct Sequence {
  int64_t context = 0;  // keys at positions [0, context)
  int64_t queries = 0;  // query tokens at positions [context - queries, context) (or context)
};

struct Scenario {
  std::string name;
  int64_t heads, kv_heads, head_dim, page_size;
  DType dtype;
  bool causal;
  std::vector<Sequence> seqs;
  bool shuffle_positions = false;  // semantic pages: positions inside pages out of order
  bool sparse = false;             // rows list a random subset of their pages
};

// A pool of pages holding the K/V of every (sequence, KV head) and the page table over them.
class PagedKv {
 public:
  PagedKv(std::mt19937& rng, const Scenario& sc) : sc_(sc) {
    std::vector<std::vector<int64_t>> row_tokens;  // positions per row, in page order
    int64_t total_pages = 0;
    for (const Sequence& s : sc.seqs) {
      for (int64_t g = 0; g < sc.kv_heads; ++g) {
        std::vector<int64_t> order(static_cast<size_t>(s.context));
        std::iota(order.begin(), order.end(), 0);
        if (sc.shuffle_positions) std::shuffle(order.begin(), order.end(), rng);
        row_tokens.push_back(order);
        total_pages += s.context;  // upper bound: at least one token per page
      }
    }
    num_pages_ = total_pages + 3;
    const int64_t slots = num_pages_ * sc.page_size;
    k_.assign(static_cast<size_t>(slots * sc.head_dim), 0.0f);
    v_.assign(k_.size(), 0.0f);
    pos_.assign(static_cast<size_t>(slots), -7);
    std::vector<int32_t> free_pages(static_cast<size_t>(num_pages_));
    std::iota(free_pages.begin(), free_pages.end(), 0);
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    size_t next_page = 0;
    indptr_.push_back(0);
    for (const auto& tokens : row_tokens) {
      size_t i = 0;
      while (i < tokens.size()) {
        // Partly filled pages: between 1 and page_size tokens.
        const int64_t fill = std::min<int64_t>(
            static_cast<int64_t>(tokens.size() - i),
            1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(sc.page_size)));
        const int32_t page = free_pages[next_page++];
        for (int64_t j = 0; j < fill; ++j, ++i) {
          const int64_t slot = page * sc.page_size + j;
          pos_[slot] = static_cast<int32_t>(tokens[i]);
          for (int64_t c = 0; c < sc.head_dim; ++c) {
            k_[slot * sc.head_dim + c] = Round(dist(rng));
            v_[slot * sc.head_dim + c] = Round(dist(rng));
          }
        }
        if (sc.sparse && rng() % 3 == 0) continue;  // selected out
        indices_.push_back(page);
        lens_.push_back(static_cast<int32_t>(fill));
      }
      indptr_.push_back(static_cast<int32_t>(indices_.size()));
    }
    if (sc.dtype == DType::kF16) {
      k16_.resize(k_.size());
      v16_.resize(v_.size());
      for (size_t i = 0; i < k_.size(); ++i) {
        k16_[i] = F32ToF16(k_[i]);
        v16_[i] = F32ToF16(v_[i]);
      }
    }
  }

  KvPoolView pool() {
    KvPoolView p;
    p.k = sc_.dtype == DType::kF32 ? static_cast<void*>(k_.data()) : k16_.data();
    p.v = sc_.dtype == DType::kF32 ? static_cast<void*>(v_.data()) : v16_.data();
    p.positions = pos_.data();
    p.dtype = sc_.dtype;
    p.num_pages = num_pages_;
    p.page_size = static_cast<int>(sc_.page_size);
    p.head_dim = static_cast<int>(sc_.head_dim);
    return p;
  }
  PageTableView table() const {
    return {indptr_.data(), indices_.data(), lens_.data(),
            static_cast<int32_t>(indptr_.size() - 1)};
  }

  // softmax(q k^T * scale) v over row `row` in float64.
  void Reference(int64_t row, const float* q, int32_t qpos, float scale, double* out) const {
    std::vector<double> scores;
    std::vector<int64_t> slots;
    for (int32_t e = indptr_[row]; e < indptr_[row + 1]; ++e) {
      for (int32_t j = 0; j < lens_[e]; ++j) {
        const int64_t slot = indices_[e] * sc_.page_size + j;
        if (sc_.causal && pos_[slot] > qpos) continue;
        double s = 0.0;
        for (int64_t c = 0; c < sc_.head_dim; ++c) {
          s += static_cast<double>(q[c]) * k_[slot * sc_.head_dim + c];
        }
        scores.push_back(s * scale);
        slots.push_back(slot);
      }
    }
    std::fill(out, out + sc_.head_dim, 0.0);
    if (scores.empty()) return;
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0;
    for (double& s : scores) sum += (s = std::exp(s - mx));
    for (size_t i = 0; i < slots.size(); ++i) {
      for (int64_t c = 0; c < sc_.head_dim; ++c) {
        out[c] += scores[i] / sum * v_[slots[i] * sc_.head_dim + c];
      }
    }
  }

 private:
  // Values exactly representable in the pool dtype, so the reference sees what the kernel sees.
  float Round(float x) const { return sc_.dtype == DType::kF16 ? F16ToF32(F32ToF16(x)) : x; }

  Scenario sc_;
  int64_t num_pages_ = 0;
  std::vector<float> k_, v_;
  std::vector<uint16_t> k16_, v16_;
  std::vector<int32_t> pos_;
  std::vector<int32_t> indptr_, indices_, lens_;
};

void RunScenario(const Scenario& sc, int threads, std::mt19937& rng) {
  SCOPED_TRACE(sc.name + " threads=" + std::to_string(threads));
  auto backend = MakeCpuBackend({.threads = threads});
  PagedKv kv(rng, sc);
  std::vector<int32_t> positions, row_base;
  for (size_t s = 0; s < sc.seqs.size(); ++s) {
    const Sequence& seq = sc.seqs[s];
    for (int64_t i = 0; i < seq.queries; ++i) {
      // Decode-like rows query at `context` (all keys visible); prefill chunks end the context.
      const int64_t p = seq.queries == 1 ? seq.context : seq.context - seq.queries + i;
      positions.push_back(static_cast<int32_t>(std::max<int64_t>(p, 0)));
      row_base.push_back(static_cast<int32_t>(s * sc.kv_heads));
    }
  }
  const int64_t n = static_cast<int64_t>(positions.size());
  const std::vector<float> qs = RandomVector(rng, n * sc.heads * sc.head_dim, -2.0f, 2.0f);
  AttentionArgs args;
  args.q = F32Tensor(qs, {n, sc.heads, sc.head_dim});
  args.out = F32Tensor(std::vector<float>(qs.size(), std::nanf("")), {n, sc.heads, sc.head_dim});
  args.positions = I32Tensor(positions, {n});
  args.row_base = I32Tensor(row_base, {n});
  args.table = kv.table();
  args.pool = kv.pool();
  args.n_heads = static_cast<int>(sc.heads);
  args.n_kv_heads = static_cast<int>(sc.kv_heads);
  args.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
  args.causal = sc.causal;
  // Twice: the second call reuses the scratch sized by the first.
  for (int rep = 0; rep < 2; ++rep) {
    backend->Attention(args);
    const float* got = args.out.data_as<const float>();
    const int64_t group = sc.heads / sc.kv_heads;
    std::vector<double> want(static_cast<size_t>(sc.head_dim));
    double worst = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < sc.heads; ++h) {
        const int64_t off = (t * sc.heads + h) * sc.head_dim;
        kv.Reference(row_base[t] + h / group, qs.data() + off, positions[t], args.scale,
                     want.data());
        for (int64_t c = 0; c < sc.head_dim; ++c) {
          // Outputs are convex combinations of values in [-1, 1]: absolute error is relative.
          const double err = std::abs(got[off + c] - want[c]);
          worst = std::max(worst, err);
          ASSERT_LE(err, 2e-6) << "token " << t << " head " << h << " dim " << c;
        }
      }
    }
    ::testing::Test::RecordProperty(sc.name + "_max_err", testing::Sci(worst));
  }
}

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> s;
  // Decode, one sequence: few (token, KV head) items, so rows are split into page chunks.
  s.push_back({"decode_gqa3_split", 9, 3, 64, 16, DType::kF32, true, {{1000, 1}}});
  s.push_back({"decode_gqa1_f16", 4, 4, 128, 16, DType::kF16, true, {{700, 1}}});
  // Batched decode with an empty row (context 0) and short runs of tokens per row.
  s.push_back({"decode_batch_gqa4_empty_row",
               8,
               2,
               128,
               16,
               DType::kF16,
               true,
               {{300, 1}, {0, 1}, {57, 1}, {1, 1}, {129, 3}}});
  s.push_back({"decode_odd_dim_page5_semantic",
               6,
               2,
               20,
               5,
               DType::kF32,
               true,
               {{211, 1}, {90, 2}},
               /*shuffle_positions=*/true});
  s.push_back({"decode_sparse_noncausal",
               9,
               3,
               64,
               16,
               DType::kF32,
               false,
               {{500, 1}, {80, 1}},
               false,
               /*sparse=*/true});
  // Prefill chunks (many queries per row) with partially filled and shuffled pages.
  s.push_back({"prefill_gqa1_odd_dim", 4, 4, 20, 5, DType::kF32, true, {{300, 40}}});
  s.push_back({"prefill_gqa3_blocks", 9, 3, 64, 16, DType::kF32, true, {{1200, 300}}});
  s.push_back({"prefill_gqa4_f16_semantic",
               8,
               2,
               64,
               16,
               DType::kF16,
               true,
               {{600, 100}},
               /*shuffle_positions=*/true});
  // Mixed call: a prefill chunk, a decode token and an empty row in one batch; non-causal.
  s.push_back(
      {"mixed_noncausal_gqa3", 9, 3, 64, 16, DType::kF32, false, {{700, 64}, {200, 1}, {0, 1}}});
  s.push_back({"mixed_causal_sparse_gqa3",
               9,
               3,
               64,
               16,
               DType::kF32,
               true,
               {{400, 20}, {333, 1}, {0, 20}},
               false,
               /*sparse=*/true});
  return s;
}

TEST(CpuAttentionTest, PagedMatchesDenseReference) {
  ICECACHE_TEST_RNG(rng);
  for (const Scenario& sc : Scenarios()) {
    for (int threads : {1, 2, 3}) RunScenario(sc, threads, rng);
  }
}

}  // namespace
}  // namespace icecache

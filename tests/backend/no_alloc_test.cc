// Steady-state CPU ops do not allocate: once a call of a given size has run, repeating it
// performs no heap allocation (operator new is counted here; scratch growth would show up as
// well, since it only happens when a call needs more than any earlier one).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "core/quant.h"

// The replacements below pair operator new with malloc and operator delete with free; GCC's
// check cannot see through the replacement.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace icecache {
namespace {

using testing::F32Tensor;
using testing::I32Tensor;
using testing::RandomVector;

TEST(CpuBackendNoAllocTest, RepeatedCallsDoNotAllocate) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  const int64_t k = 576, m = 1536, heads = 9, kv_heads = 3, hd = 64, page = 16, ctx = 600;

  std::vector<uint8_t> wq(static_cast<size_t>(RowBytes(DType::kQ4_1, k) * m));
  const std::vector<float> wf = RandomVector(rng, k * m);
  for (int64_t j = 0; j < m; ++j) {
    QuantizeRow(DType::kQ4_1, wf.data() + j * k, wq.data() + j * RowBytes(DType::kQ4_1, k), k);
  }
  Tensor w(wq.data(), DType::kQ4_1, {m, k});
  Tensor x1 = F32Tensor(RandomVector(rng, k), {1, k});
  Tensor x64 = F32Tensor(RandomVector(rng, 64 * k), {64, k});
  Tensor y1 = testing::HostTensor(DType::kF32, {1, m});
  Tensor y64 = testing::HostTensor(DType::kF32, {64, m});
  Tensor norm_w = F32Tensor(RandomVector(rng, k), {k});
  Tensor gate = F32Tensor(RandomVector(rng, 64 * m), {64, m});
  Tensor up = F32Tensor(RandomVector(rng, 64 * m), {64, m});
  Tensor ids = I32Tensor({3, 1, 4, 1, 5}, {5});
  Tensor emb = testing::HostTensor(DType::kF32, {5, k});

  // One sequence of `ctx` tokens in pages 0.., 3 KV heads; a decode query and a prefill chunk.
  const int64_t pages_per_row = (ctx + page - 1) / page;
  std::vector<float> kbuf(static_cast<size_t>(kv_heads * pages_per_row * page * hd));
  std::vector<float> vbuf = RandomVector(rng, static_cast<int64_t>(kbuf.size()));
  kbuf = RandomVector(rng, static_cast<int64_t>(kbuf.size()));
  std::vector<int32_t> pos(static_cast<size_t>(kv_heads * pages_per_row * page));
  std::vector<int32_t> indptr{0}, indices, lens;
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t p = 0; p < pages_per_row; ++p) {
      const int64_t id = g * pages_per_row + p;
      const int64_t len = std::min<int64_t>(page, ctx - p * page);
      for (int64_t j = 0; j < len; ++j) pos[id * page + j] = static_cast<int32_t>(p * page + j);
      indices.push_back(static_cast<int32_t>(id));
      lens.push_back(static_cast<int32_t>(len));
    }
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  AttentionArgs a;
  a.pool = {kbuf.data(),
            vbuf.data(),
            pos.data(),
            DType::kF32,
            kv_heads * pages_per_row,
            static_cast<int>(page),
            static_cast<int>(hd)};
  a.table = {indptr.data(), indices.data(), lens.data(), static_cast<int32_t>(kv_heads)};
  a.n_heads = static_cast<int>(heads);
  a.n_kv_heads = static_cast<int>(kv_heads);
  a.scale = 0.125f;
  AttentionArgs decode = a, prefill = a;
  decode.q = F32Tensor(RandomVector(rng, heads * hd), {1, heads, hd});
  decode.out = testing::HostTensor(DType::kF32, {1, heads, hd});
  decode.positions = I32Tensor({static_cast<int32_t>(ctx - 1)}, {1});
  decode.row_base = I32Tensor({0}, {1});
  const int64_t chunk = 40;
  std::vector<int32_t> chunk_pos(chunk), chunk_rows(chunk, 0);
  for (int64_t i = 0; i < chunk; ++i) chunk_pos[i] = static_cast<int32_t>(ctx - chunk + i);
  prefill.q = F32Tensor(RandomVector(rng, chunk * heads * hd), {chunk, heads, hd});
  prefill.out = testing::HostTensor(DType::kF32, {chunk, heads, hd});
  prefill.positions = I32Tensor(chunk_pos, {chunk});
  prefill.row_base = I32Tensor(chunk_rows, {chunk});
  std::vector<float> inv(hd / 2, 0.01f);
  Tensor inv_freq = F32Tensor(inv, {hd / 2});
  Tensor q3 = F32Tensor(RandomVector(rng, chunk * heads * hd), {chunk, heads, hd});

  auto step = [&] {
    backend->Embed(w, ids, emb);
    backend->RmsNorm(x64, norm_w, 1e-5f, x64);
    backend->MatMul(x1, w, nullptr, y1);
    backend->MatMul(x64, w, nullptr, y64);
    backend->Rope(prefill.positions, inv_freq, q3);
    backend->SwiGlu(gate, up, gate);
    backend->Add(gate, up);
    backend->Attention(decode);
    backend->Attention(prefill);
  };
  step();  // sizes the scratch
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 3; ++i) step();
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace icecache

// Host-side entry points of the CUDA kernels: plain C++ (no CUDA headers), so that backend
// .cc files can call them. Every launcher enqueues work on `stream` and returns the CUDA error
// code of the launch (0: success); it never allocates and never synchronizes. Pointers are
// device memory unless noted. Kernels ignore out-of-range ids, slots and page ids (the CPU
// backend aborts on them; here they are dropped so that no kernel reads or writes out of
// bounds).
#pragma once

#include <cstdint>

struct CUstream_st;

namespace icecache::kernels {

using Stream = CUstream_st*;

enum class ElemType : int { kF32, kBF16 };

const char* ErrorString(int code);

// Up to kBatchCap parameter sets of independent calls, passed by value to one launch (block z is
// entry z): the sequences of a decode step in one kernel each. Kept under the classic 4 KB of
// kernel parameters.
constexpr int kBatchCap = 16;
template <class P, int N = kBatchCap>
struct ParamBatch {
  P p[N];
  int n = 0;
};

// ---- element-wise and row-wise ops (elementwise.cu) -----------------------------------------

int LaunchEmbed(Stream s, const void* table, ElemType table_type, int64_t vocab, const int32_t* ids,
                int64_t rows, int64_t cols, void* out, ElemType out_type);
int LaunchRmsNorm(Stream s, const void* x, ElemType x_type, const float* w, float eps, int64_t rows,
                  int64_t cols, void* out, ElemType out_type);
// inout += a (rounded to `type`), then out = RmsNorm(inout) * w; all of `type`.
int LaunchAddRmsNorm(Stream s, const void* a, void* inout, ElemType type, const float* w, float eps,
                     int64_t rows, int64_t cols, void* out);
int LaunchAdd(Stream s, const void* a, void* inout, ElemType type, int64_t n);
int LaunchSwiGlu(Stream s, const void* gate, const void* up, void* out, ElemType type, int64_t n);
int LaunchRope(Stream s, const int32_t* positions, const float* inv_freq, void* x, ElemType type,
               int64_t n, int64_t heads, int64_t head_dim);
int LaunchAddBias(Stream s, void* y, ElemType type, const float* bias, int64_t rows, int64_t cols);
int LaunchFillRandom(Stream s, void* t, ElemType type, int64_t n, uint64_t seed, float scale,
                     float offset);
// dst[index[i]] = values[i] for i < n (indices outside [0, dst_n) dropped).
int LaunchScatterI32(Stream s, const int32_t* index, const int32_t* values, int64_t n, int32_t* dst,
                     int64_t dst_n);

// K/V rows of a step into their page slots (the pool is bf16).
struct KvWriteParams {
  const void* k = nullptr;  // [n_tokens, kv_heads, head_dim] of act_type
  const void* v = nullptr;
  ElemType act_type = ElemType::kBF16;
  const int32_t* slots = nullptr;      // [n_tokens, kv_heads]
  const int32_t* positions = nullptr;  // [n_tokens]
  int64_t n_tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  void* pool_k = nullptr;  // bf16 [num_slots, head_dim]
  void* pool_v = nullptr;
  int32_t* pool_pos = nullptr;  // [num_slots]
  int64_t num_slots = 0;
};
// WriteKv; when `inv_freq` is not null, first rotates q ([n_tokens, q_heads, head_dim], in
// place) and k (in place, and the rotated rows go to the pool): Rope + Rope + WriteKv fused.
int LaunchRopeWriteKv(Stream s, const float* inv_freq, void* q, int64_t q_heads,
                      const KvWriteParams& p);

// Copies whole pages: K, V (bf16, page_elems each) and positions (page_size each).
int LaunchCopyPages(Stream s, const void* src_k, const void* src_v, const int32_t* src_pos,
                    int64_t src_pages, void* dst_k, void* dst_v, int32_t* dst_pos,
                    int64_t dst_pages, const int32_t* src_ids, const int32_t* dst_ids, int64_t n,
                    int64_t page_size, int64_t head_dim);

// ---- device-side page selection (page_select.cu) ------------------------------------------
// The kernels behind Backend::PageBounds, SelectPages and MapPages (backend.h states what they
// compute); bf16 pools and queries. Row counts and limits are read on the device, so launches
// depend on shapes only.

struct PageBoundsParams {
  const void* pool_k = nullptr;  // bf16
  int64_t pool_pages = 0;
  int page_size = 0;
  int head_dim = 0;
  const int32_t* ids = nullptr;
  const int32_t* lens = nullptr;
  const int32_t* summary_rows = nullptr;  // [n]: where each page's summary goes
  int64_t n = 0;
  // [summary rows, rows, head_dim]: bf16 min | max (rows 2), or the mean key in Q8_0 (rows 1)
  void* bounds = nullptr;
  float* spread = nullptr;  // mean keys: [summary rows], KeySpread (kv/key_mean.h)
  int64_t summaries = 0;
  int rows = 2;
  // Optional residency map whose copies of the summarized pages become stale.
  const int32_t* resident = nullptr;
  const int32_t* slot_page = nullptr;
  int32_t* slot_len = nullptr;
  int64_t slot_pages = 0;
};
int LaunchPageBounds(Stream s, const PageBoundsParams& p);

struct PageSelectParams {
  const void* q = nullptr;  // bf16 [rows * group, head_dim]
  const int32_t* list_ids = nullptr;
  const int32_t* list_lens = nullptr;
  const int32_t* list_rows = nullptr;  // each entry's summary row
  int stride = 0;
  const int32_t* limits = nullptr;  // [rows, 5]
  const void* bounds = nullptr;     // PageBoundsParams::bounds
  const float* spread = nullptr;    // PageBoundsParams::spread
  int64_t summaries = 0;
  int bound_rows = 2;       // 2: min | max bounds, 1: mean keys
  float* scores = nullptr;  // [rows, stride]
  int32_t* out_ids = nullptr;
  int32_t* out_lens = nullptr;
  int32_t* out_count = nullptr;
  int out_stride = 0;
  int rows = 0;
  int group = 0;
  int head_dim = 0;
};
int LaunchSelectPages(Stream s, const PageSelectParams& p);
int LaunchSelectPagesBatch(Stream s, const ParamBatch<PageSelectParams>& b);

struct PageMapParams {
  const int32_t* sel_ids = nullptr;
  const int32_t* sel_lens = nullptr;
  const int32_t* sel_count = nullptr;
  int stride = 0;
  int rows = 0;
  int first_group = 0;
  int capacity = 0;
  const void* host_k = nullptr;  // bf16 pools
  const void* host_v = nullptr;
  const int32_t* host_pos = nullptr;
  int64_t host_pages = 0;
  void* slot_k = nullptr;
  void* slot_v = nullptr;
  int32_t* slot_pos = nullptr;
  int64_t slot_pages = 0;
  int page_size = 0;
  int head_dim = 0;
  int32_t* resident = nullptr;
  int32_t* slot_page = nullptr;
  int32_t* slot_len = nullptr;
  int32_t* table = nullptr;                // indptr | indices | lens
  int32_t* fetch = nullptr;                // [rows, 1 + 2 * capacity]
  unsigned long long* counters = nullptr;  // hits, fetched, tokens, prefetched[, deferred]
  // Prefetch mode (PageMapArgs): each row's page not to touch; nullptr: a normal map.
  const int32_t* pending = nullptr;
  int prefetch_pages = 0;        // prefetch mode: entries placed per row (0: all)
  int32_t* slot_used = nullptr;  // optional: the clock of each slot's last listing
  int32_t clock = 0;
  // Fetch behind (PageMapArgs::defer_limits): [rows, 5] select limits; nullptr: fetch now.
  const int32_t* defer_limits = nullptr;
  int defer_after = 0;  // entries after the sink mapped as usual (PageMapArgs::defer_after)
  // Read on the host: 0 places and copies, 1 only places (the copies listed in `fetch`), 2 only
  // copies what `fetch` lists (PageMapArgs::stage); the same for every entry of a batch.
  int stage = 0;
};
int LaunchMapPages(Stream s, const PageMapParams& p);
int LaunchMapPagesBatch(Stream s, const ParamBatch<PageMapParams>& b);

// Insertion routes (key_route.cu; Backend::RouteKeys): each key to the entry of its list range
// with the nearest Q8_0 mean key.
struct KeyRouteParams {
  const void* pool_k = nullptr;  // bf16 host tier (mapped)
  int64_t pool_slots = 0;        // pages * page_size
  int head_dim = 0;
  const int32_t* slots = nullptr;      // [n]
  const int32_t* ranges = nullptr;     // [n, 3]: list row, first entry, end entry
  const int32_t* list_rows = nullptr;  // [rows, stride]
  int rows = 0;
  int stride = 0;
  const void* bounds = nullptr;  // [summaries] Q8_0 mean keys
  int64_t summaries = 0;
  int32_t* out = nullptr;  // [n]
  int64_t n = 0;
};
int LaunchRouteKeys(Stream s, const KeyRouteParams& p);

// ---- small-batch GEMV (gemv.cu) ---------------------------------------------------------

// y[n, m] = x[n, k] w[m, k]^T (+ bias[m]) for bf16 x and w, n <= kGemvMaxRows, k % 8 == 0 and
// 16-byte aligned rows. Reads each weight once at full width. ICECACHE_GEMV_SPLIT=1|2|4|8 (warps
// per row group, for benchmarks) overrides the k split picked from the shape.
constexpr int kGemvMaxRows = 4;
int LaunchGemv(Stream s, const void* x, const void* w, const float* bias, void* y, ElemType y_type,
               int64_t n, int64_t m, int64_t k);
// The same over a stacked w = [w_0; ...; w_{parts-1}] (parts <= 3, widths[i] rows each): block i
// goes to ys[i] ([n, widths[i]]); one launch reads every block.
int LaunchGemvSplit(Stream s, const void* x, const void* w, void* const* ys, const int64_t* widths,
                    int parts, ElemType y_type, int64_t n, int64_t k);
// y[n, m_out] = silu(x w_gate^T) * (x w_up^T) for w = [w_gate; w_up] ([2 m_out, k]), from the
// f32 sums (rounded once).
int LaunchGemvGlu(Stream s, const void* x, const void* w, void* y, ElemType y_type, int64_t n,
                  int64_t m_out, int64_t k);

// ---- paged attention (attention_*.cu) ---------------------------------------------------

struct AttentionParams {
  const void* q = nullptr;            // bf16 [n_tokens, n_heads, head_dim]
  void* out = nullptr;                // bf16 [n_tokens, n_heads, head_dim]
  const int32_t* q_pos = nullptr;     // [n_tokens]
  const int32_t* row_base = nullptr;  // [n_tokens]
  const int32_t* indptr = nullptr;    // [num_rows + 1]
  const int32_t* indices = nullptr;
  const int32_t* lens = nullptr;
  int32_t num_rows = 0;
  const void* pool_k = nullptr;  // bf16 [num_pages, page_size, head_dim]
  const void* pool_v = nullptr;
  const int32_t* pool_pos = nullptr;  // [num_pages, page_size]
  int64_t num_pages = 0;
  int page_size = 0;
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  bool causal = true;
};

// Caller-owned scratch of the split-KV decode kernel (zeroed counters before first use; the
// kernel leaves them zero).
struct DecodeWorkspace {
  float* partial_o = nullptr;    // [n_tokens * n_heads * splits * head_dim]
  float* partial_lse = nullptr;  // [n_tokens * n_heads * splits]
  int32_t* counters = nullptr;   // [n_tokens * n_kv_heads * head_chunks]
  int64_t o_capacity = 0;        // floats
  int64_t lse_capacity = 0;      // floats
  int64_t counter_capacity = 0;  // ints
};

bool AttentionSupportsHeadDim(int head_dim);
constexpr int kMaxDecodeSplits = 64;
// Splits of each row's page list for the decode kernel: a function of the shape only (never
// of the page counts), so a captured launch stays valid as the lists change.
int DecodeSplits(const AttentionParams& p, const DecodeWorkspace& ws, int num_sms);
// One query per (token, KV head group): split-KV over the row's pages, partial results merged
// by log-sum-exp in the last block of each row (no second launch).
int LaunchDecodeAttention(Stream s, const AttentionParams& p, int splits,
                          const DecodeWorkspace& ws);
// Entries of one query token each (n_tokens 1), with their own tables, pools and outputs; entry
// z takes the workspace of token z. `splits`: DecodeSplits of a p with n_tokens = b.n.
int LaunchDecodeAttentionBatch(Stream s, const ParamBatch<AttentionParams>& b, int splits,
                               const DecodeWorkspace& ws);
// Moves `ws` past what a decode launch of `p` with `splits` uses, so that the next launch may run
// alongside it (decode launches may overlap: programmatic dependent launch).
void SkipDecodeWorkspace(const AttentionParams& p, int splits, DecodeWorkspace* ws);
// Flash-attention tiling with bf16 tensor cores for runs of query tokens that share a row.
int LaunchPrefillAttention(Stream s, const AttentionParams& p);

// ---- sampling (sampling.cu) -------------------------------------------------------------

struct SampleRow {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint64_t step;
};
// out[r] = a token drawn from row r of logits (f32 [rows, vocab]); params: rows entries.
int LaunchSample(Stream s, const float* logits, int64_t rows, int64_t vocab,
                 const SampleRow* params, int32_t* out);

}  // namespace icecache::kernels

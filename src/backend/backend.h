// The backend seam: the few tensor operations a transformer forward pass needs, implemented once
// per device. The CPU backend is the reference; every other backend is tested against it.
//
// Public methods check shapes and dtypes (broken shapes are internal bugs, so they abort with
// ICECACHE_CHECK) and dispatch to the Do* virtuals. Operations never allocate: callers own every
// output and workspace tensor (allocated up front with Allocate), which keeps a decode step
// replayable as a CUDA graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "icecache/status.h"
#include "kv/kv_views.h"

namespace icecache {

// Arguments of Backend::WriteKv: store new K/V rows into their page slots.
struct KvWriteArgs {
  Tensor k;          // [n_tokens, n_kv_heads, head_dim] activations (after RoPE for K)
  Tensor v;          // [n_tokens, n_kv_heads, head_dim]
  Tensor slots;      // i32 [n_tokens, n_kv_heads]: page_id * page_size + offset in page
  Tensor positions;  // i32 [n_tokens]: absolute position of each token
  KvPoolView pool;
};

// Arguments of Backend::Attention: softmax(q k^T * scale) v over paged KV, grouped-query.
struct AttentionArgs {
  Tensor q;          // [n_tokens, n_heads, head_dim]
  Tensor out;        // [n_tokens, n_heads, head_dim]
  Tensor positions;  // i32 [n_tokens]: absolute position of each query (for the causal mask)
  // i32 [n_tokens]: the page-table row block of each query; query t with KV head h reads row
  // row_base[t] + h. (Sequence s in a batch usually has row_base = s * n_kv_heads.)
  Tensor row_base;
  PageTableView table;
  KvPoolView pool;
  int n_heads = 0;
  int n_kv_heads = 0;
  float scale = 1.0f;
  // When true, a key is used only if its position <= the query's position.
  bool causal = true;
};

// Per-row parameters of Backend::SampleTokens (the subset of SamplingParams a device sampler
// implements: no repetition penalty, which needs the host-side history).
struct SampleRowParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
  uint64_t step = 0;  // draw counter: (seed, step) selects the random number of this row
};

// Arguments of Backend::PageBounds: the summaries that device-side page selection ranks pages by,
// one per listed page, written to the summary row the caller gives it (rows are the caller's to
// hand out, so that the summaries take room only for the pages a sequence lists). Two kinds:
// - min | max: the per-dimension minimum and maximum of the page's keys (Quest's page bound), in
//   the pool's own element type; minimum and maximum of stored values are stored values, so the
//   bounds are exact;
// - the mean key (StoredKeyMean in kv/key_mean.h: KeyMean, then Q8_0; icecache and lychee), and
//   the keys' spread around it (KeySpread) in `spread`.
struct PageBoundsArgs {
  KvPoolView pool;  // the pages' pool (the host tier; mapped host memory on a GPU)
  Tensor ids;       // i32 [n]: pages to summarize
  Tensor lens;      // i32 [n]: keys of each (its first lens[i] rows; at least 1)
  Tensor rows;      // i32 [n]: the summary row of each (distinct rows)
  // [summary rows, 2, head_dim] of the pool's dtype (min | max key per dimension), or
  // [summary rows, 1, head_dim] of kMeanKeyDType (the mean key).
  Tensor bounds;
  // Optional (all empty: skipped): a sequence's residency map (PageMapArgs). A summarized page
  // that sits in one of its slots is marked stale there (slot_len -1: its contents changed), so
  // that the next MapPages copies it again.
  Tensor resident, slot_page, slot_len;
  Tensor spread;  // mean keys: f32 [summary rows], each summarized row's KeySpread
};

// The most entries PageSelectArgs may take between the sink and the window of one row.
constexpr int kMaxSelectPicks = 2048;

// Arguments of Backend::SelectPages: one query token, rows = the KV heads of one layer. A row's
// candidate entries [sink_end, window_begin) are ranked by a score over the row's query heads
// (GQA group g), best first, ties to the lower entry: with min/max bounds (2 rows per page) the
// bound max_g sum_j max(q_gj min_j, q_gj max_j), with mean keys (1 row) CentroidScore over the key
// read back from Q8_0 and the row's spread, entries of no tokens -inf; the best
// min(pages_left, candidates) of them are walked in rank order and each is taken if its tokens
// fit in what is left of tokens_left. The output row lists entries [0, sink_end), the taken
// entries in rank order, then entries [window_begin, count): the order of AssembleSelection over
// Quest's ranking.
struct PageSelectArgs {
  Tensor q;          // [n_heads * head_dim] of the activation dtype: the token's query heads
  Tensor list_ids;   // i32 [rows, stride]: each row's candidate pages
  Tensor list_lens;  // i32 [rows, stride]: their token counts
  Tensor list_rows;  // i32 [rows, stride]: their summary rows in `bounds`
  // i32 [rows, 5]: count, sink_end, window_begin, tokens_left, pages_left (<= kMaxSelectPicks).
  Tensor limits;
  Tensor bounds;     // PageBounds' output
  Tensor spread;     // mean keys: PageBounds' spread (f32 [summary rows])
  Tensor scores;     // f32 [rows, stride]: scratch
  Tensor out_ids;    // i32 [rows, out_stride]: selected pages
  Tensor out_lens;   // i32 [rows, out_stride]
  Tensor out_count;  // i32 [rows]
  int n_heads = 0;   // query heads of all rows (the group is n_heads / rows)
};

// Arguments of Backend::MapPages: the working-set step of a device-side selection. Row r owns
// the slot pages [g * capacity, (g + 1) * capacity) of `slots`, g = first_group + r. A selected
// page that sits in one of the row's slots with the same token count is a hit; every other one
// takes one of the row's slots that holds no selected page (in selection order; its old page is
// evicted) and is copied there from `host`: first the free slots that never held a page
// (slot_page -1), then (with `slot_used`) those that the last normal map did not list, then the
// others, lowest first within each class, so that a row with spare slots keeps what it fetched
// until they run out. Writes the attention's page table over `slots`: rows in order, each in
// selection order, and stamps the listed slots with `clock`.
//
// Prefetch mode (`pending` given): the selection was made from an early estimate of the layer's
// query, to bring its pages in before the layer needs them. Pages are placed and copied the same
// way, except that each row's pending page (the one the step is still writing; -1: none) is
// neither kept nor copied; no table is written, and the copies are counted as prefetched.
//
// Fetch behind (`defer_limits` given, a normal map): the entries between a row's sink and window
// entries (SelectPages' output order), past the first `defer_after` of them, that are not current
// in one of the row's slots are deferred: they keep their place in the table with 0 tokens
// (attention skips them), take no slot and are not copied; a stale copy stays where it is. A
// prefetch-mode map of the same selection then brings them in, for the next step. Sink and window
// entries are mapped as usual.
//
// A map may run in two calls (`stage`): kPlace does all of the above but the copies, listing
// them in `fetch`; a later kCopy call with the same arguments makes those copies and changes
// nothing else. In between, nothing may change the rows' slots, and the copied slots hold stale
// data: a prefetch places its pages beside the work before it and copies them once the host link
// is free.
enum class MapStage { kAll = 0, kPlace = 1, kCopy = 2 };

// A map's rows hold at most this many slots and selected entries together: `capacity` plus the
// selection's stride (the CUDA map keeps a row's flags and slot lists in 48 KiB of shared memory).
constexpr int kMaxMapSlots = 6144;

struct PageMapArgs {
  Tensor sel_ids, sel_lens;  // i32 [rows, stride]: SelectPages' output
  Tensor sel_count;          // i32 [rows]
  KvPoolView host;           // the host tier
  KvPoolView slots;          // the working-set pool
  int first_group = 0;
  int capacity = 0;  // slots per row; at least every row's count
  Tensor resident;   // i32 [host pages]: the slot page holding the page, or -1
  Tensor slot_page;  // i32 [slot pages]: the host page a slot holds, or -1
  // i32 [slot pages]: that page's token count when it was copied. A copy brings at least those
  // rows (the CPU exactly those: an index updating beside the step may be writing the rows past
  // them; the CUDA kernels copy whole pages); a slot's rows past its count are unspecified.
  Tensor slot_len;
  // i32 [rows + 1 + 2 * rows * stride]: indptr | indices (rows * stride) | lens (rows * stride).
  Tensor table;
  Tensor fetch;  // i32 [rows, 1 + 2 * capacity]: scratch (count, then source/slot pairs)
  // i32 [8] (with defer_limits, [10]), 8-byte aligned: int64 counters that the call adds to:
  // hits, pages fetched (stale ones included; hits + fetched + deferred = pages listed), tokens
  // listed (deferred entries' excluded), pages prefetched, and with defer_limits pages deferred.
  Tensor counters;
  Tensor pending;  // i32 [rows]: prefetch mode (above); empty: a normal map
  // Prefetch mode: only each row's first `prefetch_pages` entries (its sink, then its best-ranked
  // pages) are placed and copied; 0: all of them.
  int prefetch_pages = 0;
  MapStage stage = MapStage::kAll;
  // Optional (empty: unused): i32 [slot pages], the `clock` of the last normal map that listed
  // each slot, and this map's clock (a normal map lists each row once per clock value).
  Tensor slot_used;
  int32_t clock = 0;
  // Optional (empty: fetch now): i32 [rows, 5], the rows' PageSelectArgs::limits (count,
  // sink_end, window_begin, ...), which say where each row's sink and window entries are.
  Tensor defer_limits;
  // With defer_limits: each row's first `defer_after` entries after its sink (its best-ranked
  // pages) are mapped as usual too; only the rest may be deferred.
  int defer_after = 0;
};

// Arguments of Backend::RouteKeys: the leaf each key that left the recent window joins when
// icecache inserts it (--kv-route device), chosen in backend memory from the summaries that
// device-side selection keeps. Key i is row slots[i] % page_size of page slots[i] / page_size of
// `pool`, as stored; it goes to the entry e of list row r in [first, end) (ranges[i] = r, first,
// end) whose mean key c (summary row list_rows[r, e] of `bounds`, read back from Q8_0) is
// nearest: the smallest sum over dimensions in order of fma(k_j - c_j, k_j - c_j, s), ties to the
// lower entry. out[i] = e, or -1 when the range is empty (or every distance is NaN).
struct KeyRouteArgs {
  KvPoolView pool;   // the keys' pool (the host tier; mapped host memory on a GPU)
  Tensor slots;      // i32 [n]
  Tensor ranges;     // i32 [n, 3]: list row, first entry, end entry (0 <= first, end <= stride)
  Tensor list_rows;  // i32 [rows, stride]: each entry's summary row
  Tensor bounds;     // [summary rows, 1, head_dim] of kMeanKeyDType: PageBounds' mean keys
  Tensor out;        // i32 [n]
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // One line for logs and --json ("cpu (2 threads, AVX2)").
  virtual std::string Describe() const = 0;

  // A zero-filled tensor in this backend's memory.
  virtual Result<Tensor> Allocate(DType dtype, std::span<const int64_t> shape) = 0;
  Result<Tensor> Allocate(DType dtype, std::initializer_list<int64_t> shape) {
    return Allocate(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Copies `src` into `dst` (same dtype and element count); either side may be host or device.
  virtual Status Copy(const Tensor& src, const Tensor& dst) = 0;
  // Copies `count` blocks of `block_bytes`: block i from src + i * src_pitch to
  // dst + i * dst_pitch (byte pointers; host or backend memory on either side, as Copy). One
  // strided transfer for per-layer regions of step inputs.
  virtual Status CopyBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                            int64_t src_pitch, int64_t dst_pitch) = 0;
  // Host to backend memory like CopyBlocks, but queued behind the work queued so far without
  // waiting for the copy: `src` (staging memory, from AllocateStaging) must stay unchanged until
  // the copy has run, which WaitFence(f) after a later RecordFence(f), or Synchronize, ensures.
  // Backends whose work runs as it is queued (the CPU) just copy.
  virtual Status CopyBlocksQueued(const void* src, void* dst, int64_t count, int64_t block_bytes,
                                  int64_t src_pitch, int64_t dst_pitch) {
    return CopyBlocks(src, dst, count, block_bytes, src_pitch, dst_pitch);
  }
  // Fences in the backend's queue, 0 .. kFences - 1: RecordFence(f) marks the work queued so
  // far, WaitFence(f) returns once that work has run (at once if f was never recorded). No-ops
  // where work runs as it is queued. One so far: the transformer's step inputs.
  static constexpr int kFences = 1;
  virtual void RecordFence(int fence) {}
  virtual void WaitFence(int fence) {}
  // Side work: operations queued between BeginSideWork() and EndSideWork() are ordered after
  // everything queued before BeginSideWork() but may run alongside what is queued after
  // EndSideWork(), until JoinSideWork() orders the work queued after it after the side work.
  // Side work holds operations only (no copies, allocations or waits; matrix products and
  // attention included: a backend gives side work its own scratch) and must not touch what the
  // main work touches before the join; Synchronize waits for it too. Where work runs as it
  // is queued (the CPU), these do nothing.
  virtual void BeginSideWork() {}
  virtual void EndSideWork() {}
  virtual void JoinSideWork() {}
  // Lanes: independent work of several sequences within one step. Between BeginLanes() and
  // EndLanes(), Lane(i) (i >= 0) makes the operations that follow queue on lane i: ordered after
  // everything queued before BeginLanes() and after lane i's earlier work, but free to run
  // alongside the other lanes' work. EndLanes() orders everything queued after it after every
  // lane's work. Lanes hold attention-phase operations only (page selection, page maps and
  // attention: no copies, matrix products, allocations or waits), and no two lanes may write the
  // same memory. A backend may fold lanes onto fewer queues (lane i on queue i mod its count);
  // results never depend on the lanes. Where work runs as it is queued (the CPU), these do
  // nothing.
  virtual void BeginLanes() {}
  virtual void Lane(int i) {}
  virtual void EndLanes() {}
  // Host memory the backend copies from fastest (pinned on CUDA); zero-filled.
  virtual Result<Tensor> AllocateStaging(DType dtype, std::span<const int64_t> shape) {
    return Tensor::Host(dtype, shape);
  }
  Result<Tensor> AllocateStaging(DType dtype, std::initializer_list<int64_t> shape) {
    return AllocateStaging(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Element type of activations (f32 on the CPU; bf16 on GPUs).
  virtual DType activation_dtype() const { return DType::kF32; }
  // Element type of stored K/V when the KV config says "auto".
  virtual DType default_kv_dtype() const { return DType::kF32; }
  // Turns a host weight of any file dtype into the form MatMul/Embed read on this backend (the
  // CPU backend keeps supported quantized formats as they are, borrowing the storage).
  virtual Result<Tensor> PrepareWeight(const Tensor& host_weight) = 0;
  // Prepares host matrices of one width as one matrix whose rows are theirs in order, for
  // MatMulSplit and MatMulGlu (its row blocks, Tensor::Slice, serve as the single matrices). An
  // empty result: this backend keeps them apart (the CPU, which reads the file's own blocks).
  virtual Result<Tensor> PrepareStacked(std::span<const Tensor* const> parts) { return Tensor(); }
  // Device memory held by this backend's allocations (zero on the CPU, which has none).
  struct DeviceMemory {
    int64_t used = 0, peak = 0, limit = 0;  // limit 0: no cap
  };
  virtual DeviceMemory device_memory() const { return {}; }
  // Waits for queued work (no-op on the CPU).
  virtual void Synchronize() {}

  // Runs `body` (backend ops only, at fixed addresses) for a step whose shape and buffers are
  // named by `key`. A backend with graphs (CUDA) runs the first step of a key eagerly, captures
  // the second and replays the capture from then on without calling `body`: everything a
  // captured step reads that changes between steps must live in backend memory. Others just
  // call `body`.
  virtual Status RunGraph(uint64_t key, const std::function<Status()>& body) { return body(); }

  // Samples one token per row of `logits` (f32 [rows, vocab], backend memory) on the device and
  // writes the ids to `out` (host memory, `rows` entries): only the ids cross to the host.
  // Unsupported on backends without a device sampler (the caller samples on the host).
  virtual Status SampleTokens(const Tensor& logits, std::span<const SampleRowParams> params,
                              std::span<int32_t> out) {
    return Unsupported("this backend has no device sampler");
  }
  // The same without waiting: the ids go to `device_ids` (i32, backend memory, one per row) and
  // start on their way to the host; TakeSampledTokens waits for the oldest call's and returns
  // them. At most kSamplesInFlight calls may be pending; `logits` may be reused once queued work
  // has run past the call.
  static constexpr int kSamplesInFlight = 2;
  virtual Status SampleTokensAsync(const Tensor& logits, std::span<const SampleRowParams> params,
                                   const Tensor& device_ids) {
    return Unsupported("this backend has no device sampler");
  }
  virtual Status TakeSampledTokens(std::span<int32_t> out) {
    return Unsupported("this backend has no device sampler");
  }

  // y[n, m] = x[n, k] * w[m, k]^T (+ bias[m]).
  void MatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
  // out[i, :] = table[ids[i], :] (dequantized).
  void Embed(const Tensor& table, const Tensor& ids, const Tensor& out);
  // out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w. `out` may alias `x`. Rows of any
  // length that matches w (used for per-head q/k norms with x viewed as [n * heads, head_dim]).
  void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out);
  // inout += a (same shape).
  void Add(const Tensor& a, const Tensor& inout);
  // Rotates x [n, heads, head_dim] in place: pairs (i, i + head_dim/2) by angle
  // positions[t] * inv_freq[i] (the "rotate_half" form of Hugging Face transformers).
  void Rope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x);
  // out = silu(gate) * up, all [n, ffn].
  void SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out);
  void WriteKv(const KvWriteArgs& args);
  void Attention(const AttentionArgs& args);
  // Copies whole pages (K, V and positions): page dst_ids[i] of `dst` = page src_ids[i] of
  // `src`. Pools must share page size, head dim and dtype; ids (i32) are in this backend's
  // memory. The working-set fetch and sequence forks use it.
  void CopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                 const Tensor& dst_ids);
  // Device-side page selection (PageBoundsArgs, PageSelectArgs, PageMapArgs): summaries of
  // pages, the bound-ranked selection of one token's pages per KV head, and the working-set step
  // that maps the selection to slots and copies what is missing. Everything stays in backend
  // memory, so a GPU selects without waiting for the host.
  void PageBounds(const PageBoundsArgs& args);
  void SelectPages(const PageSelectArgs& args);
  void MapPages(const PageMapArgs& args);
  // Insertion routes over the same summaries (KeyRouteArgs).
  void RouteKeys(const KeyRouteArgs& args);
  // Batches of independent calls (the sequences of one decode step), each entry with the result
  // of the single call: a GPU runs each kernel once for all of them instead of once per entry.
  // Entries must not write the same memory; AttentionBatch takes one query token per entry.
  void SelectPagesBatch(std::span<const PageSelectArgs> args);
  void MapPagesBatch(std::span<const PageMapArgs> args);
  void AttentionBatch(std::span<const AttentionArgs> args);
  // Fills `t` (f32 or bf16, backend memory) with offset + scale * u_i, u_i uniform in [-1, 1)
  // from a counter-based generator: element i depends only on (seed, i), so every backend
  // fills the same values (synthetic models).
  void FillRandom(const Tensor& t, uint64_t seed, float scale, float offset);
  // dst.flat[index[i]] = values[i] for every i < index.numel() (all i32 in this backend's memory;
  // distinct indices below dst.numel()). Uploads of scattered changes in one small copy and one
  // op instead of copies of whole ranges (device-side selection's page lists).
  void ScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst);

  // Fused forms of op sequences (the defaults run the sequence; a backend may fuse them).
  // MatMul of x with each consecutive row block of a stacked w, block i (ys[i].cols() rows) into
  // ys[i]: the q/k/v projections in one pass over their weights.
  void MatMulSplit(const Tensor& x, const Tensor& w, std::span<const Tensor> ys);
  // out = silu(x w_gate^T) * (x w_up^T) for w = [w_gate; w_up] stacked; `up` (out's shape) is
  // scratch for backends that run it as MatMul, MatMul, SwiGlu.
  void MatMulGlu(const Tensor& x, const Tensor& w, const Tensor& up, const Tensor& out);
  // inout += a, then out = RmsNorm(inout, w). `out` may alias `a`.
  void AddRmsNorm(const Tensor& a, const Tensor& inout, const Tensor& w, float eps,
                  const Tensor& out);
  // Rope(positions, inv_freq, q), Rope(positions, inv_freq, args.k), then WriteKv(args), with
  // positions = args.positions.
  void RopeWriteKv(const Tensor& inv_freq, const Tensor& q, const KvWriteArgs& args);

 protected:
  virtual void DoMatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) = 0;
  virtual void DoEmbed(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  virtual void DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) = 0;
  virtual void DoAdd(const Tensor& a, const Tensor& inout) = 0;
  virtual void DoRope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) = 0;
  virtual void DoSwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void DoWriteKv(const KvWriteArgs& args) = 0;
  virtual void DoAttention(const AttentionArgs& args) = 0;
  virtual void DoCopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                           const Tensor& dst_ids) = 0;
  virtual void DoFillRandom(const Tensor& t, uint64_t seed, float scale, float offset) = 0;
  virtual void DoScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst) = 0;
  virtual void DoPageBounds(const PageBoundsArgs& args) = 0;
  virtual void DoSelectPages(const PageSelectArgs& args) = 0;
  virtual void DoMapPages(const PageMapArgs& args) = 0;
  virtual void DoRouteKeys(const KeyRouteArgs& args) = 0;
  virtual void DoSelectPagesBatch(std::span<const PageSelectArgs> args) {
    for (const PageSelectArgs& a : args) DoSelectPages(a);
  }
  virtual void DoMapPagesBatch(std::span<const PageMapArgs> args) {
    for (const PageMapArgs& a : args) DoMapPages(a);
  }
  virtual void DoAttentionBatch(std::span<const AttentionArgs> args) {
    for (const AttentionArgs& a : args) DoAttention(a);
  }
  virtual void DoAddRmsNorm(const Tensor& a, const Tensor& inout, const Tensor& w, float eps,
                            const Tensor& out) {
    DoAdd(a, inout);
    DoRmsNorm(inout, w, eps, out);
  }
  virtual void DoMatMulSplit(const Tensor& x, const Tensor& w, std::span<const Tensor> ys) {
    int64_t row = 0;
    for (const Tensor& y : ys) {
      DoMatMul(x, w.Slice(row, row + y.cols()), nullptr, y);
      row += y.cols();
    }
  }
  virtual void DoMatMulGlu(const Tensor& x, const Tensor& w, const Tensor& up, const Tensor& out) {
    const int64_t f = out.cols();
    DoMatMul(x, w.Slice(0, f), nullptr, out);
    DoMatMul(x, w.Slice(f, 2 * f), nullptr, up);
    DoSwiGlu(out, up, out);
  }
  virtual void DoRopeWriteKv(const Tensor& inv_freq, const Tensor& q, const KvWriteArgs& args) {
    DoRope(args.positions, inv_freq, q);
    DoRope(args.positions, inv_freq, args.k);
    DoWriteKv(args);
  }
};

struct CpuBackendOptions {
  int threads = 0;  // 0: all hardware threads
};
// The reference backend. Never fails to construct.
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

struct CudaBackendOptions {
  int device = 0;  // CUDA device ordinal
  // Most bytes of device memory the backend's allocations (weights, KV, working sets, indexes,
  // workspaces) may hold at once; 0: no cap. Emulates a smaller GPU: an allocation past it fails
  // with ResourceExhausted as it would there (the CUDA context itself is not counted).
  int64_t memory_limit = 0;
};
// The CUDA backend (bf16 weights and activations, f32 accumulation). Unsupported in builds
// without CUDA or when no usable GPU is present (the message says which).
Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options);

// The element i of FillRandom's sequence for `seed`: a value in [-1, 1) (exact in f32). Every
// backend computes fma(scale, RandomUnit(seed, i), offset) from it, rounded once to f32.
inline float RandomUnit(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  // 24 random bits -> [-2^23, 2^23) * 2^-23.
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) *
         (1.0f / 8388608.0f);
}

}  // namespace icecache

// The CUDA backend: weights in bf16 on the device (GGUF types dequantized at load, norms and
// biases in f32), bf16 activations with f32 accumulation, cuBLASLt GEMMs and our own GEMV for
// decode batches, fused element-wise kernels, paged attention (split-KV decode, tensor-core
// prefill), a device sampler, and CUDA graphs for decode steps.
//
// Streams: kernels run on the compute stream; transfers between host and device run on the
// copy stream, ordered after the compute work queued before them (the device buffer may still
// be read) and before the compute work queued after them. Side work (Backend::BeginSideWork)
// runs on a third stream, with its own GEMM workspace, at the lowest priority (the block
// scheduler serves the compute stream first; ICECACHE_CUDA_SIDE_PRIORITY changes that). A
// host-to-device copy returns once the host buffer has been read, so callers may refill it at once.
// No call synchronizes the host with the compute stream except Synchronize, device-to-host copies'
// callers (via Synchronize) and SampleTokens.
//
// This header includes no CUDA headers: handles are forward-declared driver types.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "kernels/cuda/launch.h"

struct CUstream_st;
struct CUevent_st;
struct CUgraphExec_st;

namespace icecache::cuda {

struct StreamDeleter {
  void operator()(CUstream_st* s) const;
};
struct EventDeleter {
  void operator()(CUevent_st* e) const;
};
struct GraphExecDeleter {
  void operator()(CUgraphExec_st* g) const;
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDeleter>;

class GemmRunner;  // cuBLASLt plans (cuda_matmul.cu)
class SideTiming;  // ICECACHE_CUDA_SIDE_TIMING=1 (side_timing.h)

// Aborts with the CUDA error text when `code` (a cudaError_t) is not success: for launches and
// stream operations, whose failure is an internal bug or a broken device.
void CheckCuda(int code, const char* what);

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  using Backend::Allocate;
  using Backend::AllocateStaging;

  Device device() const override { return Device::kCuda; }
  std::string Describe() const override;
  Result<Tensor> Allocate(DType dtype, std::span<const int64_t> shape) override;
  Status Copy(const Tensor& src, const Tensor& dst) override;
  Status CopyBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                    int64_t src_pitch, int64_t dst_pitch) override;
  Result<Tensor> AllocateStaging(DType dtype, std::span<const int64_t> shape) override;
  DType activation_dtype() const override { return DType::kBF16; }
  DType default_kv_dtype() const override { return DType::kBF16; }
  Result<Tensor> PrepareWeight(const Tensor& w) override;
  Result<Tensor> PrepareStacked(std::span<const Tensor* const> parts) override;
  void Synchronize() override;
  DeviceMemory device_memory() const override;
  Status RunGraph(uint64_t key, const std::function<Status()>& body) override;
  Status SampleTokens(const Tensor& logits, std::span<const SampleRowParams> params,
                      std::span<int32_t> out) override;
  Status SampleTokensAsync(const Tensor& logits, std::span<const SampleRowParams> params,
                           const Tensor& device_ids) override;
  Status TakeSampledTokens(std::span<int32_t> out) override;
  Status CopyBlocksQueued(const void* src, void* dst, int64_t count, int64_t block_bytes,
                          int64_t src_pitch, int64_t dst_pitch) override;
  void RecordFence(int fence) override;
  void WaitFence(int fence) override;
  void BeginSideWork() override;
  void EndSideWork() override;
  void JoinSideWork() override;
  void BeginLanes() override;
  void Lane(int i) override;
  void EndLanes() override;

  // Where operations queue: the compute stream, the side stream during side work, or the current
  // lane's stream between BeginLanes and EndLanes.
  kernels::Stream stream() const {
    if (on_side_) return side_.get();
    return lane_ >= 0 ? lanes_[lane_].stream.get() : compute_.get();
  }
  int num_sms() const { return num_sms_; }
  // Graphs captured so far and replays run (for tests and logs).
  int graphs_captured() const { return graphs_captured_; }
  int64_t graph_replays() const { return graph_replays_; }

 protected:
  void DoMatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) override;
  void DoEmbed(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override;
  void DoAdd(const Tensor& a, const Tensor& inout) override;
  void DoRope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) override;
  void DoSwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void DoMatMulSplit(const Tensor& x, const Tensor& w, std::span<const Tensor> ys) override;
  void DoMatMulGlu(const Tensor& x, const Tensor& w, const Tensor& up, const Tensor& out) override;
  void DoWriteKv(const KvWriteArgs& args) override;
  void DoAttention(const AttentionArgs& args) override;
  void DoCopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                   const Tensor& dst_ids) override;
  void DoFillRandom(const Tensor& t, uint64_t seed, float scale, float offset) override;
  void DoScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst) override;
  void DoPageBounds(const PageBoundsArgs& args) override;
  void DoSelectPages(const PageSelectArgs& args) override;
  void DoMapPages(const PageMapArgs& args) override;
  void DoRouteKeys(const KeyRouteArgs& args) override;
  void DoSelectPagesBatch(std::span<const PageSelectArgs> args) override;
  void DoMapPagesBatch(std::span<const PageMapArgs> args) override;
  void DoAttentionBatch(std::span<const AttentionArgs> args) override;
  void DoAddRmsNorm(const Tensor& a, const Tensor& inout, const Tensor& w, float eps,
                    const Tensor& out) override;
  void DoRopeWriteKv(const Tensor& inv_freq, const Tensor& q, const KvWriteArgs& args) override;

 private:
  CudaBackend();
  Status Init(const CudaBackendOptions& options);
  Status InitLanes();
  // Kernel parameters of one SelectPages / MapPages call (checks that its tensors are on the
  // device).
  kernels::PageSelectParams SelectParams(const PageSelectArgs& args);
  kernels::PageMapParams MapParams(const PageMapArgs& args);
  // Orders the copy stream after the compute work queued so far.
  void CopyAfterCompute();
  // Orders the compute stream after the copies queued so far.
  void ComputeAfterCopy();
  // A device tensor of `dtype` and `shape` filled from host f32 rows (converted on the host).
  Result<Tensor> UploadConverted(const Tensor& host, DType dtype);
  // Converts a host weight into `dev` (allocated, its shape; f32 or bf16).
  Status UploadInto(const Tensor& host, const Tensor& dev);

  int device_ = 0;
  std::string name_;
  int num_sms_ = 0;
  int64_t total_memory_ = 0;
  // Bytes held by live allocations (shared with their deleters, which may outlive the backend)
  // and the most ever held; memory_limit_ caps them (0: no cap).
  struct MemoryCount {
    std::atomic<int64_t> used{0}, peak{0};
  };
  std::shared_ptr<MemoryCount> memory_ = std::make_shared<MemoryCount>();
  int64_t memory_limit_ = 0;
  StreamPtr compute_, copy_, side_;
  EventPtr compute_done_, copy_done_, side_start_, side_done_;
  bool on_side_ = false;       // between BeginSideWork and EndSideWork
  bool side_pending_ = false;  // side work queued and not joined yet
  std::unique_ptr<GemmRunner> gemm_, side_gemm_;
  Tensor decode_scratch_;  // partial outputs, log-sum-exps and counters of decode attention
  kernels::DecodeWorkspace decode_ws_;
  // Side work's own (smaller) decode workspace: side work may attend while the compute stream
  // does (the transformer's batch halves).
  kernels::DecodeWorkspace side_ws_;
  // Lanes (Backend::BeginLanes): a stream, the event that ends its work, and a slice of the
  // decode workspace each (the main workspace is idle while lanes run: they are ordered after
  // the compute stream's work and before what follows EndLanes).
  struct LaneState {
    StreamPtr stream;
    EventPtr done;
    kernels::DecodeWorkspace ws;
    bool used = false;  // queued work since BeginLanes
  };
  std::vector<LaneState> lanes_;
  EventPtr lanes_start_;
  bool in_lanes_ = false;
  int lane_ = -1;  // the lane operations queue on, or -1 (compute or side stream)
  // The decode workspace of the stream operations queue on.
  const kernels::DecodeWorkspace& decode_ws() const {
    if (on_side_) return side_ws_;
    return lane_ >= 0 ? lanes_[lane_].ws : decode_ws_;
  }

  struct Graph {
    int eager_runs = 0;
    GraphExecPtr exec;
    double gpu_ms = 0;  // timed replays (ICECACHE_CUDA_TIMING=1)
    int64_t timed = 0;
  };
  std::unordered_map<uint64_t, Graph> graphs_;
  bool graphs_enabled_ = true;    // ICECACHE_CUDA_GRAPHS=0 turns capture off
  bool stacking_enabled_ = true;  // ICECACHE_CUDA_STACKED=0 keeps stackable weights apart
  int graphs_captured_ = 0;
  int64_t graph_replays_ = 0;
  // Replay timing (ICECACHE_CUDA_TIMING=1): events around the last replay, read at the next.
  void CollectGraphTiming();
  EventPtr timing_start_, timing_end_;
  Graph* timing_pending_ = nullptr;          // the graph whose last replay the events bracket
  std::unique_ptr<SideTiming> side_timing_;  // ICECACHE_CUDA_SIDE_TIMING=1

  Tensor upload_staging_;  // pinned host buffer of PrepareWeight (made on first use)
  // SampleTokensAsync: a ring of kSamplesInFlight slots, each with its per-row parameters
  // (pinned host and device), the ids' host copy and an event after that copy.
  struct SampleSlot {
    Tensor params_host, params_dev, ids_host;
    EventPtr done;
    int64_t rows = 0;
  };
  SampleSlot sample_slots_[kSamplesInFlight];
  int sample_next_ = 0;       // the slot of the next call
  int sample_pending_ = 0;    // calls not yet taken
  Tensor sample_ids_dev_;     // SampleTokens' device ids
  EventPtr fences_[kFences];  // RecordFence / WaitFence, on the compute stream
};

}  // namespace icecache::cuda

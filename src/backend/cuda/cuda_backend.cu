// CudaBackend: device selection, memory, streams, copies, graphs (the CUDA runtime side; the
// ops are in cuda_ops.cc, weight preparation in cuda_weights.cc).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_matmul.h"
#include "backend/cuda/side_timing.h"
#include "core/check.h"
#include "core/env_switch.h"

namespace icecache::cuda {

namespace {

constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;
// Side work's products: the prefetch's small ones, or half a batch's layer (batch halves), which
// should find the same cuBLASLt plans as the compute stream's.
constexpr int64_t kSideGemmWorkspaceBytes = kGemmWorkspaceBytes;
// Decode attention scratch: enough partial rows for several waves of split blocks.
constexpr int64_t kDecodePartialFloats = int64_t{8} << 20;
constexpr int64_t kDecodeLseFloats = int64_t{256} << 10;
constexpr int64_t kDecodeCounters = int64_t{64} << 10;
// Lanes (Backend::BeginLanes) fold onto this many streams by default: the device's default number
// of hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS), beyond which streams share queues.
constexpr int kDefaultLanes = 8;

std::string Err(cudaError_t e) { return cudaGetErrorString(e); }

int64_t ShapeBytes(DType dtype, std::span<const int64_t> shape, bool* ok) {
  *ok = shape.size() <= static_cast<size_t>(Tensor::kMaxDims);
  int64_t elems = 1;
  for (int64_t d : shape) {
    if (d < 0) *ok = false;
    elems *= d;
  }
  const int64_t inner = shape.empty() ? 1 : shape.back();
  if (inner == 0) return 0;
  if (inner % BlockElems(dtype) != 0) *ok = false;
  return *ok ? elems / inner * RowBytes(dtype, inner) : 0;
}

}  // namespace

void StreamDeleter::operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
void EventDeleter::operator()(CUevent_st* e) const { cudaEventDestroy(e); }
void GraphExecDeleter::operator()(CUgraphExec_st* g) const { cudaGraphExecDestroy(g); }

void CheckCuda(int code, const char* what) {
  if (code == 0) return;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, kernels::ErrorString(code));
  std::abort();
}

CudaBackend::CudaBackend() = default;

CudaBackend::~CudaBackend() {
  if (compute_) cudaStreamSynchronize(compute_.get());
  if (copy_) cudaStreamSynchronize(copy_.get());
  if (side_) cudaStreamSynchronize(side_.get());
  for (LaneState& lane : lanes_) cudaStreamSynchronize(lane.stream.get());
  if (side_timing_) side_timing_->Report();
  side_timing_.reset();
  if (timing_start_) {
    CollectGraphTiming();
    std::fprintf(stderr, "[cuda] %d graphs captured, %lld replays\n", graphs_captured_,
                 static_cast<long long>(graph_replays_));
    for (const auto& [key, g] : graphs_) {
      if (g.timed == 0) continue;
      // The transformer's keys carry the step's token count in bits 40 and up.
      std::fprintf(stderr, "[cuda] graph of %llu tokens: %lld timed replays, %.3f ms on average\n",
                   static_cast<unsigned long long>(key >> 40), static_cast<long long>(g.timed),
                   g.gpu_ms / static_cast<double>(g.timed));
    }
  }
  graphs_.clear();
  gemm_.reset();
}

Result<std::unique_ptr<Backend>> CudaBackend::Create(const CudaBackendOptions& options) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  ICECACHE_RETURN_IF_ERROR(b->Init(options));
  return std::unique_ptr<Backend>(std::move(b));
}

Status CudaBackend::Init(const CudaBackendOptions& options) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return Unsupported("device 'cuda': no usable CUDA GPU (" +
                       (e != cudaSuccess ? Err(e) : std::string("no devices")) + ")");
  }
  if (options.device < 0 || options.device >= count) {
    return InvalidArgument("CUDA device " + std::to_string(options.device) + " does not exist (" +
                           std::to_string(count) + " present)");
  }
  device_ = options.device;
  if (options.memory_limit < 0) return InvalidArgument("device memory limit must be >= 0");
  memory_limit_ = options.memory_limit;
  if ((e = cudaSetDevice(device_)) != cudaSuccess) {
    return Unsupported("device 'cuda': cannot use GPU " + std::to_string(device_) + ": " + Err(e));
  }
  cudaDeviceProp prop{};
  if ((e = cudaGetDeviceProperties(&prop, device_)) != cudaSuccess) {
    return Unsupported("device 'cuda': cannot query GPU: " + Err(e));
  }
  if (prop.major < 8) {
    return Unsupported(std::string("device 'cuda': ") + prop.name + " (compute capability " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                       ") is too old; the kernels need bf16 tensor cores (8.0 or newer)");
  }
  name_ = prop.name;
  num_sms_ = prop.multiProcessorCount;
  total_memory_ = static_cast<int64_t>(prop.totalGlobalMem);
  // Which of the compute and side streams the block scheduler serves first when both have
  // blocks waiting: ICECACHE_CUDA_SIDE_PRIORITY -1 (default) the compute stream, 0 neither, 1 the
  // side stream. Measured on an H100 (docs/PERF.md): copies behind the step slow it least with
  // the compute stream first; the prefetch and fetching now show no difference.
  int least = 0, greatest = 0;
  if ((e = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess) {
    return Internal("cannot read the CUDA stream priorities: " + Err(e));
  }
  const int side_first = EnvInt("ICECACHE_CUDA_SIDE_PRIORITY", -1);
  const int compute_priority = side_first < 0 ? greatest : least;
  const int side_priority = side_first > 0 ? greatest : least;
  cudaStream_t s = nullptr;
  if ((e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, compute_priority)) !=
      cudaSuccess) {
    return Internal("cannot create a CUDA stream: " + Err(e));
  }
  compute_.reset(s);
  if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess) {
    return Internal("cannot create a CUDA stream: " + Err(e));
  }
  copy_.reset(s);
  if ((e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, side_priority)) != cudaSuccess) {
    return Internal("cannot create a CUDA stream: " + Err(e));
  }
  side_.reset(s);
  cudaEvent_t ev = nullptr;
  if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
    return Internal("cannot create a CUDA event: " + Err(e));
  }
  compute_done_.reset(ev);
  if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
    return Internal("cannot create a CUDA event: " + Err(e));
  }
  copy_done_.reset(ev);
  for (EventPtr* p : {&side_start_, &side_done_}) {
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
      return Internal("cannot create a CUDA event: " + Err(e));
    }
    p->reset(ev);
  }
  for (EventPtr& f : fences_) {
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
      return Internal("cannot create a CUDA event: " + Err(e));
    }
    f.reset(ev);
  }
  // ICECACHE_CUDA_TIMING=1: time graph replays with events (printed when the backend goes).
  if (EnvSwitch("ICECACHE_CUDA_TIMING", false)) {
    if (cudaEventCreate(&ev) == cudaSuccess) timing_start_.reset(ev);
    if (cudaEventCreate(&ev) == cudaSuccess) timing_end_.reset(ev);
    if (!timing_end_) timing_start_.reset();
  }

  // ICECACHE_CUDA_SIDE_TIMING=1: time side work against the main work beside it.
  if (EnvSwitch("ICECACHE_CUDA_SIDE_TIMING", false)) side_timing_ = std::make_unique<SideTiming>();

  // ICECACHE_CUDA_GRAPHS=0: run decode steps eagerly (no capture), to tell a graph problem from
  // a kernel one.
  graphs_enabled_ = EnvSwitch("ICECACHE_CUDA_GRAPHS", true);
  // ICECACHE_CUDA_STACKED=0: keep q/k/v and gate/up apart (PrepareStacked), to compare.
  stacking_enabled_ = EnvSwitch("ICECACHE_CUDA_STACKED", true);

  // Fixed scratch, allocated once: the GEMM workspace and the decode partials (bytes as i32).
  constexpr int64_t kSideShare = 4;  // side work's decode workspace: a quarter of the main one
  const int64_t scratch_ints =
      (kGemmWorkspaceBytes + kSideGemmWorkspaceBytes) / 4 +
      (kDecodePartialFloats + kDecodeLseFloats + kDecodeCounters) * (kSideShare + 1) / kSideShare;
  ICECACHE_ASSIGN_OR_RETURN(decode_scratch_, Allocate(DType::kI32, {scratch_ints}));
  int32_t* base = decode_scratch_.data_as<int32_t>();
  ICECACHE_ASSIGN_OR_RETURN(gemm_, GemmRunner::Create(base, kGemmWorkspaceBytes));
  base += kGemmWorkspaceBytes / 4;
  ICECACHE_ASSIGN_OR_RETURN(side_gemm_, GemmRunner::Create(base, kSideGemmWorkspaceBytes));
  base += kSideGemmWorkspaceBytes / 4;
  decode_ws_.partial_o = reinterpret_cast<float*>(base);
  decode_ws_.o_capacity = kDecodePartialFloats;
  base += kDecodePartialFloats;
  decode_ws_.partial_lse = reinterpret_cast<float*>(base);
  decode_ws_.lse_capacity = kDecodeLseFloats;
  base += kDecodeLseFloats;
  decode_ws_.counters = base;
  decode_ws_.counter_capacity = kDecodeCounters;
  base += kDecodeCounters;
  side_ws_.partial_o = reinterpret_cast<float*>(base);
  side_ws_.o_capacity = kDecodePartialFloats / kSideShare;
  base += side_ws_.o_capacity;
  side_ws_.partial_lse = reinterpret_cast<float*>(base);
  side_ws_.lse_capacity = kDecodeLseFloats / kSideShare;
  base += side_ws_.lse_capacity;
  side_ws_.counters = base;
  side_ws_.counter_capacity = kDecodeCounters / kSideShare;
  ICECACHE_RETURN_IF_ERROR(InitLanes());
  Synchronize();
  return Status::Ok();
}

Status CudaBackend::InitLanes() {
  // ICECACHE_CUDA_LANES=N: fold lanes onto N streams (0 or 1: none, lane work stays on the
  // compute stream), to compare.
  const int n = std::clamp(EnvInt("ICECACHE_CUDA_LANES", kDefaultLanes), 0, 32);
  if (n < 2) return Status::Ok();
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return Internal("cannot create a CUDA event: " + Err(e));
  lanes_start_.reset(ev);
  lanes_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    LaneState& lane = lanes_[i];
    cudaStream_t s = nullptr;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess) {
      return Internal("cannot create a CUDA stream: " + Err(e));
    }
    lane.stream.reset(s);
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) {
      return Internal("cannot create a CUDA event: " + Err(e));
    }
    lane.done.reset(ev);
    // Slice i of the decode workspace (counters start zeroed and every launch leaves them so).
    lane.ws.o_capacity = decode_ws_.o_capacity / n;
    lane.ws.lse_capacity = decode_ws_.lse_capacity / n;
    lane.ws.counter_capacity = decode_ws_.counter_capacity / n;
    lane.ws.partial_o = decode_ws_.partial_o + i * lane.ws.o_capacity;
    lane.ws.partial_lse = decode_ws_.partial_lse + i * lane.ws.lse_capacity;
    lane.ws.counters = decode_ws_.counters + i * lane.ws.counter_capacity;
  }
  return Status::Ok();
}

std::string CudaBackend::Describe() const {
  char buf[200];
  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::snprintf(buf, sizeof(buf), "cuda (%s, %d SMs, %.1f GiB, bf16", name_.c_str(), num_sms_,
                static_cast<double>(total_memory_) / gib);
  std::string text = buf;
  if (memory_limit_ > 0) {
    std::snprintf(buf, sizeof(buf), ", capped at %.1f GiB",
                  static_cast<double>(memory_limit_) / gib);
    text += buf;
  }
  return text + ")";
}

Result<Tensor> CudaBackend::Allocate(DType dtype, std::span<const int64_t> shape) {
  bool ok = true;
  const int64_t bytes = ShapeBytes(dtype, shape, &ok);
  if (!ok) return Tensor::Host(dtype, shape);  // reports the shape error
  void* p = nullptr;
  const size_t want = static_cast<size_t>(std::max<int64_t>(bytes, 256));
  const int64_t held = memory_->used.load();
  if (memory_limit_ > 0 && held + static_cast<int64_t>(want) > memory_limit_) {
    return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes on " + name_ +
                             ": --device-mem-limit " + std::to_string(memory_limit_ >> 20) +
                             " MiB reached (" + std::to_string(held >> 20) + " MiB in use)");
  }
  const cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of a failed allocation
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes on " + name_ +
                             " (" + std::to_string(free_b >> 20) + " MiB free of " +
                             std::to_string(total_b >> 20) + " MiB): " + Err(e));
  }
  CheckCuda(cudaMemsetAsync(p, 0, want, compute_.get()), "cudaMemsetAsync");
  const int64_t now =
      memory_->used.fetch_add(static_cast<int64_t>(want)) + static_cast<int64_t>(want);
  int64_t peak = memory_->peak.load();
  while (now > peak && !memory_->peak.compare_exchange_weak(peak, now)) {
  }
  std::shared_ptr<void> owner(p, [count = memory_, want](void* q) {
    cudaFree(q);
    count->used.fetch_sub(static_cast<int64_t>(want));
  });
  return Tensor(p, dtype, shape, Device::kCuda, std::move(owner));
}

Backend::DeviceMemory CudaBackend::device_memory() const {
  return {memory_->used.load(), memory_->peak.load(), memory_limit_};
}

Result<Tensor> CudaBackend::AllocateStaging(DType dtype, std::span<const int64_t> shape) {
  bool ok = true;
  const int64_t bytes = ShapeBytes(dtype, shape, &ok);
  if (!ok) return Tensor::Host(dtype, shape);
  void* p = nullptr;
  const size_t want = static_cast<size_t>(std::max<int64_t>(bytes, 64));
  const cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return ResourceExhausted("cannot allocate " + std::to_string(bytes) +
                             " bytes of pinned host memory: " + Err(e));
  }
  std::memset(p, 0, want);
  std::shared_ptr<void> owner(p, [](void* q) { cudaFreeHost(q); });
  return Tensor(p, dtype, shape, Device::kCpu, std::move(owner));
}

void CudaBackend::CopyAfterCompute() {
  ICECACHE_CHECK_MSG(!on_side_, "copies are not side work");
  ICECACHE_CHECK_MSG(!in_lanes_, "copies are not lane work");
  CheckCuda(cudaEventRecord(compute_done_.get(), compute_.get()), "cudaEventRecord");
  CheckCuda(cudaStreamWaitEvent(copy_.get(), compute_done_.get(), 0), "cudaStreamWaitEvent");
}

void CudaBackend::ComputeAfterCopy() {
  CheckCuda(cudaEventRecord(copy_done_.get(), copy_.get()), "cudaEventRecord");
  CheckCuda(cudaStreamWaitEvent(compute_.get(), copy_done_.get(), 0), "cudaStreamWaitEvent");
}

Status CudaBackend::Copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel()) {
    return InvalidArgument("copy " + std::string(DTypeName(src.dtype())) + src.ShapeString() +
                           " -> " + std::string(DTypeName(dst.dtype())) + dst.ShapeString() +
                           ": dtype or size differs");
  }
  return CopyBlocks(src.data(), dst.data(), 1, src.nbytes(), src.nbytes(), dst.nbytes());
}

namespace {

// Queues a copy of `count` blocks on `s`: one block, or blocks back to back, as a plain copy (no
// pitch limits), else one strided copy.
cudaError_t EnqueueBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                          int64_t src_pitch, int64_t dst_pitch, cudaStream_t s) {
  if (count == 1 || (src_pitch == block_bytes && dst_pitch == block_bytes)) {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(count * block_bytes), cudaMemcpyDefault,
                           s);
  }
  return cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, block_bytes, count, cudaMemcpyDefault,
                           s);
}

}  // namespace

Status CudaBackend::CopyBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                               int64_t src_pitch, int64_t dst_pitch) {
  if (count <= 0 || block_bytes <= 0 || src == dst) return Status::Ok();
  cudaPointerAttributes sa{}, da{};
  if (cudaPointerGetAttributes(&sa, src) != cudaSuccess ||
      cudaPointerGetAttributes(&da, dst) != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument("copy: cannot classify a pointer");
  }
  const bool src_dev = sa.type == cudaMemoryTypeDevice;
  const bool dst_dev = da.type == cudaMemoryTypeDevice;
  auto enqueue = [&](cudaStream_t s) {
    return EnqueueBlocks(src, dst, count, block_bytes, src_pitch, dst_pitch, s);
  };
  if (src_dev && dst_dev) {
    const cudaError_t e = enqueue(compute_.get());
    if (e != cudaSuccess) return Internal("device copy failed: " + Err(e));
    return Status::Ok();
  }
  if (!src_dev && !dst_dev) {
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(static_cast<char*>(dst) + i * dst_pitch,
                  static_cast<const char*>(src) + i * src_pitch, static_cast<size_t>(block_bytes));
    }
    return Status::Ok();
  }
  // Host <-> device on the copy stream, after the compute work queued so far.
  CopyAfterCompute();
  const cudaError_t e = enqueue(copy_.get());
  if (e != cudaSuccess) return Internal("host/device copy failed: " + Err(e));
  ComputeAfterCopy();
  if (!src_dev) {
    // The caller may refill its host buffer as soon as we return.
    const cudaError_t w = cudaEventSynchronize(copy_done_.get());
    if (w != cudaSuccess) return Internal("host-to-device copy failed: " + Err(w));
  }
  return Status::Ok();
}

Status CudaBackend::CopyBlocksQueued(const void* src, void* dst, int64_t count, int64_t block_bytes,
                                     int64_t src_pitch, int64_t dst_pitch) {
  if (count <= 0 || block_bytes <= 0) return Status::Ok();
  // On the compute stream, in order with the kernels before and after it; no host wait.
  const cudaError_t e =
      EnqueueBlocks(src, dst, count, block_bytes, src_pitch, dst_pitch, compute_.get());
  if (e != cudaSuccess) return Internal("host-to-device copy failed: " + Err(e));
  return Status::Ok();
}

void CudaBackend::RecordFence(int fence) {
  CheckCuda(cudaEventRecord(fences_[fence].get(), compute_.get()), "cudaEventRecord (fence)");
}

void CudaBackend::WaitFence(int fence) {
  CheckCuda(cudaEventSynchronize(fences_[fence].get()), "cudaEventSynchronize (fence)");
}

Status CudaBackend::SampleTokensAsync(const Tensor& logits, std::span<const SampleRowParams> params,
                                      const Tensor& device_ids) {
  if (logits.device() != Device::kCuda || logits.dtype() != DType::kF32 || logits.ndim() != 2) {
    return InvalidArgument("SampleTokens: logits must be a f32 [rows, vocab] GPU tensor");
  }
  const int64_t rows = logits.dim(0);
  if (static_cast<int64_t>(params.size()) != rows) {
    return InvalidArgument("SampleTokens: one parameter set per row needed");
  }
  if (device_ids.device() != Device::kCuda || device_ids.dtype() != DType::kI32 ||
      device_ids.numel() < rows) {
    return InvalidArgument("SampleTokens: the ids need an i32 GPU tensor of one entry per row");
  }
  if (sample_pending_ == kSamplesInFlight) {
    return Internal("SampleTokens: " + std::to_string(kSamplesInFlight) +
                    " samples are already pending");
  }
  static_assert(sizeof(kernels::SampleRow) == 32, "SampleRow is 8 i32 words");
  // The slot was taken before (calls are taken in order), so its buffers are free.
  SampleSlot& slot = sample_slots_[sample_next_];
  if (slot.ids_host.empty() || slot.ids_host.numel() < rows) {
    const int64_t cap = std::max<int64_t>(rows, 64);
    ICECACHE_ASSIGN_OR_RETURN(slot.params_host, AllocateStaging(DType::kI32, {cap * 8}));
    ICECACHE_ASSIGN_OR_RETURN(slot.params_dev, Allocate(DType::kI32, {cap * 8}));
    ICECACHE_ASSIGN_OR_RETURN(slot.ids_host, AllocateStaging(DType::kI32, {cap}));
  }
  if (!slot.done) {
    cudaEvent_t ev = nullptr;
    const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return Internal("cannot create a CUDA event: " + Err(e));
    slot.done.reset(ev);
  }
  slot.rows = rows;
  if (rows > 0) {
    auto* rp = reinterpret_cast<kernels::SampleRow*>(slot.params_host.data());
    for (int64_t r = 0; r < rows; ++r) {
      const SampleRowParams& p = params[r];
      rp[r] = kernels::SampleRow{p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.step};
    }
    // Everything on the compute stream, in order with the step that made the logits and the
    // steps after it; the host waits only in TakeSampledTokens.
    cudaStream_t s = compute_.get();
    CheckCuda(cudaMemcpyAsync(slot.params_dev.data(), rp, static_cast<size_t>(rows) * 32,
                              cudaMemcpyHostToDevice, s),
              "sample parameters");
    CheckCuda(
        kernels::LaunchSample(s, logits.data_as<const float>(), rows, logits.dim(1),
                              reinterpret_cast<const kernels::SampleRow*>(slot.params_dev.data()),
                              device_ids.data_as<int32_t>()),
        "sample");
    CheckCuda(cudaMemcpyAsync(slot.ids_host.data(), device_ids.data(),
                              static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, s),
              "sampled ids");
  }
  CheckCuda(cudaEventRecord(slot.done.get(), compute_.get()), "cudaEventRecord (sample)");
  sample_next_ = (sample_next_ + 1) % kSamplesInFlight;
  ++sample_pending_;
  return Status::Ok();
}

Status CudaBackend::TakeSampledTokens(std::span<int32_t> out) {
  if (sample_pending_ == 0) return Internal("TakeSampledTokens: no sample is pending");
  const int oldest = (sample_next_ - sample_pending_ + kSamplesInFlight) % kSamplesInFlight;
  SampleSlot& slot = sample_slots_[oldest];
  --sample_pending_;
  const cudaError_t e = cudaEventSynchronize(slot.done.get());
  if (e != cudaSuccess) return Internal("sampling on the device failed: " + Err(e));
  if (static_cast<int64_t>(out.size()) != slot.rows) {
    return InvalidArgument("TakeSampledTokens: one output per sampled row needed");
  }
  std::memcpy(out.data(), slot.ids_host.data(), static_cast<size_t>(slot.rows) * 4);
  return Status::Ok();
}

void CudaBackend::BeginSideWork() {
  ICECACHE_CHECK_MSG(!on_side_, "side work does not nest");
  CheckCuda(cudaEventRecord(side_start_.get(), compute_.get()), "cudaEventRecord (side)");
  CheckCuda(cudaStreamWaitEvent(side_.get(), side_start_.get(), 0), "cudaStreamWaitEvent (side)");
  if (side_timing_) side_timing_->Begin(compute_.get());
  on_side_ = true;
}

void CudaBackend::EndSideWork() {
  ICECACHE_CHECK_MSG(on_side_, "EndSideWork without BeginSideWork");
  CheckCuda(cudaEventRecord(side_done_.get(), side_.get()), "cudaEventRecord (side)");
  if (side_timing_) side_timing_->End(side_.get());
  on_side_ = false;
  side_pending_ = true;
}

void CudaBackend::JoinSideWork() {
  if (!side_pending_) return;
  if (side_timing_) side_timing_->Arrive(compute_.get());
  CheckCuda(cudaStreamWaitEvent(compute_.get(), side_done_.get(), 0), "cudaStreamWaitEvent (side)");
  if (side_timing_) side_timing_->Resume(compute_.get());
  side_pending_ = false;
}

void CudaBackend::BeginLanes() {
  ICECACHE_CHECK_MSG(!on_side_ && !in_lanes_, "lanes do not nest and are not side work");
  in_lanes_ = true;
  lane_ = -1;
  if (lanes_.empty()) return;
  CheckCuda(cudaEventRecord(lanes_start_.get(), compute_.get()), "cudaEventRecord (lanes)");
}

void CudaBackend::Lane(int i) {
  ICECACHE_CHECK_MSG(in_lanes_ && i >= 0, "Lane outside BeginLanes/EndLanes");
  if (lanes_.empty()) return;
  const int l = i % static_cast<int>(lanes_.size());
  LaneState& lane = lanes_[l];
  if (!lane.used) {
    CheckCuda(cudaStreamWaitEvent(lane.stream.get(), lanes_start_.get(), 0),
              "cudaStreamWaitEvent (lane)");
    lane.used = true;
  }
  lane_ = l;
}

void CudaBackend::EndLanes() {
  ICECACHE_CHECK_MSG(in_lanes_, "EndLanes without BeginLanes");
  for (LaneState& lane : lanes_) {
    if (!lane.used) continue;
    CheckCuda(cudaEventRecord(lane.done.get(), lane.stream.get()), "cudaEventRecord (lane)");
    CheckCuda(cudaStreamWaitEvent(compute_.get(), lane.done.get(), 0),
              "cudaStreamWaitEvent (lane)");
    lane.used = false;
  }
  lane_ = -1;
  in_lanes_ = false;
}

void CudaBackend::Synchronize() {
  ICECACHE_CHECK_MSG(!in_lanes_, "Synchronize inside lanes");
  JoinSideWork();
  CheckCuda(cudaStreamSynchronize(compute_.get()), "cudaStreamSynchronize (compute)");
  CheckCuda(cudaStreamSynchronize(copy_.get()), "cudaStreamSynchronize (copy)");
}

void CudaBackend::CollectGraphTiming() {
  if (timing_pending_ == nullptr) return;
  float ms = 0;
  if (cudaEventSynchronize(timing_end_.get()) == cudaSuccess &&
      cudaEventElapsedTime(&ms, timing_start_.get(), timing_end_.get()) == cudaSuccess) {
    timing_pending_->gpu_ms += ms;
    ++timing_pending_->timed;
  }
  timing_pending_ = nullptr;
}

Status CudaBackend::RunGraph(uint64_t key, const std::function<Status()>& body) {
  if (!graphs_enabled_) return body();
  Graph& g = graphs_[key];
  if (g.exec) {
    ++graph_replays_;
    if (timing_start_) {
      CollectGraphTiming();
      CheckCuda(cudaEventRecord(timing_start_.get(), compute_.get()), "cudaEventRecord");
    }
    const cudaError_t e = cudaGraphLaunch(g.exec.get(), compute_.get());
    if (e != cudaSuccess) return Internal("CUDA graph launch failed: " + Err(e));
    if (timing_start_) {
      CheckCuda(cudaEventRecord(timing_end_.get(), compute_.get()), "cudaEventRecord");
      timing_pending_ = &g;
    }
    return Status::Ok();
  }
  if (g.eager_runs == 0) {
    // First step of this shape: eager, so that lazily made plans (GEMM heuristics) exist before
    // a capture.
    ++g.eager_runs;
    return body();
  }
  cudaStream_t s = compute_.get();
  cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return Internal("CUDA graph capture failed to start: " + Err(e));
  const Status st = body();
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(s, &graph);
  if (!st.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return st;
  }
  if (e != cudaSuccess) return Internal("CUDA graph capture failed: " + Err(e));
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return Internal("CUDA graph instantiation failed: " + Err(e));
  g.exec.reset(exec);
  ++graphs_captured_;
  ++graph_replays_;
  e = cudaGraphLaunch(exec, s);
  if (e != cudaSuccess) return Internal("CUDA graph launch failed: " + Err(e));
  return Status::Ok();
}

}  // namespace icecache::cuda

namespace icecache {

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  return cuda::CudaBackend::Create(options);
}

}  // namespace icecache

// The CPU backend: AVX2 kernels, OpenBLAS sgemm (single-threaded) and our ThreadPool.
//
// Every op runs on the calling thread plus the pool. Scratch memory lives in Workspace, owned by
// the backend: an op sizes it before its parallel part (growing it only when a call needs more
// than any earlier one), so steady-state calls never allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace icecache::cpu {

// A 64-byte aligned float buffer that only grows.
class AlignedBuffer {
 public:
  float* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  // Makes size() >= floats; the contents are not kept.
  void Reserve(int64_t floats);

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  int64_t size_ = 0;
};

class Workspace {
 public:
  explicit Workspace(int threads) : per_thread_(threads) {}
  // Every thread's buffer holds at least `floats` floats. Call outside parallel regions.
  void ReservePerThread(int64_t floats);
  // The buffer shared by all threads holds at least `floats` floats.
  void ReserveShared(int64_t floats) { shared_.Reserve(floats); }
  float* thread_buffer(int thread) const { return per_thread_[thread].data(); }
  float* shared() const { return shared_.data(); }
  // A reusable index list for the calling thread (cleared by its user; keeps its capacity).
  std::vector<int64_t>& ints() { return ints_; }

 private:
  std::vector<AlignedBuffer> per_thread_;
  AlignedBuffer shared_;
  std::vector<int64_t> ints_;
};

struct CpuContext {
  ThreadPool* pool;
  Workspace* workspace;
  int threads() const { return pool->size(); }
};

// Op implementations, one file each (matmul_cpu.cc, elementwise_cpu.cc, kv_write_cpu.cc,
// attention_cpu.cc). Shapes were checked by Backend; these check dtypes and contents.
void MatMulCpu(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias,
               const Tensor& y);
void EmbedCpu(const CpuContext& ctx, const Tensor& table, const Tensor& ids, const Tensor& out);
void RmsNormCpu(const CpuContext& ctx, const Tensor& x, const Tensor& w, float eps,
                const Tensor& out);
void AddCpu(const CpuContext& ctx, const Tensor& a, const Tensor& inout);
void RopeCpu(const CpuContext& ctx, const Tensor& positions, const Tensor& inv_freq,
             const Tensor& x);
void SwiGluCpu(const CpuContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);
void WriteKvCpu(const CpuContext& ctx, const KvWriteArgs& args);
void AttentionCpu(const CpuContext& ctx, const AttentionArgs& args);
void CopyPagesCpu(const CpuContext& ctx, const KvPoolView& src, const KvPoolView& dst,
                  const Tensor& src_ids, const Tensor& dst_ids);
void FillRandomCpu(const CpuContext& ctx, const Tensor& t, uint64_t seed, float scale,
                   float offset);

// Device-side selection ops (page_select_cpu.cc): the reference the CUDA kernels are tested
// against, serial per row.
void PageBoundsCpu(const PageBoundsArgs& args);
void SelectPagesCpu(const PageSelectArgs& args);
void MapPagesCpu(const PageMapArgs& args);
void RouteKeysCpu(const KeyRouteArgs& args);  // key_route_cpu.cc

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  Device device() const override { return Device::kCpu; }
  std::string Describe() const override;
  Result<Tensor> Allocate(DType dtype, std::span<const int64_t> shape) override;
  Status Copy(const Tensor& src, const Tensor& dst) override;
  Status CopyBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                    int64_t src_pitch, int64_t dst_pitch) override;
  Result<Tensor> PrepareWeight(const Tensor& host_weight) override;

 protected:
  void DoMatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) override;
  void DoEmbed(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override;
  void DoAdd(const Tensor& a, const Tensor& inout) override;
  void DoRope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) override;
  void DoSwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
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

 private:
  CpuContext context() { return {&pool_, &workspace_}; }

  ThreadPool pool_;
  Workspace workspace_;
};

}  // namespace icecache::cpu

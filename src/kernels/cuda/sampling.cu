// Launcher of the device sampler (sampling.cuh).
#include "kernels/cuda/sampling.cuh"

namespace icecache::kernels {

int LaunchSample(Stream s, const float* logits, int64_t rows, int64_t vocab,
                 const SampleRow* params, int32_t* out) {
  if (rows == 0) return 0;
  SampleKernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, s>>>(logits, vocab, params, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace icecache::kernels

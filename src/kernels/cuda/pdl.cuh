// Host side of programmatic dependent launch (common.cuh: PdlTrigger, PdlWait): launches a
// kernel that may start while the one before it in the stream is still finishing, so that its
// blocks' launch and their reads of constant data overlap that kernel's tail. Stream capture
// keeps the programmatic edge in CUDA graphs. ICECACHE_CUDA_PDL=0 launches them as usual.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/env_switch.h"

namespace icecache::kernels {

inline bool PdlEnabled() {
  static const bool enabled = EnvSwitch("ICECACHE_CUDA_PDL", true);
  return enabled;
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel.
template <typename... Params, typename... Args>
cudaError_t LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = PdlEnabled() ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace icecache::kernels

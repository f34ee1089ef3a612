// MakeCudaBackend in builds without the CUDA backend (ICECACHE_CUDA=OFF or no nvcc).
#include "backend/backend.h"

#ifndef ICECACHE_HAVE_CUDA

namespace icecache {

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions&) {
  return Unsupported(
      "device 'cuda': this build has no CUDA backend (configure with nvcc available and "
      "-DICECACHE_CUDA=ON)");
}

}  // namespace icecache

#endif  // ICECACHE_HAVE_CUDA

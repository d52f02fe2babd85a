#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_engine.h"

namespace scored {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // "no driver" / "no device" is not sticky: clear it
    return 0;
  }
  return count;
}

}  // namespace scored

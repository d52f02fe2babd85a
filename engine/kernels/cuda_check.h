// Error checks for CUDA runtime calls and kernel launches, turned into absl::Status values.
//
//   SCORED_CUDA_CHECK_GEN(expr, success, name_fn)  evaluates expr once; if it differs from `success`
//       the enclosing function returns absl::InternalError("<expr text> failed at <file>:<line>:
//       <name_fn(err)>"). Generic over the error type (cudaError_t, cublasStatus_t, ncclResult_t, ...):
//       name_fn maps the error value to a C string.
//   SCORED_CUDA_CHECK(expr)   the cudaError_t instance (name from cudaGetErrorName).
//   SCORED_CUDA_CHECK_LAUNCH()  SCORED_CUDA_CHECK(cudaGetLastError()): after every kernel launch.
//
// The enclosing function must return absl::Status (or absl::StatusOr<T>). Includes only
// <cuda_runtime_api.h>, so plain C++ files may use it.
#ifndef SCORED_ENGINE_KERNELS_CUDA_CHECK_H_
#define SCORED_ENGINE_KERNELS_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scored::kernels {

inline absl::Status CudaCheckFailure(const char* expr, const char* file, int line, const char* error_name) {
  return absl::InternalError(absl::StrCat(expr, " failed at ", file, ":", line, ": ", error_name));
}

}  // namespace scored::kernels

#define SCORED_CUDA_CHECK_GEN(expr, success, name_fn)                                                   \
  do {                                                                                                  \
    const auto scored_cuda_err_ = (expr);                                                               \
    if (scored_cuda_err_ != (success)) {                                                                \
      return ::scored::kernels::CudaCheckFailure(#expr, __FILE__, __LINE__, name_fn(scored_cuda_err_)); \
    }                                                                                                   \
  } while (0)

#define SCORED_CUDA_CHECK(expr) SCORED_CUDA_CHECK_GEN(expr, cudaSuccess, cudaGetErrorName)

#define SCORED_CUDA_CHECK_LAUNCH() SCORED_CUDA_CHECK(cudaGetLastError())

#endif  // SCORED_ENGINE_KERNELS_CUDA_CHECK_H_

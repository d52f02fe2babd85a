// Per-device kernel choice of the arch-specific kernels (cmake/CudaArchitectures.cmake): the wgmma attention
// and the CUTLASS SM90 int8 GEMM are offered exactly when the build carries sm_90a code, the device is
// compute capability 9.0 and the driver loaded that cubin (not the compute_80 PTX JIT-compiled under
// CUDA_FORCE_PTX_JIT=1, whose SM90 kernels are empty or trap). A fast path that silently went missing on an
// H100, or one offered to a device that cannot run it, fails here. Skips without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "engine/kernels/attention_kernels.h"
#include "engine/kernels/int8_gemm.h"

namespace scored::kernels {
namespace {

TEST(ArchDispatchTest, HopperKernelsOfferedExactlyOnSm90aCode) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  const char* force_ptx = std::getenv("CUDA_FORCE_PTX_JIT");
  const bool ptx_forced = force_ptx != nullptr && std::strcmp(force_ptx, "1") == 0;
  const bool want = SCORED_TEST_BUILD_HAS_SM90A && major == 9 && minor == 0 && !ptx_forced;
  SCOPED_TRACE(testing::Message() << "compute capability " << major << "." << minor << ", sm_90a in build "
                                  << SCORED_TEST_BUILD_HAS_SM90A << ", CUDA_FORCE_PTX_JIT "
                                  << (ptx_forced ? "1" : "unset"));
  EXPECT_EQ(attention_internal::WgmmaAvailable(), want);
  EXPECT_EQ(Int8GemmSupported(device), want);
  // Refused, never launched: the int8 GEMM answers FAILED_PRECONDITION where it is not offered.
  if (!want) {
    const absl::Status status = Int8ScaledGemm(nullptr, nullptr, nullptr, nullptr, nullptr, 16, 16, 16,
                                               Int8GemmOutput::kBf16, nullptr);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  }
}

}  // namespace
}  // namespace scored::kernels

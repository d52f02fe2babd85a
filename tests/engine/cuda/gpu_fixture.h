// Test fixture for GPU tests: skips cleanly where no CUDA device is usable (any cudaGetDeviceCount error,
// e.g. error 35 on machines without a driver, counts as "no GPU").
#ifndef SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_
#define SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_

#include <gtest/gtest.h>

#include "engine/cuda/cuda_engine.h"

namespace scored::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() < 1) GTEST_SKIP() << "no usable CUDA device";
  }
};

}  // namespace scored::testing

#endif  // SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_

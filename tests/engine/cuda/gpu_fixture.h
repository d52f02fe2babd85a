// Test fixture for GPU tests: skips cleanly where no CUDA device is usable (any cudaGetDeviceCount error,
// e.g. error 35 on machines without a driver, counts as "no GPU").
#ifndef SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_
#define SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/cuda/cuda_engine.h"

namespace scored::testing {

// The asset folders are compiled in (SCORED_DATA_DIR, SCORED_FIXTURES_DIR); the environment variable of the
// same name overrides them (the GPU machine gets a copy of the tree at another path):
// EnvOr("SCORED_DATA_DIR", SCORED_DATA_DIR).
inline std::string EnvOr(const char* name, const char* compiled) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : compiled;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() < 1) GTEST_SKIP() << "no usable CUDA device";
  }
};

}  // namespace scored::testing

#endif  // SCORED_TESTS_ENGINE_CUDA_GPU_FIXTURE_H_

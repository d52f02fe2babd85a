// Shared helpers of the kernel tests: a fixture that skips without a GPU, RAII device arrays that are
// poisoned (all bits set: NaN for fp32 and bf16) before every kernel run, seeded random inputs, and error
// summaries. Plain C++ over the CUDA runtime API.
#ifndef SCORED_TESTS_ENGINE_KERNELS_KERNEL_TEST_UTIL_H_
#define SCORED_TESTS_ENGINE_KERNELS_KERNEL_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/base/dtype.h"
#include "engine/kernels/kernel_types.h"

namespace scored::kernels::testing {

// Skips every test when the CUDA runtime reports an error or no device (CI machines have no GPU).
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no CUDA device";
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // Waits for the stream and fails the test on any CUDA error.
  void Sync() {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess) << cudaGetErrorName(cudaGetLastError());
  }

  cudaStream_t stream_ = nullptr;
};

// A device array of n elements of T; freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ > 0 && cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  // All bytes 0xFF: NaN for fp32 and bf16, -1 for integers. Catches unwritten outputs.
  void Poison() { EXPECT_EQ(cudaMemset(ptr_, 0xFF, n_ * sizeof(T)), cudaSuccess); }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<bf16_t> ToBf16(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = FloatToBf16(v[i]);
  return out;
}

inline std::vector<float> FromBf16(const std::vector<bf16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i].bits);
  return out;
}

// Values rounded to bf16 and widened back: inputs a bf16 kernel and the fp32 oracle read identically.
inline std::vector<float> RoundedToBf16(std::vector<float> v) {
  for (float& x : v) x = RoundToBf16(x);
  return v;
}

struct ErrorStats {
  double max_abs = 0.0;
  double max_rel = 0.0;  // |got - want| / max(|want|, floor)
  int64_t not_finite = 0;
  int64_t worst_index = -1;
};

inline ErrorStats CompareArrays(const std::vector<float>& got, const std::vector<float>& want,
                                double rel_floor = 1e-3) {
  ErrorStats s;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++s.not_finite;
      continue;
    }
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double rel = err / std::max(std::fabs(static_cast<double>(want[i])), rel_floor);
    if (err > s.max_abs) {
      s.max_abs = err;
      s.worst_index = static_cast<int64_t>(i);
    }
    s.max_rel = std::max(s.max_rel, rel);
  }
  return s;
}

inline std::string Describe(const ErrorStats& s) {
  return "max_abs=" + std::to_string(s.max_abs) + " max_rel=" + std::to_string(s.max_rel) +
         " not_finite=" + std::to_string(s.not_finite) + " worst_index=" + std::to_string(s.worst_index);
}

// Prints the measured error of one check (the test log is the record of what the kernels achieve).
inline void Report(const std::string& what, const ErrorStats& s) {
  std::cout << "[ measured ] " << what << ": " << Describe(s) << std::endl;
}

// Number of elements whose bit patterns differ.
template <typename T>
int64_t CountBitDifferences(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return diff + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// Median time of one call of `launch` (which enqueues on `stream` and returns absl::Status), in ms: two
// warm-up calls, then `iters` calls each between a pair of events. Returns -1 on any failure.
template <typename Launch>
float MedianMs(cudaStream_t stream, Launch launch, int iters) {
  for (int i = 0; i < 2; ++i) {
    if (!launch().ok()) return -1.0f;
  }
  cudaEvent_t start, stop;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return -1.0f;
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, stream);
    if (!launch().ok()) return -1.0f;
    cudaEventRecord(stop, stream);
    if (cudaEventSynchronize(stop) != cudaSuccess) return -1.0f;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times.empty() ? -1.0f : times[times.size() / 2];
}

// Prints one throughput line: "[ measured ] <what>: <ms> ms, <bytes / time> TB/s".
inline void ReportBandwidth(const std::string& what, float ms, double bytes) {
  std::cout << "[ measured ] " << what << ": " << ms << " ms, " << bytes / ms / 1e9 << " TB/s" << std::endl;
}

}  // namespace scored::kernels::testing

#endif  // SCORED_TESTS_ENGINE_KERNELS_KERNEL_TEST_UTIL_H_

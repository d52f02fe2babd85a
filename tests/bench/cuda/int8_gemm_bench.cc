// int8_gemm_bench: which cuBLASLt GEMM configurations an int8 W8A8 linear could use on this GPU, and their
// rate next to bf16 and FP8 (outer-vector scales) on one Llama-3-8B MLP shape: y[m, n] = x[m, k] . w[n, k]^T,
// the engine's layout (TN in cuBLASLt's column-major terms). For each configuration: whether the heuristic
// offers an algorithm, and the median-free mean of 10 runs of its first one. Inputs are constant (rates, not
// results).
//
//   int8_gemm_bench [--m 16384] [--n 14336] [--k 4096]
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Config {
  const char* name;
  cublasComputeType_t compute;
  cudaDataType_t scale, in, out;
  bool outer_vec_scales;  // CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B
};

// The milliseconds of one GEMM of `c`, or a negative value when cuBLASLt offers no algorithm for it.
double Time(cublasLtHandle_t handle, const Config& c, int64_t m, int64_t n, int64_t k, const void* x,
            const void* w, void* y, const float* w_scale, const float* x_scale, void* workspace,
            uint64_t workspace_bytes) {
  cublasLtMatmulDesc_t desc = nullptr;
  if (cublasLtMatmulDescCreate(&desc, c.compute, c.scale) != CUBLAS_STATUS_SUCCESS) return -1;
  const cublasOperation_t trans_w = CUBLAS_OP_T, trans_x = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_x, sizeof(trans_x));
  if (c.outer_vec_scales) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale));
  }
  cublasLtMatrixLayout_t lw = nullptr, lx = nullptr, ly = nullptr;
  cublasLtMatrixLayoutCreate(&lw, c.in, k, n, k);
  cublasLtMatrixLayoutCreate(&lx, c.in, k, m, k);
  cublasLtMatrixLayoutCreate(&ly, c.out, n, m, n);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof(workspace_bytes));
  cublasLtMatmulHeuristicResult_t result;
  int returned = 0;
  double ms = -1;
  if (cublasLtMatmulAlgoGetHeuristic(handle, desc, lw, lx, ly, ly, pref, 1, &result, &returned) ==
          CUBLAS_STATUS_SUCCESS &&
      returned > 0) {
    const int32_t one_i = 1, zero_i = 0;
    const float one_f = 1.0f, zero_f = 0.0f;
    const bool int_scale = c.scale == CUDA_R_32I;
    const void* alpha = int_scale ? static_cast<const void*>(&one_i) : &one_f;
    const void* beta = int_scale ? static_cast<const void*>(&zero_i) : &zero_f;
    const auto run = [&] {
      return cublasLtMatmul(handle, desc, alpha, w, lw, x, lx, beta, y, ly, y, ly, &result.algo, workspace,
                            workspace_bytes, nullptr);
    };
    if (run() == CUBLAS_STATUS_SUCCESS && cudaDeviceSynchronize() == cudaSuccess) {
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      constexpr int kRuns = 10;
      cudaEventRecord(start);
      for (int i = 0; i < kRuns; ++i) run();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float total = 0;
      cudaEventElapsedTime(&total, start, stop);
      ms = total / kRuns;
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lw);
  cublasLtMatrixLayoutDestroy(lx);
  cublasLtMatrixLayoutDestroy(ly);
  cublasLtMatmulDescDestroy(desc);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t m = 16384, n = 14336, k = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const int64_t value = std::atoll(argv[i + 1]);
    if (key == "--m") m = value;
    if (key == "--n") n = value;
    if (key == "--k") k = value;
  }
  cublasLtHandle_t handle = nullptr;
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "no usable GPU\n");
    return 1;
  }
  void *x = nullptr, *w = nullptr, *y = nullptr, *workspace = nullptr;
  float *w_scale = nullptr, *x_scale = nullptr;
  const uint64_t workspace_bytes = uint64_t{64} << 20;
  if (cudaMalloc(&x, m * k * 2) != cudaSuccess || cudaMalloc(&w, n * k * 2) != cudaSuccess ||
      cudaMalloc(&y, m * n * 4) != cudaSuccess || cudaMalloc(&workspace, workspace_bytes) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&w_scale), n * 4) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&x_scale), m * 4) != cudaSuccess) {
    std::fprintf(stderr, "out of GPU memory\n");
    return 1;
  }
  cudaMemset(x, 1, m * k * 2);
  cudaMemset(w, 1, n * k * 2);
  const std::vector<float> ones(static_cast<size_t>(m > n ? m : n), 1.0f);
  cudaMemcpy(w_scale, ones.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(x_scale, ones.data(), m * 4, cudaMemcpyHostToDevice);
  const Config configs[] = {
      {"int8 -> int32 (compute 32I, scale 32I)", CUBLAS_COMPUTE_32I, CUDA_R_32I, CUDA_R_8I, CUDA_R_32I,
       false},
      {"int8 -> int8 (compute 32I, scale 32F)", CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_8I, false},
      {"int8 -> fp32 (compute 32I, scale 32F)", CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_32F, false},
      {"int8 -> bf16 (compute 32I, scale 32F)", CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_16BF,
       false},
      {"int8 -> bf16, outer-vector scales", CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_16BF, true},
      {"int8 -> fp32, outer-vector scales", CUBLAS_COMPUTE_32I, CUDA_R_32F, CUDA_R_8I, CUDA_R_32F, true},
      {"bf16 -> bf16 (compute 32F)", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, false},
      {"fp8 e4m3 -> bf16, outer-vector scales", CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3, CUDA_R_16BF,
       true},
  };
  std::printf("GEMM [%lld, %lld] x [%lld, %lld]^T, cuBLASLt %zu\n", static_cast<long long>(m),
              static_cast<long long>(k), static_cast<long long>(n), static_cast<long long>(k),
              cublasLtGetVersion());
  for (const Config& c : configs) {
    const double ms = Time(handle, c, m, n, k, x, w, y, w_scale, x_scale, workspace, workspace_bytes);
    if (ms < 0) {
      std::printf("%-40s  not offered\n", c.name);
    } else {
      std::printf("%-40s  %7.3f ms  %6.0f TFLOP/s (TOP/s)\n", c.name, ms, 2.0 * m * n * k / ms / 1e9);
    }
  }
  cublasLtDestroy(handle);
  return 0;
}

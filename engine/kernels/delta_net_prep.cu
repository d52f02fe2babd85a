// Per-token preparation of the gated delta rule's inputs (L2 norm of q and k, q scale, beta, g).
// Contract: delta_net_prep.h.
//
// One block per token (grid-stride): warp w normalizes rows w, w + 8, ... of the token's 2 * num_k_heads q |
// k rows (lanes stride over k_dim, a double WarpSum of the squares), and the block's threads compute beta and
// g of the num_v_heads v heads.
#include <cmath>

#include "engine/kernels/cuda_check.h"
#include "engine/kernels/delta_net_prep.h"
#include "engine/kernels/device_util.cuh"

namespace scored::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int64_t kMaxBlocks = 65535 * 16;
constexpr int64_t kMaxKDim = 1024;
constexpr double kL2Eps = 1e-6;       // transformers' l2norm eps
constexpr float kSoftplusLimit = 20;  // torch.nn.functional.softplus threshold (beta 1)

template <typename T>
__global__ void __launch_bounds__(kThreads)
    DeltaNetPrepKernel(float* __restrict__ qkv,  // [num_tokens, qkv_stride]
                       int64_t qkv_stride,
                       const T* __restrict__ b,  // [num_tokens, b_stride]
                       int64_t b_stride,
                       const T* __restrict__ a,  // [num_tokens, a_stride]
                       int64_t a_stride,
                       const float* __restrict__ neg_a,    // [num_v_heads]
                       const float* __restrict__ dt_bias,  // [num_v_heads]
                       int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                       float q_scale,
                       float* __restrict__ beta,  // [num_tokens, num_v_heads]
                       float* __restrict__ g) {   // [num_tokens, num_v_heads]
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float* row = qkv + t * qkv_stride;
    for (int64_t r = warp; r < 2 * num_k_heads; r += kWarps) {
      float* v = row + r * k_dim;  // rows [0, nk) are q heads, [nk, 2 nk) k heads
      double sum = 0.0;
      for (int64_t i = lane; i < k_dim; i += 32) {
        const double x = v[i];
        sum = __dadd_rn(sum, __dmul_rn(x, x));  // exact product
      }
      sum = WarpSum(sum);
      const double inv = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(sum, kL2Eps)));
      const bool is_q = r < num_k_heads;
      for (int64_t i = lane; i < k_dim; i += 32) {
        const float y = static_cast<float>(__dmul_rn(static_cast<double>(v[i]), inv));
        v[i] = is_q ? __fdiv_rn(y, q_scale) : y;
      }
    }
    const T* bt = b + t * b_stride;
    const T* at = a + t * a_stride;
    for (int64_t h = threadIdx.x; h < num_v_heads; h += kThreads) {
      const double bh = LoadAsFloat(bt + h);
      beta[t * num_v_heads + h] = static_cast<float>(__ddiv_rn(1.0, __dadd_rn(1.0, exp(-bh))));
      const float u = __fadd_rn(LoadAsFloat(at + h), dt_bias[h]);
      const float sp = u > kSoftplusLimit ? u : static_cast<float>(log1p(exp(static_cast<double>(u))));
      g[t * num_v_heads + h] = __fmul_rn(neg_a[h], sp);
    }
  }
}

}  // namespace

template <typename T>
absl::Status DeltaNetPrep(float* qkv, int64_t qkv_stride, const T* b, int64_t b_stride, const T* a,
                          int64_t a_stride, const float* neg_a, const float* dt_bias, int64_t num_tokens,
                          int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim, float* beta, float* g,
                          cudaStream_t stream) {
  if (num_tokens < 0 || num_k_heads < 0 || num_v_heads < 0) {
    return absl::InvalidArgumentError("DeltaNetPrep: need num_tokens, num_k_heads, num_v_heads >= 0");
  }
  if (k_dim < 1 || k_dim > kMaxKDim)
    return absl::InvalidArgumentError("DeltaNetPrep: k_dim must be in [1, 1024]");
  if (qkv_stride < 2 * num_k_heads * k_dim || b_stride < num_v_heads || a_stride < num_v_heads) {
    return absl::InvalidArgumentError(
        "DeltaNetPrep: need qkv_stride >= 2 * num_k_heads * k_dim and a_stride, b_stride >= num_v_heads");
  }
  if (num_tokens == 0 || (num_k_heads == 0 && num_v_heads == 0)) return absl::OkStatus();
  if (num_k_heads > 0 && qkv == nullptr) return absl::InvalidArgumentError("DeltaNetPrep: null pointer");
  if (num_v_heads > 0 && (a == nullptr || b == nullptr || neg_a == nullptr || dt_bias == nullptr ||
                          beta == nullptr || g == nullptr)) {
    return absl::InvalidArgumentError("DeltaNetPrep: null pointer");
  }
  // The oracle's q scale: fp32(sqrt(k_dim)), divided into each normalized q element.
  const float q_scale = static_cast<float>(std::sqrt(static_cast<double>(k_dim)));
  const unsigned blocks = static_cast<unsigned>(num_tokens < kMaxBlocks ? num_tokens : kMaxBlocks);
  DeltaNetPrepKernel<<<blocks, kThreads, 0, stream>>>(qkv, qkv_stride, ToDevice(b), b_stride, ToDevice(a),
                                                      a_stride, neg_a, dt_bias, num_tokens, num_k_heads,
                                                      num_v_heads, k_dim, q_scale, beta, g);
  SCORED_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

template absl::Status DeltaNetPrep<float>(float*, int64_t, const float*, int64_t, const float*, int64_t,
                                          const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                          float*, float*, cudaStream_t);
template absl::Status DeltaNetPrep<bf16_t>(float*, int64_t, const bf16_t*, int64_t, const bf16_t*, int64_t,
                                           const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                           float*, float*, cudaStream_t);

}  // namespace scored::kernels

// CPU reference ops: plain, obviously-correct fp32 math with fp64 reductions. They define what every GPU
// kernel computes (tests/engine/kernels compare against these) and make up the reference forward.
// All pointers are row-major, caller-allocated; no aliasing unless stated. No CUDA here.
#ifndef SCORED_ENGINE_REFERENCE_OPS_H_
#define SCORED_ENGINE_REFERENCE_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"

namespace scored::ref {

class ThreadPool;  // engine/reference/thread_pool.h; ops taking one split their work over it (nullptr: the
                   // calling thread does it all). Results are bitwise the same for any pool size: every
                   // output element is computed by the same arithmetic in the same order.

// out[t, :] = table[tokens[t], :]. INVALID_ARGUMENT for an id outside [0, vocab_size).
absl::Status Embedding(const float* table,     // [vocab_size, hidden_size]
                       const int32_t* tokens,  // [num_tokens]
                       int64_t num_tokens, int64_t vocab_size, int64_t hidden_size,
                       float* out);  // [num_tokens, hidden_size]

// out[t, i] = x[t, i] / sqrt(mean_i(x[t, :]^2) + eps) * weight[i]; the mean in double. out may alias x.
void RmsNorm(const float* x,       // [num_tokens, hidden_size]
             const float* weight,  // [hidden_size]
             int64_t num_tokens, int64_t hidden_size, double eps,
             float* out);  // [num_tokens, hidden_size]

// Rotates pairs (i, i + r/2) of the first r = rotary_dim elements of every head (HF "rotate_half"
// convention; rotary_dim 0 means head_dim), in place; elements [r, head_dim) pass through (partial rotary,
// Phi-3's partial_rotary_factor). angle = positions[t] * inv_freq[i] (fp32); c = fp32(cos(angle)) *
// attention_scaling, s likewise, each product rounded to fp32 (longrope's attention factor; 1 is exact).
// inv_freq: RopeInvFreq (engine/model/rope_freq.h).
// interleaved (GPT-J pairs, DeepSeek's rope_interleave): pair i is (2i, 2i + 1) instead, with the same
// frequency and arithmetic. transformers' apply_rotary_pos_emb_interleave de-interleaves q and k (x[0::2]
// then x[1::2]) and rotates halves; its output is this one's with the same permutation of every q and k head,
// so every q . k (and everything after attention) is the same.
void Rope(float* x,                  // [num_tokens, num_heads, head_dim]
          const int32_t* positions,  // [num_tokens]
          const float* inv_freq,     // [rotary_dim / 2]
          int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t rotary_dim = 0,
          float attention_scaling = 1.0f, bool interleaved = false);

// Qwen3.5's Gated DeltaNet (engine/model/family.h LinearAttentionTraits).
// Causal depthwise conv1d then SiLU: out[t, c] = silu(sum_{j < kernel} weight[c, j] x[t - kernel + 1 + j,
// c]), x before the first token zero (transformers' causal_conv1d_fn, no bias). out must not alias x.
void CausalConv1dSilu(const float* x,       // [num_tokens, channels]
                      const float* weight,  // [channels, kernel]
                      int64_t num_tokens, int64_t channels, int64_t kernel,
                      float* out);  // [num_tokens, channels]

// x[r, :] *= 1 / sqrt(sum_i x[r, i]^2 + eps) in place (transformers' l2norm, eps 1e-6: a sum, not a mean).
void L2NormRows(float* x, int64_t rows, int64_t dim, double eps);

// The gated delta rule of one sequence: per v head h (reading k head h / (num_v_heads / num_k_heads)), the
// state S [k_dim, v_dim] starts at 0 and for each token t: S = exp(g[t, h]) S; S += k_t (beta[t, h] (v_t -
// S^T k_t))^T; out_t = S^T q_t. q and k as given (already normalized and scaled); state and sums in double.
void GatedDeltaRule(const float* q,     // [num_tokens, num_k_heads, k_dim]
                    const float* k,     // [num_tokens, num_k_heads, k_dim]
                    const float* v,     // [num_tokens, num_v_heads, v_dim]
                    const float* g,     // [num_tokens, num_v_heads], the log decay (<= 0)
                    const float* beta,  // [num_tokens, num_v_heads]
                    int64_t num_tokens, int64_t num_k_heads, int64_t num_v_heads, int64_t k_dim,
                    int64_t v_dim,
                    float* out);  // [num_tokens, num_v_heads, v_dim]

// out[r, i] = weight[i] * (x[r, i] / sqrt(mean_i x[r, :]^2 + eps)) * silu(z[r, i]) (Qwen3_5RMSNormGated: a
// plain weight, the gate's SiLU after the norm). out may alias x.
void GatedRmsNorm(const float* x,       // [rows, dim]
                  const float* z,       // [rows, dim]
                  const float* weight,  // [dim]
                  int64_t rows, int64_t dim, double eps,
                  float* out);  // [rows, dim]

// x[i] *= fp32(1 / (1 + exp(-double(gate[i])))) (Qwen3.5's attention output gate, before o_proj). kernels/
// sigmoid_gate.h computes the same, bit for bit in fp32.
void SigmoidGateMul(float* x, const float* gate, int64_t count);

// Per-model attention variants (all default: plain causal attention with scale 1/sqrt(head_dim)).
struct AttentionOptions {
  double scale = 0.0;    // > 0: the score scale (Gemma: query_pre_attn_scalar^-0.5); 0: 1/sqrt(head_dim)
  int64_t window = 0;    // > 0: query t sees keys j with t - window < j <= t (transformers' sliding window)
  float softcap = 0.0f;  // > 0: s = tanh(s / softcap) * softcap after scaling (Gemma 2)
  // [num_heads] or nullptr: head h's learned sink logit joins every softmax of that head as one more score
  // (gpt-oss's eager_attention_forward): m = max(max_j s[j], sink_h), the denominator gains
  // double(fp32(exp(sink_h - m))) after the keys' lane sum, and no value is added for it.
  const float* sinks = nullptr;
};

// Causal self-attention of ONE sequence with grouped-query heads (head h reads kv head
// h / (num_heads / num_kv_heads)); scale 1/sqrt(head_dim); softmax with max subtraction, sums in double.
// Precisely: s[j] = fp32(dot(q_t, k_j) * scale) with the dot in double; m = max_j s[j];
// p[j] = fp32(exp(s[j] - m)) (of the fp32 difference; correctly rounded but for ~1e-6 of arguments, see
// fast_exp.h); out = fp32(sum_j p[j] * v_j / sum_j p[j]), both sums over j in double
// (in a fixed order of 8 interleaved partial sums: see causal_attention.cc).
// num_heads must be a multiple of num_kv_heads.
void CausalAttention(const float* q,  // [num_tokens, num_heads, head_dim]
                     const float* k,  // [num_tokens, num_kv_heads, head_dim]
                     const float* v,  // [num_tokens, num_kv_heads, head_dim]
                     int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                     float* out,  // [num_tokens, num_heads, head_dim]
                     ThreadPool* pool = nullptr, const AttentionOptions& options = AttentionOptions());

// DeepSeek-V3's multi-head latent attention of ONE sequence after its projections, the naive form
// (transformers 5.17 DeepseekV3Attention.forward; engine/model/family.h LatentAttentionTraits): head h of
// token t has the query q[t, h, :] = [q_nope | q_rope], the key [kv[t, h, :nope] | k_rope[t, :]] (k_rope one
// key shared by every head) and the value kv[t, h, nope:]; out is CausalAttention's function of those
// (its contract, with `scale` > 0 the score scale, every head its own kv head, no window or cap), exactly:
// the same scores, probabilities and sums. q_rope and k_rope are given rotated (ref::Rope).
struct LatentAttentionShape {
  int64_t num_heads = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
};
void LatentAttention(const float* q,       // [num_tokens, num_heads, qk_nope_head_dim + qk_rope_head_dim]
                     const float* kv,      // [num_tokens, num_heads, qk_nope_head_dim + v_head_dim]
                     const float* k_rope,  // [num_tokens, qk_rope_head_dim]
                     int64_t num_tokens, const LatentAttentionShape& shape, double scale,
                     float* out,  // [num_tokens, num_heads, v_head_dim]
                     ThreadPool* pool = nullptr);

// y[t, o] = sum_k x[t, k] * w[o, k] (+ bias[o]); dot products accumulated in double, rounded to fp32.
// Precisely: y = fp32(sum_{k ascending} double(x[t, k]) * double(w[o, k]) + double(bias[o])) (each product
// is exact in double, so the value does not depend on FMA use or on the instruction set).
void Linear(const float* x,     // [num_tokens, in_features]
            const float* w,     // [out_features, in_features]
            const float* bias,  // [out_features] or nullptr
            int64_t num_tokens, int64_t in_features, int64_t out_features,
            float* y,  // [num_tokens, out_features]
            ThreadPool* pool = nullptr);

// out[t, i] = silu(gate[t, i]) * up[t, i], silu(x) = x / (1 + exp(-x)). out may alias gate or up.
void SwiGlu(const float* gate, const float* up, int64_t num_tokens, int64_t intermediate_size, float* out);

// GeGLU (Gemma): out[t, i] = GeluTanh(gate[t, i]) * up[t, i] in fp32, GeluTanh(x) =
// fp32(0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) evaluated in double (torch's
// gelu(approximate="tanh")). out may alias gate or up.
float GeluTanh(float x);
void GeluTanhGlu(const float* gate, const float* up, int64_t num_tokens, int64_t intermediate_size,
                 float* out);

// gpt-oss's clamped SwiGLU (transformers 5.17 GptOssExperts._apply_gate), each step one fp32 operation:
//   g = min(gate, 7); u = clamp(up, -7, 7); out = fp32(fp32(u + 1) * fp32(g * sigmoid(fp32(g * 1.702f))))
// with sigmoid(x) = fp32(1 / (1 + exp(-double(x)))) (in double, rounded once). out may alias gate or up.
void ClampedSwiGlu(const float* gate, const float* up, int64_t num_tokens, int64_t intermediate_size,
                   float* out);

// Soft-capping in place: x[i] = fp32(fp32(tanh(fp32(x[i] / cap))) * cap), tanh in double rounded once
// (Gemma 2's final_logit_softcapping; the attention-logit cap is AttentionOptions::softcap). cap > 0.
void SoftCap(float* x, int64_t n, float cap);

// Gemma's (1 + weight) RMSNorm as the plain RmsNorm: weight[i] = fp32(1 + weight[i]) in place.
void OffsetNormWeight(float* weight, int64_t n);

// Mixture-of-experts routing of each token (engine/model/config.h, ModelConfig; transformers' Mixtral /
// Qwen2-MoE / Qwen3-MoE TopKRouter):
//   m = max_e l[e]; p[e] = fp32(exp(double(l[e] - m)) / sum_e exp(double(l[e] - m)))  (softmax, fp32 result)
//   the top_k largest p, in descending order; EXACTLY equal p: the lower expert id first
//   weight = renormalize ? fp32(double(p) / sum of the top_k p in double) : p
// router_logits are the fp32 outputs of the router GEMM. 1 <= top_k <= num_experts.
void MoeRoute(const float* router_logits,  // [num_tokens, num_experts]
              int64_t num_tokens, int64_t num_experts, int64_t top_k, bool renormalize,
              int32_t* expert_ids,     // [num_tokens, top_k], descending probability
              float* expert_weights);  // [num_tokens, top_k]

// gpt-oss's router of each token (transformers 5.17 GptOssTopKRouter.forward): the top_k largest logits in
// descending order (EXACTLY equal logits: the lower expert id first), their weights the softmax over those
// top_k: m = the largest, weight_j = fp32(exp(double(l_j - m)) / sum_j exp(double(l_j - m))), sums in
// double. 1 <= top_k <= num_experts.
void MoeRouteTopKSoftmax(const float* router_logits,  // [num_tokens, num_experts]
                         int64_t num_tokens, int64_t num_experts, int64_t top_k,
                         int32_t* expert_ids,     // [num_tokens, top_k], descending logit
                         float* expert_weights);  // [num_tokens, top_k]

// DeepSeek-V3's sigmoid router of each token (ModelConfig in engine/model/config.h; transformers 5.17
// DeepseekV3TopkRouter.forward, Glm4MoeTopkRouter.forward, MiniMaxM2TopKRouter.forward), every step one fp32
// operation unless said:
//   s[e] = fp32(1 / (1 + exp(-double(l[e]))))  (in double, rounded once)
//   c[e] = fp32(s[e] + correction_bias[e])     (c = s without a correction bias)
//   num_groups > 1: group g holds experts [g G, (g + 1) G), G = num_experts / num_groups (>= 2), its score
//   fp32(c_1 + c_2) of its two largest c; the topk_groups highest scores are kept (EXACTLY equal scores: the
//   lower group id first) and the other groups' experts are never chosen (transformers masks their c with
//   -inf)
//   the top_k largest c among the kept experts, in descending c; EXACTLY equal c: the lower expert id first
//   weight_j = s[id_j] (the unbiased score); renormalize: weight_j = fp32(weight_j / fp32(fp32(sum_j s[id_j]
//   summed in double) + renorm_epsilon)); then weight_j = fp32(weight_j * scaling_factor)
// 1 <= top_k <= topk_groups * G; num_groups divides num_experts; 1 <= topk_groups <= num_groups.
struct SigmoidRouting {
  const float* correction_bias = nullptr;  // [num_experts] (e_score_correction_bias), or nullptr
  int64_t num_groups = 1, topk_groups = 1;
  bool renormalize = false;
  float renorm_epsilon = 0.0f;  // 1e-20 (DeepSeek-V3, GLM-4.5), 0 (MiniMax-M2)
  float scaling_factor = 1.0f;  // routed_scaling_factor
};
void MoeRouteSigmoid(const float* router_logits,  // [num_tokens, num_experts]
                     int64_t num_tokens, int64_t num_experts, int64_t top_k, const SigmoidRouting& routing,
                     int32_t* expert_ids,     // [num_tokens, top_k], descending choice
                     float* expert_weights);  // [num_tokens, top_k]

// The weighted combine of each token's chosen experts' outputs, in fp32 in a fixed order:
//   o = 0.0f; for the top_k slots in ascending expert id: o = fp32(o + fp32(y_slot * weight_slot));
//   then, with a shared expert: gated (Qwen2-MoE) o = fp32(o + fp32(sigmoid(shared_gate) * shared_out)),
//   sigmoid(g) = 1 / (1 + expf(-g)) in fp32; ungated (DeepSeek-V3's shared experts, shared_gate nullptr)
//   o = fp32(o + shared_out).
// expert_out[t, j] is the output of expert expert_ids[t, j] on token t. shared_gate needs shared_out.
void MoeCombine(const float* expert_out,      // [num_tokens, top_k, hidden_size]
                const int32_t* expert_ids,    // [num_tokens, top_k]
                const float* expert_weights,  // [num_tokens, top_k]
                int64_t num_tokens, int64_t top_k, int64_t hidden_size,
                const float* shared_out,   // [num_tokens, hidden_size] or nullptr
                const float* shared_gate,  // [num_tokens] (the shared_expert_gate logit) or nullptr (ungated)
                float* out);               // [num_tokens, hidden_size]

// Rounds to the nearest FP8 E4M3FN value (round-to-nearest-even; subnormals down to 2^-9), saturating to
// +-448 (what torch's clamp(-448, 448) then .to(float8_e4m3fn) gives). NaN stays NaN.
float RoundToFp8E4M3(float x);

// W8A8 dynamic per-token FP8 activation quantization as compressed-tensors emulates it, in place:
// scale = amax(|x[t, :]|) / 448 (fp32; a zero row keeps scale 0 and stays 0), q = fp8_e4m3(x / scale)
// with round-to-nearest-even and saturation to +-448, x = fp32(q) * scale.
void FakeQuantizeFp8PerToken(float* x,  // [num_tokens, in_features]
                             int64_t num_tokens, int64_t in_features);

// The same per (token, group of group_size consecutive columns): each group of each row gets its own
// scale = amax(|group|) / 448 (compressed-tensors' dynamic "group" activation strategy, e.g. group 128 in
// FP8_BLOCK schemes). A last group narrower than group_size (in_features % group_size != 0) is its own
// group. group_size >= in_features is FakeQuantizeFp8PerToken.
void FakeQuantizeFp8PerTokenGroup(float* x,  // [num_tokens, in_features]
                                  int64_t num_tokens, int64_t in_features, int64_t group_size);

// W8A8 INT8 dynamic per-token activation quantization (compressed-tensors "int-quantized" checkpoints,
// llm-compressor's W8A8 / INT8 schemes), bit-identical to what compressed-tensors 0.19 computes in a float32
// transformers forward (quantization/utils/helpers.py compute_dynamic_scales_and_zp + calculate_qparams,
// quantization/lifecycle/forward_helpers.py _quantize_dequantize, quant_args.py
// round_to_quantized_type_args / round_to_quantized_type_dtype), every step one fp32 operation:
//   lo = min(min_k x[k], 0), hi = max(max_k x[k], 0)
//   symmetric:  scale = max(|lo|, |hi|) / 127.5 (bit_range 255 / 2), zero_point = 0
//   asymmetric: scale = (hi - lo) / 255, zero_point = round_half_even(clamp(-128 - lo / scale, -128, 127))
//               (computed before the next line; NaN, from 0 / 0, becomes 0 as torch's .to(int8) gives)
//   scale == 0 (an all-zero row) -> scale = FLT_EPSILON (torch.finfo(float32).eps)
//   q = round_half_even(clamp(x / scale + zero_point, -128, 127)) (true division), x = (q - zero_point) *
//   scale
// Note the symmetric scale divides by 127.5, not 127: x = -amax maps to -127.5 and rounds to -128 (ties to
// even), x = +amax clamps to 127.
struct Int8TokenParams {
  float scale = 0.0f;       // fp32, > 0
  float zero_point = 0.0f;  // an integer in [-128, 127]; 0 when symmetric
};
Int8TokenParams Int8TokenQuantParams(const float* x, int64_t n, bool symmetric);  // x: [n], one token
void FakeQuantizeInt8Span(float* x, int64_t n, const Int8TokenParams& params);    // in place, x: [n]

// Both steps over every row of x, in place.
void FakeQuantizeInt8PerToken(float* x,  // [num_tokens, in_features]
                              int64_t num_tokens, int64_t in_features, bool symmetric);

// Static per-tensor activation quantization (input_activations.dynamic false, strategy tensor: the stored
// `input_scale` / `input_zero_point` of llm-compressor's FP8 scheme and of static INT8 W8A8), bit-identical
// to compressed-tensors 0.19's forward_quantize with a static scale (quantization/lifecycle/forward.py: the
// module's input_scale, widened to fp32 in a float32 model, then forward_helpers.py _quantize_dequantize),
// one fp32 operation per step, in place over x[0, n):
//   FP8:  q = fp8_e4m3(clamp(x / scale, -448, 448)) (round to nearest even, true division), x = fp32(q) *
//   scale int8: FakeQuantizeInt8Span with {scale, zero_point} (zero_point 0 when symmetric)
// scale must be finite and > 0 (the loader checks it).
void FakeQuantizeFp8Static(float* x, int64_t n, float scale);

// transform_config's online rotation of each row of x [rows, width] in place, per block of `size` elements
// (width % size == 0): v -> float32((double(v) . T) / sqrt(size)), T the [size, size] float64 matrix t (T^T
// when inverse), the product summed in float64: compressed-tensors 0.19's HadamardTransform.forward at
// precision float64 (factory/hadamard.py, utils/matrix.py _multihead_matmul).
void RotateRows(float* x, int64_t rows, int64_t width, const double* t, int64_t size, bool inverse);

// Per-position outputs from one row of fp32 logits, by the Score contract (DESIGN.md §3):
// logprob = logit[target] - logsumexp (max-subtracted, sum in double); greedy = argmax (lowest id on
// ties) == target; rank = 1 + #{logit > logit[target]}; entropy = -sum p log p (double);
// top_k (0..kMaxTopK) by descending logit, ties by lower id; candidate_logprob[c] = fp32(logit[id_c] - lse)
// for the num_candidates ids at `candidate_ids` (the top-k's rounding; an id outside [0, vocab_size) gives
// NaN); min_logprob = fp32(min logit - lse). `want_*` select optional outputs.
struct TokenScore {
  double logprob = 0.0;
  bool greedy = false;
  int32_t rank = 0;
  double entropy = 0.0;
  std::vector<TopKEntry> top_k;
  std::vector<float> candidate_logprob;  // [num_candidates]
  float min_logprob = 0.0f;              // if want_min_logprob
};
TokenScore ScoreLogits(const float* logits,  // [vocab_size]
                       int64_t vocab_size, int32_t target, int32_t top_k, bool want_rank, bool want_entropy,
                       const int32_t* candidate_ids = nullptr,  // [num_candidates]
                       int32_t num_candidates = 0, bool want_min_logprob = false);

// Compares one row of a reference model R's fp32 logits with the same position's row of a model Q, in double
// (DESIGN.md §3, issue 17's contract):
//   m_X = max logit of X; lse_X = m_X + log sum_i exp(l_X(i) - m_X)   (X = R, Q)
//   ref_logprob = l_R(target) - lse_R
//   kld = KL(P_R || P_Q) = sum_i p_R(i) d_i, p_R(i) = exp(l_R(i) - lse_R),
//         d_i = (l_R(i) - l_Q(i)) - (lse_R - lse_Q)   (= log p_R(i) - log p_Q(i))
//   ref_greedy = argmax_R == target; same_top = argmax_R == argmax_Q (each argmax: lowest id on ties).
// Bitwise equal rows give every d_i exactly 0, so kld exactly 0.0. A rounding-sized negative sum (the true
// value is >= 0) is returned as 0.
struct BaselineComparison {
  double ref_logprob = 0.0;
  double kld = 0.0;
  bool ref_greedy = false;
  bool same_top = false;
};
BaselineComparison CompareWithBaseline(const float* ref_logits,    // [vocab_size], R's
                                       const float* model_logits,  // [vocab_size], Q's
                                       int64_t vocab_size, int32_t target);

}  // namespace scored::ref

#endif  // SCORED_ENGINE_REFERENCE_OPS_H_

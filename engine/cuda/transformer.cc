#include "engine/cuda/transformer.h"

#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/dist/vocab_parallel_logprob.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/bias_add.h"
#include "engine/kernels/cuda_check.h"
#include "engine/kernels/embedding.h"
#include "engine/kernels/fp8_quant.h"
#include "engine/kernels/fp8_scale.h"
#include "engine/kernels/kernel_types.h"
#include "engine/kernels/qk_norm.h"
#include "engine/kernels/rms_norm.h"
#include "engine/kernels/rms_norm_fp8.h"
#include "engine/kernels/rope.h"
#include "engine/kernels/swiglu.h"
#include "engine/kernels/swiglu_fp8.h"

namespace scored::cuda {

using kernels::bf16_t;

namespace {

int64_t ActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

int64_t QkvDim(const ModelConfig& c) { return (c.num_heads + 2 * c.num_kv_heads) * c.head_dim; }

int64_t LogitsRows(int64_t max_tokens) { return std::min(max_tokens, kLmHeadChunkTokens); }

// How one linear reads its input and writes its output (defaults: y = x . W^T).
struct LinearIo {
  bool accumulate = false;               // y += x . W^T (fp32 y: the residual stream)
  const float* fp8_input_scale = nullptr;  // real FP8 GEMM only: x is already in act_fp8 with these per-token
                                           // scales [n] (a fused norm / SwiGLU kernel wrote them); x unused
  bool raw_fp8_output = false;  // real FP8 GEMM only: where the scales come after the GEMM, leave y unscaled
                                // (the next op applies them; GemmRunner::Fp8ScalesInEpilogue says which)
};

// The forward pass for activation type T (bf16_t or float). Buffers first, then the ops in order.
template <typename T>
absl::Status ForwardImpl(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                         const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                         const TensorParallelContext* tp) {
  const int64_t n = batch.num_tokens;
  const int64_t hidden = config.hidden_size;
  const int64_t num_heads = config.num_heads, num_kv_heads = config.num_kv_heads, head_dim = config.head_dim;
  const int64_t q_dim = num_heads * head_dim, kv_dim = num_kv_heads * head_dim, qkv_dim = q_dim + 2 * kv_dim;
  const int64_t inter = config.intermediate_size, vocab = config.vocab_size;
  const float eps = static_cast<float>(config.rms_norm_eps);
  constexpr bool kFp32 = std::is_same_v<T, float>;
  const GemmTypes types = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToBf16;
  // o_proj / down_proj outputs join the fp32 residual stream in the GEMM's epilogue (residual += x . W^T,
  // fp32, never rounded to bf16). Tensor parallelism: rank 0 adds its partial product to the residual, the
  // other ranks write theirs over it, and the all-reduce of the residual rows sums to the full result.
  const GemmTypes to_fp32 = kFp32 ? GemmTypes::kFp32 : GemmTypes::kBf16ToFp32;
  const bool add_to_residual = tp == nullptr || tp->comm->rank() == 0;

  float* residual = acts->residual.as<float>();        // [n, hidden]
  T* normed = acts->normed.as<T>();                    // [n, hidden]
  T* qkv = acts->qkv.as<T>();                          // [n, qkv_dim]: q | k | v of each token
  T* q = qkv;                                          //   [n, num_heads, head_dim], row stride qkv_dim
  T* k = qkv + q_dim;                                  //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* v = qkv + q_dim + kv_dim;                         //   [n, num_kv_heads, head_dim], row stride qkv_dim
  T* attn = acts->attn.as<T>();                        // [n, q_dim]
  float* proj = acts->proj.as<float>();                // [n, hidden]: a W8A8 o / down GEMM's own output
  T* gate_up = acts->gate_up.as<T>();                  // [n, 2 inter]: gate | up of each token
  T* mlp = acts->mlp.as<T>();                          // [n, inter]
  float* logits = acts->logits.as<float>();            // [kLmHeadChunkTokens, vocab] (tp: the rank's shard)
  const int32_t* tokens = acts->tokens.as<int32_t>();  // [n]
  const int32_t* positions = acts->positions.as<int32_t>();    // [n]
  const int32_t* cu_seqlens = acts->cu_seqlens.as<int32_t>();  // [num_seqs + 1]
  const int32_t* targets = acts->targets.as<int32_t>();        // [n]
  const float* rope_table = acts->rope_table.as<float>();      // [max_tokens, head_dim / 2, 2]
  float* act_amax = acts->act_amax.as<float>();                // [n] (tp only)
  uint8_t* act_fp8 = acts->act_fp8.as<uint8_t>();              // [n, in] W8A8: a real FP8 GEMM's input
  float* fp8_scale_norm = acts->act_scale.as<float>();         // [n]: its per-token scales (qkv, o, gate_up)
  float* fp8_scale_mlp = fp8_scale_norm + acts->max_tokens;    // [n]: those of down_proj's input

  // Tensor parallelism: sums every rank's fp32 partial [n, hidden] in place (the embedding).
  auto all_reduce = [&](float* x) -> absl::Status {
    if (tp == nullptr) return absl::OkStatus();
    return tp->comm->AllReduceSum(x, x, n * hidden, dist::ReduceDType::kF32, stream);
  };

  // Row chunks of the row-parallel linears (one chunk at tp 1): chunk c is rows [c * chunk_rows,
  // min(n, (c + 1) * chunk_rows)). Every row's result is the same whatever the chunking: GEMM algorithms
  // are pinned per weight shape (gemm.h), the norms are per row, and the all-reduce of a row at tp 2 is one
  // fp32 add (at tp > 2 NCCL's reduction order may depend on the message size).
  int64_t chunk_rows = n;
  if (tp != nullptr) {
    int chunks = acts->tp_row_chunks;
    if (chunks == 0) chunks = static_cast<int>(std::min<int64_t>(kMaxTpRowChunks, n / kTpAutoChunkRows));
    chunks = std::max(1, std::min(chunks, kMaxTpRowChunks));
    chunk_rows = (n + chunks - 1) / chunks;
    if (chunks > 1) chunk_rows = std::min(n, (chunk_rows + 15) / 16 * 16);  // 16-row (64-byte) aligned starts
  }
  const int num_chunks = static_cast<int>((n + chunk_rows - 1) / chunk_rows);
  const bool pipelined = tp != nullptr && num_chunks > 1;
  const cudaStream_t cs = pipelined ? acts->comm_stream.get() : stream;
  // Enqueues the all-reduce of rows [begin, begin + rows) of the residual (chunk c): on comm_stream after the
  // chunk's GEMM when pipelined, else on the forward's stream.
  auto reduce_rows = [&](int c, int64_t begin, int64_t rows) -> absl::Status {
    if (tp == nullptr) return absl::OkStatus();
    float* x = residual + begin * hidden;  // [rows, hidden]
    if (!pipelined) return tp->comm->AllReduceSum(x, x, rows * hidden, dist::ReduceDType::kF32, stream);
    SCORED_CUDA_CHECK(cudaEventRecord(acts->chunk_ready[c].get(), stream));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(cs, acts->chunk_ready[c].get(), 0));
    SCORED_RETURN_IF_ERROR(tp->comm->AllReduceSum(x, x, rows * hidden, dist::ReduceDType::kF32, cs));
    SCORED_CUDA_CHECK(cudaEventRecord(acts->chunk_reduced[c].get(), cs));
    return absl::OkStatus();
  };
  // Makes the forward's stream wait for chunk c's all-reduce (nothing unless pipelined).
  auto wait_reduced = [&](int c) -> absl::Status {
    if (pipelined) SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->chunk_reduced[c].get(), 0));
    return absl::OkStatus();
  };
  using RowsFn = std::function<absl::Status(int, int64_t, int64_t)>;  // (chunk, first row, rows)

  // Every linear of the forward in the order of use. Quantized ones are expanded into the two scratch
  // buffers in turn on acts->dequant_stream, one linear ahead: linear k+1's dequantization (into the buffer
  // linear k-1 used, once that GEMM is done) overlaps linear k's GEMM and the ops between them.
  std::vector<const DeviceLinear*> order;
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* l : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) order.push_back(l);
  }
  const bool quantized = model.max_scratch_elements > 0;
  void* scratch[2] = {acts->scratch.data(), acts->scratch2.data()};
  const cudaStream_t dq = acts->dequant_stream.get();
  // Enqueues the expansion of order[k] into scratch[k % 2] (nothing for a resident dense or FP8 linear).
  auto prefetch = [&](size_t k) -> absl::Status {
    if (!quantized || k >= order.size() || !order[k]->uses_scratch()) return absl::OkStatus();
    const int buf = static_cast<int>(k % 2);
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(dq, acts->weight_free[buf].get(), 0));
    SCORED_RETURN_IF_ERROR(order[k]->Materialize(model.dtype, scratch[buf], dq).status());
    SCORED_CUDA_CHECK(cudaEventRecord(acts->weight_ready[buf].get(), dq));
    return absl::OkStatus();
  };
  if (quantized) {
    // Both buffers are free once everything before this forward on `stream` is done.
    for (const CudaEvent& e : acts->weight_free) SCORED_CUDA_CHECK(cudaEventRecord(e.get(), stream));
    SCORED_RETURN_IF_ERROR(prefetch(0));
  }
  size_t next = 0;  // index into `order` of the next linear

  // y[n, out] = x[n, in] . W^T, with a quantized weight taken from its scratch buffer. W8A8 resident in FP8
  // (bf16 mode, per-token activations): x is quantized into act_fp8 / act_scale and a real FP8 GEMM runs.
  // Other W8A8 (fp32 mode, per-group activations, shapes FP8 GEMMs cannot take): x is fake-quantized to FP8
  // first, one scale per token or per act_group_size columns of a token (x is contiguous, so a group is a
  // row of the [n * in / group, group] view), then the bf16 / fp32 GEMM runs on the dequantized weight.
  // io.accumulate: y += x . W^T (fp32 y; a real FP8 GEMM writes proj and AddFp8Scaled joins it to y).
  auto linear = [&](const DeviceLinear& w, T* x, void* y, GemmTypes y_types, const LinearIo& io) -> absl::Status {
    if (next >= order.size() || order[next] != &w) return absl::InternalError("linears used out of order");
    const size_t k = next++;
    SCORED_RETURN_IF_ERROR(prefetch(k + 1));
    if (w.fp8_resident()) {
      // Real FP8 GEMM: x quantized per token into act_fp8 / x_scale (unless a fused kernel did); the GEMM
      // applies both scales.
      const int64_t in = w.in_features();
      uint8_t* x_fp8 = act_fp8;  // [n, in]
      const float* x_scale = io.fp8_input_scale;  // [n]
      if (x_scale == nullptr && w.act_amax_all_reduce() && tp != nullptr) {
        // Row-parallel shard: the token's scale is the amax over every rank's columns.
        SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x, in, n, in, act_amax, stream));
        SCORED_RETURN_IF_ERROR(tp->comm->AllReduce(act_amax, act_amax, n, dist::ReduceDType::kF32,
                                                   dist::ReduceOp::kMax, stream));
        SCORED_RETURN_IF_ERROR(
            kernels::QuantizeFp8PerTokenWithAmax<T>(x, in, n, in, act_amax, x_fp8, fp8_scale_norm, stream));
        x_scale = fp8_scale_norm;
      } else if (x_scale == nullptr) {
        SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken<T>(x, in, n, in, x_fp8, fp8_scale_norm, stream));
        x_scale = fp8_scale_norm;
      }
      const GemmTypes fp8_types = y_types == GemmTypes::kBf16ToBf16 ? GemmTypes::kFp8ToBf16 : GemmTypes::kFp8ToFp32;
      if (!io.accumulate) {
        return gemm.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), y, n, w.out_features(), in, fp8_types,
                              stream, io.raw_fp8_output);
      }
      if (fp8_types != GemmTypes::kFp8ToFp32) return absl::InternalError("FP8 accumulation needs an fp32 output");
      SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm.Fp8ScalesInEpilogue(w.out_features(), in, fp8_types));
      SCORED_RETURN_IF_ERROR(gemm.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), proj, n, w.out_features(),
                                            in, fp8_types, stream, /*leave_unscaled=*/true));
      return kernels::AddFp8Scaled(proj, n, w.out_features(), scaled ? nullptr : x_scale,
                                   scaled ? nullptr : w.fp8_scale(), static_cast<float*>(y), stream);
    }
    if (io.fp8_input_scale != nullptr || io.raw_fp8_output) {
      return absl::InternalError("FP8 input / output requested of a linear without a real FP8 GEMM");
    }
    if (w.w8a8_dynamic_fp8() && w.act_amax_all_reduce() && tp != nullptr) {
      // Row-parallel shard: the token's scale is the amax over every rank's columns.
      SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x, w.in_features(), n, w.in_features(), act_amax, stream));
      SCORED_RETURN_IF_ERROR(tp->comm->AllReduce(act_amax, act_amax, n, dist::ReduceDType::kF32,
                                                 dist::ReduceOp::kMax, stream));
      SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8PerTokenWithAmax<T>(x, w.in_features(), n, w.in_features(),
                                                                         act_amax, stream));
    } else if (w.w8a8_dynamic_fp8()) {
      const int64_t group = w.act_group_size() > 0 ? w.act_group_size() : w.in_features();
      SCORED_RETURN_IF_ERROR(
          kernels::FakeQuantizeFp8PerToken<T>(x, group, n * (w.in_features() / group), group, stream));
    }
    const void* weight = scratch[k % 2];
    if (w.resident_dense()) {
      SCORED_ASSIGN_OR_RETURN(weight, w.Materialize(model.dtype, nullptr, stream));
    } else {
      SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->weight_ready[k % 2].get(), 0));
    }
    SCORED_RETURN_IF_ERROR(
        gemm.Linear(x, weight, y, n, w.out_features(), w.in_features(), y_types, stream, io.accumulate));
    if (w.uses_scratch()) SCORED_CUDA_CHECK(cudaEventRecord(acts->weight_free[k % 2].get(), stream));
    return absl::OkStatus();
  };

  // linear() in row chunks: before(c, ..) is enqueued before chunk c's GEMM and after(c, ..) after it (either
  // may be null). W8A8 linears (whose input quantization takes every row) run every before(), the whole
  // linear, then every after(); so does everything when the forward is not pipelined.
  auto chunked_linear = [&](const DeviceLinear& w, T* x, void* y, GemmTypes y_types, const LinearIo& io,
                            const RowsFn& before, const RowsFn& after) -> absl::Status {
    const bool whole = !pipelined || w.fp8_resident() || w.w8a8_dynamic_fp8();
    if (whole) {
      for (int c = 0; c < num_chunks && before; ++c) {
        const int64_t begin = c * chunk_rows;
        SCORED_RETURN_IF_ERROR(before(c, begin, std::min(chunk_rows, n - begin)));
      }
      SCORED_RETURN_IF_ERROR(linear(w, x, y, y_types, io));
      for (int c = 0; c < num_chunks && after; ++c) {
        const int64_t begin = c * chunk_rows;
        SCORED_RETURN_IF_ERROR(after(c, begin, std::min(chunk_rows, n - begin)));
      }
      return absl::OkStatus();
    }
    if (next >= order.size() || order[next] != &w) return absl::InternalError("linears used out of order");
    const size_t k = next++;
    SCORED_RETURN_IF_ERROR(prefetch(k + 1));
    const void* weight = scratch[k % 2];
    if (w.resident_dense()) {
      SCORED_ASSIGN_OR_RETURN(weight, w.Materialize(model.dtype, nullptr, stream));
    } else {
      SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->weight_ready[k % 2].get(), 0));
    }
    const int64_t in = w.in_features(), out = w.out_features();
    const int64_t y_bytes = y_types == GemmTypes::kBf16ToBf16 ? 2 : 4;
    for (int c = 0; c < num_chunks; ++c) {
      const int64_t begin = c * chunk_rows, rows = std::min(chunk_rows, n - begin);
      if (before) SCORED_RETURN_IF_ERROR(before(c, begin, rows));
      void* y_rows = static_cast<char*>(y) + begin * out * y_bytes;  // [rows, out]
      SCORED_RETURN_IF_ERROR(
          gemm.Linear(x + begin * in, weight, y_rows, rows, out, in, y_types, stream, io.accumulate));
      if (after) SCORED_RETURN_IF_ERROR(after(c, begin, rows));
    }
    if (w.uses_scratch()) SCORED_CUDA_CHECK(cudaEventRecord(acts->weight_free[k % 2].get(), stream));
    return absl::OkStatus();
  };
  const RowsFn reduce_after = [&](int c, int64_t begin, int64_t rows) { return reduce_rows(c, begin, rows); };
  // W8A8 fusions (bf16 mode): a real FP8 GEMM whose input quantization needs only its own rank's columns
  // (column-parallel, or tp 1) takes its input straight from the fused RmsNorm + FP8 kernel, and down_proj
  // from the fused scales + SwiGLU + FP8 kernel. Results are bitwise those of the unfused kernels.
  auto fp8_fed = [&](const DeviceLinear& w) {
    return !kFp32 && w.fp8_resident() && !(tp != nullptr && w.act_amax_all_reduce());
  };
  const bool norm_fp8_ok = kernels::RmsNormQuantFp8Supports(hidden);
  const bool swiglu_fp8_ok = inter % 8 == 0 && inter <= kernels::kSwiGluQuantFp8MaxInter;
  // RmsNorm of residual rows [begin, begin + rows) into normed or, for an fp8_fed linear, straight into
  // act_fp8 / fp8_scale_norm.
  auto norm = [&](const float* weight, bool to_fp8, int64_t begin, int64_t rows) -> absl::Status {
    if (to_fp8) {
      return kernels::RmsNormQuantFp8(residual + begin * hidden, hidden, weight, rows, hidden, eps, nullptr, hidden,
                                      act_fp8 + begin * hidden, fp8_scale_norm + begin, stream);
    }
    return kernels::RmsNorm<float, T>(residual + begin * hidden, hidden, weight, rows, hidden, eps,
                                      normed + begin * hidden, hidden, stream);
  };
  // norm() of chunk c's rows once their all-reduce is done.
  auto norm_rows = [&](const float* weight, bool to_fp8, int c, int64_t begin, int64_t rows) -> absl::Status {
    SCORED_RETURN_IF_ERROR(wait_reduced(c));
    return norm(weight, to_fp8, begin, rows);
  };

  kernels::AttentionShape attn_shape;
  attn_shape.num_tokens = n;
  attn_shape.num_seqs = batch.num_seqs;
  attn_shape.max_seqlen = batch.max_seqlen;
  attn_shape.num_heads = static_cast<int32_t>(num_heads);
  attn_shape.num_kv_heads = static_cast<int32_t>(num_kv_heads);
  attn_shape.head_dim = static_cast<int32_t>(head_dim);
  attn_shape.q_stride = qkv_dim;
  attn_shape.kv_stride = qkv_dim;

  if (tp == nullptr) {
    SCORED_RETURN_IF_ERROR(
        (kernels::Embedding<T, float>(model.embed.as<T>(), tokens, n, vocab, hidden, residual, stream)));
  } else {
    SCORED_RETURN_IF_ERROR((kernels::EmbeddingShard<T, float>(model.embed.as<T>(), tokens, n, tp->vocab_size,
                                                              tp->vocab_begin, tp->vocab_rows, hidden, residual,
                                                              stream)));
    SCORED_RETURN_IF_ERROR(all_reduce(residual));
  }
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const DeviceLayer& layer = model.layers[l];
    // Attention block.
    const bool qkv_fp8 = norm_fp8_ok && fp8_fed(layer.qkv);
    const LinearIo qkv_io{false, qkv_fp8 ? fp8_scale_norm : nullptr, false};
    if (l == 0) {
      SCORED_RETURN_IF_ERROR(norm(layer.input_norm.as<float>(), qkv_fp8, 0, n));
      SCORED_RETURN_IF_ERROR(linear(layer.qkv, normed, qkv, types, qkv_io));
    } else {
      const RowsFn input_norm = [&](int c, int64_t begin, int64_t rows) {
        return norm_rows(layer.input_norm.as<float>(), qkv_fp8, c, begin, rows);
      };
      SCORED_RETURN_IF_ERROR(chunked_linear(layer.qkv, normed, qkv, types, qkv_io, input_norm, nullptr));
    }
    if (layer.qkv_bias.data() != nullptr) {
      SCORED_RETURN_IF_ERROR(
          kernels::BiasAdd<T>(qkv, qkv_dim, layer.qkv_bias.as<float>(), n, qkv_dim, stream));
    }
    if (layer.q_norm.data() != nullptr) {
      SCORED_RETURN_IF_ERROR(
          kernels::QkNorm<T>(q, qkv_dim, layer.q_norm.as<float>(), n, num_heads, head_dim, eps, stream));
      SCORED_RETURN_IF_ERROR(
          kernels::QkNorm<T>(k, qkv_dim, layer.k_norm.as<float>(), n, num_kv_heads, head_dim, eps, stream));
    }
    SCORED_RETURN_IF_ERROR(
        kernels::RopeWithTable<T>(qkv, qkv_dim, positions, rope_table, acts->max_tokens, n, num_heads + num_kv_heads,
                                  head_dim, stream));
    SCORED_RETURN_IF_ERROR(kernels::CausalAttention<T>(q, k, v, cu_seqlens, attn_shape, attn, stream));
    // o_proj joins the residual in row chunks, each chunk's all-reduce overlapping the next chunk's GEMM (tp > 1).
    SCORED_RETURN_IF_ERROR(
        chunked_linear(layer.o, attn, residual, to_fp32, {add_to_residual}, nullptr, reduce_after));
    // MLP block: chunk c's norm and gate_up GEMM start once chunk c is reduced.
    const bool gate_up_fp8 = norm_fp8_ok && fp8_fed(layer.gate_up);
    const bool swiglu_fp8 = swiglu_fp8_ok && layer.gate_up.fp8_resident() && fp8_fed(layer.down);
    const RowsFn post_norm = [&](int c, int64_t begin, int64_t rows) {
      return norm_rows(layer.post_norm.as<float>(), gate_up_fp8, c, begin, rows);
    };
    SCORED_RETURN_IF_ERROR(chunked_linear(layer.gate_up, normed, gate_up, types,
                                          {false, gate_up_fp8 ? fp8_scale_norm : nullptr, swiglu_fp8}, post_norm,
                                          nullptr));
    if (swiglu_fp8) {
      if constexpr (!kFp32) {
        // gate_up's raw FP8 GEMM output: its scales, SwiGLU and down_proj's input quantization in one pass.
        SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm.Fp8ScalesInEpilogue(layer.gate_up.out_features(), hidden,
                                                                            GemmTypes::kFp8ToBf16));
        SCORED_RETURN_IF_ERROR(kernels::SwiGluQuantFp8(gate_up, n, inter, scaled ? nullptr : fp8_scale_norm,
                                                       scaled ? nullptr : layer.gate_up.fp8_scale(), act_fp8,
                                                       fp8_scale_mlp, stream));
      }
    } else {
      SCORED_RETURN_IF_ERROR(kernels::SwiGlu<T>(gate_up, gate_up + inter, 2 * inter, n, inter, mlp, stream));
    }
    SCORED_RETURN_IF_ERROR(chunked_linear(layer.down, mlp, residual, to_fp32,
                                          {add_to_residual, swiglu_fp8 ? fp8_scale_mlp : nullptr, false}, nullptr,
                                          reduce_after));
  }
  for (int c = 0; c < num_chunks; ++c) {
    const int64_t begin = c * chunk_rows;
    SCORED_RETURN_IF_ERROR(
        norm_rows(model.final_norm.as<float>(), false, c, begin, std::min(chunk_rows, n - begin)));
  }

  // lm_head in chunks of rows: fp32 logits into the reusable chunk, then the per-row statistics.
  // Tensor parallelism: the logits of the rank's vocabulary rows [rows, head_rows] (leading dimension
  // head_rows), combined across ranks by per-token statistics.
  SCORED_ASSIGN_OR_RETURN(const void* head, model.lm_head.Materialize(model.dtype, nullptr, stream));
  const int64_t head_rows = model.lm_head.out_features();
  const int64_t chunk = LogitsRows(acts->max_tokens);
  const int64_t top_k = batch.options.top_k;
  for (const RowSpan& span : batch.lm_head_rows) {
    for (int64_t begin = span.begin; begin < span.end; begin += chunk) {
      const int64_t rows = std::min(chunk, span.end - begin);
      SCORED_RETURN_IF_ERROR(
          gemm.Linear(normed + begin * hidden, head, logits, rows, head_rows, hidden, to_fp32, stream));
      kernels::LogprobOutputs out;
      out.logprob = acts->logprob.as<double>() + begin;                       // [rows]
      out.greedy = acts->greedy.as<uint8_t>() + begin;                        // [rows]
      out.rank = acts->rank.as<int32_t>() + begin;                            // [rows]
      out.entropy = acts->entropy.as<float>() + begin;                        // [rows]
      out.top_k_ids = acts->top_k_ids.as<int32_t>() + begin * top_k;          // [rows, top_k]
      out.top_k_logprobs = acts->top_k_logprobs.as<float>() + begin * top_k;  // [rows, top_k]
      if (tp == nullptr) {
        SCORED_RETURN_IF_ERROR(
            kernels::ScoreLogits(logits, vocab, targets + begin, rows, vocab, batch.options, out, stream));
      } else {
        SCORED_RETURN_IF_ERROR(dist::VocabParallelScore(
            *tp->comm, logits, head_rows, head_rows, tp->vocab_begin, targets + begin, rows, batch.options,
            acts->tp_stats.as<kernels::LogitPartialStats>(), acts->tp_target_logit.as<float>(),
            acts->tp_topk_ids.as<int32_t>(), acts->tp_topk_values.as<float>(), out, stream));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ActivationBytesPerToken(const ModelConfig& config, ComputeDtype dtype) {
  const int64_t act = ActBytes(dtype);
  const int64_t q_dim = config.num_heads * config.head_dim;
  const int64_t floats = 4 * 2 * config.hidden_size;  // residual, proj
  const int64_t acts = act * (config.hidden_size + QkvDim(config) + q_dim + 3 * config.intermediate_size);
  const int64_t per_row = 4 * 4 + 8 + 1 + 4 + 4 + kernels::kMaxTopK * 8;  // inputs, results
  const int64_t rope_table = 4 * config.head_dim;                         // (cos, sin) of one position
  return floats + acts + per_row + rope_table;
}

int64_t FixedActivationBytes(const ModelConfig& config, const DeviceModel& model, int64_t max_tokens,
                             int tp_size) {
  const int64_t tp_bytes =
      tp_size > 1 ? LogitsRows(max_tokens) * (tp_size * static_cast<int64_t>(sizeof(kernels::LogitPartialStats)) + 4 +
                                              tp_size * kernels::kMaxTopK * 8) +
                        max_tokens * 4
                  : 0;
  const int64_t fp8_bytes = model.max_fp8_in_features > 0 ? max_tokens * (model.max_fp8_in_features + 8) : 0;
  return LogitsRows(max_tokens) * config.vocab_size * 4 + 2 * model.max_scratch_elements * ActBytes(model.dtype) +
         tp_bytes + fp8_bytes;
}

absl::StatusOr<Activations> AllocateActivations(const ModelConfig& config, const DeviceModel& model,
                                                int64_t max_tokens, int tp_size) {
  const int64_t t = max_tokens, act = ActBytes(model.dtype);
  const int64_t q_dim = config.num_heads * config.head_dim;
  Activations a;
  a.max_tokens = max_tokens;
  SCORED_ASSIGN_OR_RETURN(a.residual,
                          DeviceBuffer::Allocate(t * config.hidden_size * 4, "the residual stream"));
  SCORED_ASSIGN_OR_RETURN(a.normed,
                          DeviceBuffer::Allocate(t * config.hidden_size * act, "normed activations"));
  SCORED_ASSIGN_OR_RETURN(a.qkv, DeviceBuffer::Allocate(t * QkvDim(config) * act, "q|k|v activations"));
  SCORED_ASSIGN_OR_RETURN(a.attn, DeviceBuffer::Allocate(t * q_dim * act, "attention output"));
  SCORED_ASSIGN_OR_RETURN(a.proj, DeviceBuffer::Allocate(t * config.hidden_size * 4, "projection output"));
  SCORED_ASSIGN_OR_RETURN(
      a.gate_up, DeviceBuffer::Allocate(t * 2 * config.intermediate_size * act, "gate|up activations"));
  SCORED_ASSIGN_OR_RETURN(a.mlp, DeviceBuffer::Allocate(t * config.intermediate_size * act, "swiglu output"));
  SCORED_ASSIGN_OR_RETURN(
      a.scratch, DeviceBuffer::Allocate(model.max_scratch_elements * act, "the dequantized-weight scratch"));
  SCORED_ASSIGN_OR_RETURN(a.scratch2, DeviceBuffer::Allocate(model.max_scratch_elements * act,
                                                             "the second dequantized-weight scratch"));
  if (model.max_scratch_elements > 0) {
    SCORED_ASSIGN_OR_RETURN(a.dequant_stream, CudaStream::Create());
    for (int i = 0; i < 2; ++i) {
      SCORED_ASSIGN_OR_RETURN(a.weight_ready[i], CudaEvent::Create());
      SCORED_ASSIGN_OR_RETURN(a.weight_free[i], CudaEvent::Create());
    }
  }
  if (model.max_fp8_in_features > 0) {
    SCORED_ASSIGN_OR_RETURN(a.act_fp8,
                            DeviceBuffer::Allocate(t * model.max_fp8_in_features, "FP8 GEMM activations"));
    SCORED_ASSIGN_OR_RETURN(a.act_scale, DeviceBuffer::Allocate(2 * t * 4, "FP8 activation scales"));
  }
  SCORED_ASSIGN_OR_RETURN(
      a.logits, DeviceBuffer::Allocate(LogitsRows(t) * config.vocab_size * 4, "the fp32 logits chunk"));
  SCORED_ASSIGN_OR_RETURN(a.tokens, DeviceBuffer::Allocate(t * 4, "token ids"));
  SCORED_ASSIGN_OR_RETURN(a.positions, DeviceBuffer::Allocate(t * 4, "positions"));
  // A window's positions are < its length <= max_tokens: one table for every forward, built once here.
  SCORED_ASSIGN_OR_RETURN(a.rope_table, DeviceBuffer::Allocate(t * config.head_dim * 4, "the RoPE cos/sin table"));
  SCORED_RETURN_IF_ERROR(kernels::RopeCosSinTable(model.rope_inv_freq.as<float>(), t, config.head_dim / 2,
                                                  a.rope_table.as<float>(), nullptr));
  SCORED_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  SCORED_ASSIGN_OR_RETURN(a.cu_seqlens, DeviceBuffer::Allocate((t + 1) * 4, "sequence offsets"));
  SCORED_ASSIGN_OR_RETURN(a.targets, DeviceBuffer::Allocate(t * 4, "targets"));
  SCORED_ASSIGN_OR_RETURN(a.logprob, DeviceBuffer::Allocate(t * 8, "logprobs"));
  SCORED_ASSIGN_OR_RETURN(a.greedy, DeviceBuffer::Allocate(t, "greedy flags"));
  SCORED_ASSIGN_OR_RETURN(a.rank, DeviceBuffer::Allocate(t * 4, "ranks"));
  SCORED_ASSIGN_OR_RETURN(a.entropy, DeviceBuffer::Allocate(t * 4, "entropies"));
  SCORED_ASSIGN_OR_RETURN(a.top_k_ids, DeviceBuffer::Allocate(t * kernels::kMaxTopK * 4, "top-k ids"));
  SCORED_ASSIGN_OR_RETURN(a.top_k_logprobs,
                          DeviceBuffer::Allocate(t * kernels::kMaxTopK * 4, "top-k logprobs"));
  if (tp_size > 1) {
    SCORED_ASSIGN_OR_RETURN(
        a.tp_stats,
        DeviceBuffer::Allocate(tp_size * LogitsRows(t) * static_cast<int64_t>(sizeof(kernels::LogitPartialStats)),
                               "the vocab-parallel statistics"));
    SCORED_ASSIGN_OR_RETURN(a.tp_target_logit, DeviceBuffer::Allocate(LogitsRows(t) * 4, "target logits"));
    SCORED_ASSIGN_OR_RETURN(a.act_amax, DeviceBuffer::Allocate(t * 4, "activation amax"));
    SCORED_ASSIGN_OR_RETURN(a.tp_topk_ids, DeviceBuffer::Allocate(tp_size * LogitsRows(t) * kernels::kMaxTopK * 4,
                                                                  "vocab-parallel top-k ids"));
    SCORED_ASSIGN_OR_RETURN(a.tp_topk_values, DeviceBuffer::Allocate(tp_size * LogitsRows(t) * kernels::kMaxTopK * 4,
                                                                     "vocab-parallel top-k logits"));
    SCORED_ASSIGN_OR_RETURN(a.comm_stream, CudaStream::CreateHighestPriority());
    for (int c = 0; c < kMaxTpRowChunks; ++c) {
      SCORED_ASSIGN_OR_RETURN(CudaEvent ready, CudaEvent::Create());
      SCORED_ASSIGN_OR_RETURN(CudaEvent reduced, CudaEvent::Create());
      a.chunk_ready.push_back(std::move(ready));
      a.chunk_reduced.push_back(std::move(reduced));
    }
    SCORED_ASSIGN_OR_RETURN(a.comm_done, CudaEvent::Create());
  }
  return a;
}

absl::Status Forward(const ModelConfig& config, const DeviceModel& model, GemmRunner& gemm,
                     const ForwardBatch& batch, Activations* acts, cudaStream_t stream,
                     const TensorParallelContext* tp) {
  if (batch.num_tokens <= 0 || batch.num_tokens > acts->max_tokens) {
    return absl::OutOfRangeError(
        absl::StrCat("batch of ", batch.num_tokens, " tokens; the engine holds ", acts->max_tokens));
  }
  const absl::Status status = model.dtype == ComputeDtype::kBf16
                                  ? ForwardImpl<bf16_t>(config, model, gemm, batch, acts, stream, tp)
                                  : ForwardImpl<float>(config, model, gemm, batch, acts, stream, tp);
  if (tp != nullptr && acts->comm_stream.get() != nullptr) {
    // Whatever was enqueued on comm_stream (all of it on success; up to the failure otherwise) finishes
    // before `stream` drains, so the caller's Synchronize(stream) (with its timeout and abort) covers it.
    SCORED_CUDA_CHECK(cudaEventRecord(acts->comm_done.get(), acts->comm_stream.get()));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->comm_done.get(), 0));
  }
  return status;
}

}  // namespace scored::cuda

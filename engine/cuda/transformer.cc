#include "engine/cuda/transformer.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/cuda/peer_link.h"
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

static_assert(kMaxTpRowChunks <= PeerLink::kMaxChunks, "a peer push per row chunk");

namespace {

int64_t ActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }

int64_t QkvDim(const ModelConfig& c) { return (c.num_heads + 2 * c.num_kv_heads) * c.head_dim; }

int64_t LogitsRows(int64_t max_tokens) { return std::min(max_tokens, kLmHeadChunkTokens); }

// How one linear reads its input and writes its output (defaults: y = x . W^T).
struct LinearIo {
  bool accumulate = false;                 // y += x . W^T (fp32 y: the residual stream)
  const float* fp8_input_scale = nullptr;  // real FP8 GEMM only: x is already in act_fp8 with these per-token
                                           // scales [n] (a fused norm / SwiGLU kernel wrote them); x unused
  bool raw_fp8_output = false;  // real FP8 GEMM only: where the scales come after the GEMM, leave y unscaled
                                // (the next op applies them; GemmRunner::Fp8ScalesInEpilogue says which)
  bool in_halves = false;  // with accumulate: y += x_a . W_a^T, then y += x_b . W_b^T over the two halves of
                           // the input columns (SumsInHalves)
};

// Whether a tensor-parallel forward may run in row chunks: not where a row-parallel W8A8 linear all-reduces
// its input's per-token amax on the forward's stream (NCCL work would then be pending on two streams at once;
// those linears also need every rank's columns before their GEMM).
bool Chunkable(const DeviceModel& model) {
  for (const DeviceLayer& layer : model.layers) {
    for (const DeviceLinear* w : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      if ((w->fp8_resident() || w->w8a8_dynamic_fp8()) && w->act_amax_all_reduce()) return false;
    }
  }
  return true;
}

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

  // Row chunks (tp > 1, RowChunks): whole sequences each, so every op of a decoder layer runs chunk by chunk
  // and chunk c's sum over ranks (after o_proj, after down_proj) overlaps the next chunks' compute. One chunk
  // at tp 1. A row's result is the same whatever the chunking: GEMM algorithms are pinned per weight shape
  // (gemm.h), norms and element-wise ops are per row, attention is per sequence, and a row's sum over two
  // ranks is one fp32 add (at tp > 2 NCCL's reduction order may depend on the message size).
  const std::vector<RowChunk> chunks = RowChunks(batch.cu_seqlens, n, batch.num_seqs, batch.max_seqlen,
                                                 acts->tp_row_chunks, tp != nullptr && Chunkable(model));
  const int num_chunks = static_cast<int>(chunks.size());
  const bool pipelined = tp != nullptr && num_chunks > 1;
  const cudaStream_t cs = pipelined ? acts->comm_stream.get() : stream;
  // tp 2 in one process: the partial rows go to the peer by copy engine (PeerLink) on comm_stream, chunk by
  // chunk, and the next norm adds the peer's rows to the rank's own. Receive buffer (parity) 0 takes o_proj's
  // sums, 1 down_proj's; pushed[c] is chunk c's latest push.
  PeerLink* const peer = tp != nullptr ? tp->peer : nullptr;
  const int rank = tp != nullptr ? tp->comm->rank() : 0;
  int64_t pushed[kMaxTpRowChunks] = {};
  // Enqueues the sum over ranks of chunk c's residual rows (after the chunk's row-parallel GEMM): a peer copy
  // on comm_stream, or an NCCL all-reduce (on comm_stream when pipelined, else on the forward's stream).
  auto reduce_rows = [&](int parity, int c, const RowChunk& ch) -> absl::Status {
    if (tp == nullptr) return absl::OkStatus();
    float* x = residual + ch.begin * hidden;  // [rows, hidden]
    if (peer != nullptr) {
      const cudaStream_t copy = acts->comm_stream.get();
      SCORED_CUDA_CHECK(cudaEventRecord(acts->chunk_ready[c].get(), stream));
      SCORED_CUDA_CHECK(cudaStreamWaitEvent(copy, acts->chunk_ready[c].get(), 0));
      SCORED_ASSIGN_OR_RETURN(pushed[c],
                              peer->Push(rank, parity, c, x, ch.begin * hidden, ch.rows * hidden, copy));
      return absl::OkStatus();
    }
    if (!pipelined) return tp->comm->AllReduceSum(x, x, ch.rows * hidden, dist::ReduceDType::kF32, stream);
    SCORED_CUDA_CHECK(cudaEventRecord(acts->chunk_ready[c].get(), stream));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(cs, acts->chunk_ready[c].get(), 0));
    SCORED_RETURN_IF_ERROR(tp->comm->AllReduceSum(x, x, ch.rows * hidden, dist::ReduceDType::kF32, cs));
    SCORED_CUDA_CHECK(cudaEventRecord(acts->chunk_reduced[c].get(), cs));
    return absl::OkStatus();
  };

  // Every linear of the forward in the order of first use. Quantized ones are expanded into the two scratch
  // buffers in turn on acts->dequant_stream, two linears ahead: linear k+2's expansion (into the buffer
  // linear k used) is enqueued once linear k's last GEMM is, and overlaps linear k+1 and the ops around it.
  // Two linears are in use at a time (q|k|v and o, then gate|up and down, their chunks interleaved).
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
    SCORED_RETURN_IF_ERROR(prefetch(1));
  }
  size_t next = 0;  // index into `order` of the next linear to acquire
  // A linear in use: its weight for the GEMMs (null for a resident FP8 linear) and its place in `order`.
  struct InUse {
    const DeviceLinear* w = nullptr;
    const void* weight = nullptr;
    size_t k = 0;
  };
  auto acquire = [&](const DeviceLinear& w) -> absl::StatusOr<InUse> {
    if (next >= order.size() || order[next] != &w) return absl::InternalError("linears used out of order");
    InUse use{&w, nullptr, next++};
    if (w.resident_dense()) {
      SCORED_ASSIGN_OR_RETURN(use.weight, w.Materialize(model.dtype, nullptr, stream));
    } else if (w.uses_scratch()) {
      SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->weight_ready[use.k % 2].get(), 0));
      use.weight = scratch[use.k % 2];
    }
    return use;
  };
  // After the linear's last GEMM: its scratch buffer is free for linear k+2.
  auto release = [&](const InUse& use) -> absl::Status {
    if (use.w->uses_scratch()) SCORED_CUDA_CHECK(cudaEventRecord(acts->weight_free[use.k % 2].get(), stream));
    return prefetch(use.k + 2);
  };

  // y[rows, out] = x[rows, in] . W^T on chunk ch's rows. W8A8 resident in FP8 (bf16 mode, per-token
  // activations): x is quantized into act_fp8 / act_scale and a real FP8 GEMM runs. Other W8A8 (fp32 mode,
  // per-group activations, shapes FP8 GEMMs cannot take): x is fake-quantized to FP8 first, one scale per
  // token or per act_group_size columns of a token (x is contiguous, so a group is a row of the [rows * in /
  // group, group] view), then the bf16 / fp32 GEMM runs on the dequantized weight. io.accumulate: y += x .
  // W^T (fp32 y; a real FP8 GEMM writes proj and AddFp8Scaled joins it to y).
  auto gemm_rows = [&](const InUse& use, T* x, void* y, GemmTypes y_types, const LinearIo& io,
                       const RowChunk& ch) -> absl::Status {
    const DeviceLinear& w = *use.w;
    const int64_t m = ch.rows, in = w.in_features(), out = w.out_features();
    const int64_t y_elem = y_types == GemmTypes::kBf16ToBf16 ? 2 : 4;
    T* x_rows = x + ch.begin * in;                                   // [m, in]
    void* y_rows = static_cast<char*>(y) + ch.begin * out * y_elem;  // [m, out]
    float* scale_rows = fp8_scale_norm + ch.begin;                   // [m]
    if (w.fp8_resident()) {
      // Real FP8 GEMM: x quantized per token into act_fp8 / x_scale (unless a fused kernel did); the GEMM
      // applies both scales.
      uint8_t* x_fp8 = act_fp8 + ch.begin * in;  // [m, in]
      const float* x_scale = io.fp8_input_scale != nullptr ? io.fp8_input_scale + ch.begin : nullptr;  // [m]
      if (x_scale == nullptr && w.act_amax_all_reduce() && tp != nullptr) {
        // Row-parallel shard: the token's scale is the amax over every rank's columns.
        float* amax = act_amax + ch.begin;
        SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream));
        SCORED_RETURN_IF_ERROR(
            tp->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream));
        SCORED_RETURN_IF_ERROR(
            kernels::QuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, x_fp8, scale_rows, stream));
        x_scale = scale_rows;
      } else if (x_scale == nullptr) {
        SCORED_RETURN_IF_ERROR(kernels::QuantizeFp8PerToken<T>(x_rows, in, m, in, x_fp8, scale_rows, stream));
        x_scale = scale_rows;
      }
      const GemmTypes fp8_types =
          y_types == GemmTypes::kBf16ToBf16 ? GemmTypes::kFp8ToBf16 : GemmTypes::kFp8ToFp32;
      if (!io.accumulate) {
        return gemm.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), y_rows, m, out, in, fp8_types,
                              stream, io.raw_fp8_output);
      }
      if (fp8_types != GemmTypes::kFp8ToFp32)
        return absl::InternalError("FP8 accumulation needs an fp32 output");
      SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm.Fp8ScalesInEpilogue(out, in, fp8_types));
      float* proj_rows = proj + ch.begin * out;  // [m, out]
      SCORED_RETURN_IF_ERROR(gemm.Fp8Linear(x_fp8, x_scale, w.fp8_weight(), w.fp8_scale(), proj_rows, m, out,
                                            in, fp8_types, stream, /*leave_unscaled=*/true));
      return kernels::AddFp8Scaled(proj_rows, m, out, scaled ? nullptr : x_scale,
                                   scaled ? nullptr : w.fp8_scale(), static_cast<float*>(y_rows), stream);
    }
    if (io.fp8_input_scale != nullptr || io.raw_fp8_output) {
      return absl::InternalError("FP8 input / output requested of a linear without a real FP8 GEMM");
    }
    if (w.w8a8_dynamic_fp8() && w.act_amax_all_reduce() && tp != nullptr) {
      // Row-parallel shard: the token's scale is the amax over every rank's columns.
      float* amax = act_amax + ch.begin;
      SCORED_RETURN_IF_ERROR(kernels::Fp8RowAmax<T>(x_rows, in, m, in, amax, stream));
      SCORED_RETURN_IF_ERROR(
          tp->comm->AllReduce(amax, amax, m, dist::ReduceDType::kF32, dist::ReduceOp::kMax, stream));
      SCORED_RETURN_IF_ERROR(kernels::FakeQuantizeFp8PerTokenWithAmax<T>(x_rows, in, m, in, amax, stream));
    } else if (w.w8a8_dynamic_fp8()) {
      const int64_t group = w.act_group_size() > 0 ? w.act_group_size() : in;
      SCORED_RETURN_IF_ERROR(
          kernels::FakeQuantizeFp8PerToken<T>(x_rows, group, m * (in / group), group, stream));
    }
    if (io.in_halves) {
      // Two GEMMs over the input column halves, each adding into y (SumsInHalves): tp 2's order of sums.
      const int64_t half = in / 2;
      SCORED_RETURN_IF_ERROR(
          gemm.Linear(x_rows, use.weight, y_rows, m, out, half, y_types, stream, true, in));
      return gemm.Linear(x_rows + half, static_cast<const T*>(use.weight) + half, y_rows, m, out, half,
                         y_types, stream, true, in);
    }
    return gemm.Linear(x_rows, use.weight, y_rows, m, out, in, y_types, stream, io.accumulate);
  };

  // W8A8 fusions (bf16 mode): a real FP8 GEMM whose input quantization needs only its own rank's columns
  // (column-parallel, or tp 1) takes its input straight from the fused RmsNorm + FP8 kernel, and down_proj
  // from the fused scales + SwiGLU + FP8 kernel. Results are bitwise those of the unfused kernels.
  auto fp8_fed = [&](const DeviceLinear& w) {
    return !kFp32 && w.fp8_resident() && !(tp != nullptr && w.act_amax_all_reduce());
  };
  const bool norm_fp8_ok = kernels::RmsNormQuantFp8Supports(hidden);
  const bool swiglu_fp8_ok = inter % 8 == 0 && inter <= kernels::kSwiGluQuantFp8MaxInter;
  // RmsNorm of chunk ch's residual rows into normed or, for an fp8_fed linear, straight into act_fp8 /
  // fp8_scale_norm. after_sum (tp > 1): the rows' sum over ranks (reduce_rows(parity, c, ch)) is awaited
  // first; with peer copies the peer's rows are added to the rank's own here (AddRmsNorm: bitwise the
  // all-reduce's one add, then RmsNorm's values).
  auto norm = [&](const float* weight, bool to_fp8, bool after_sum, int parity, int c,
                  const RowChunk& ch) -> absl::Status {
    float* rows = residual + ch.begin * hidden;  // [m, hidden]
    if (after_sum && peer != nullptr) {
      SCORED_RETURN_IF_ERROR(peer->AwaitPeer(rank, pushed[c], parity, c, stream));
      const float* theirs = peer->received(rank, parity) + ch.begin * hidden;  // [m, hidden]
      if (!to_fp8) {
        return kernels::AddRmsNorm<float, T>(theirs, hidden, rows, weight, ch.rows, hidden, eps,
                                             normed + ch.begin * hidden, hidden, stream);
      }
      SCORED_RETURN_IF_ERROR(kernels::AddFp8Scaled(theirs, ch.rows, hidden, nullptr, nullptr, rows, stream));
    } else if (after_sum && pipelined) {
      SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->chunk_reduced[c].get(), 0));
    }
    if (to_fp8) {
      return kernels::RmsNormQuantFp8(rows, hidden, weight, ch.rows, hidden, eps, nullptr, hidden,
                                      act_fp8 + ch.begin * hidden, fp8_scale_norm + ch.begin, stream);
    }
    return kernels::RmsNorm<float, T>(rows, hidden, weight, ch.rows, hidden, eps, normed + ch.begin * hidden,
                                      hidden, stream);
  };

  kernels::AttentionShape attn_shape;
  attn_shape.num_heads = static_cast<int32_t>(num_heads);
  attn_shape.num_kv_heads = static_cast<int32_t>(num_kv_heads);
  attn_shape.head_dim = static_cast<int32_t>(head_dim);
  attn_shape.q_stride = qkv_dim;
  attn_shape.kv_stride = qkv_dim;

  if (tp == nullptr) {
    SCORED_RETURN_IF_ERROR(
        (kernels::Embedding<T, float>(model.embed.as<T>(), tokens, n, vocab, hidden, residual, stream)));
  } else {
    SCORED_RETURN_IF_ERROR(
        (kernels::EmbeddingShard<T, float>(model.embed.as<T>(), tokens, n, tp->vocab_size, tp->vocab_begin,
                                           tp->vocab_rows, hidden, residual, stream)));
    SCORED_RETURN_IF_ERROR(all_reduce(residual));
  }
  constexpr int kAfterO = 0, kAfterDown = 1;  // the parity of each row-parallel sum
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const DeviceLayer& layer = model.layers[l];
    // Attention block, chunk by chunk: norm, q|k|v, RoPE, attention over the chunk's sequences, o_proj
    // joining the residual, then the chunk's sum over ranks.
    const bool qkv_fp8 = norm_fp8_ok && fp8_fed(layer.qkv);
    const LinearIo qkv_io{false, qkv_fp8 ? fp8_scale_norm : nullptr, false, false};
    const LinearIo o_io{add_to_residual, nullptr, false,
                        tp == nullptr && acts->row_parallel_halves && SumsInHalves(layer.o, model.dtype)};
    SCORED_ASSIGN_OR_RETURN(const InUse qkv_w, acquire(layer.qkv));
    SCORED_ASSIGN_OR_RETURN(const InUse o_w, acquire(layer.o));
    for (int c = 0; c < num_chunks; ++c) {
      const RowChunk& ch = chunks[c];
      const int64_t b = ch.begin, m = ch.rows;
      SCORED_RETURN_IF_ERROR(norm(layer.input_norm.as<float>(), qkv_fp8, l > 0, kAfterDown, c, ch));
      SCORED_RETURN_IF_ERROR(gemm_rows(qkv_w, normed, qkv, types, qkv_io, ch));
      if (c == num_chunks - 1) SCORED_RETURN_IF_ERROR(release(qkv_w));
      T* qkv_rows = qkv + b * qkv_dim;  // [m, qkv_dim]
      if (layer.qkv_bias.data() != nullptr) {
        SCORED_RETURN_IF_ERROR(
            kernels::BiasAdd<T>(qkv_rows, qkv_dim, layer.qkv_bias.as<float>(), m, qkv_dim, stream));
      }
      if (layer.q_norm.data() != nullptr) {
        SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows, qkv_dim, layer.q_norm.as<float>(), m, num_heads,
                                                  head_dim, eps, stream));
        SCORED_RETURN_IF_ERROR(kernels::QkNorm<T>(qkv_rows + q_dim, qkv_dim, layer.k_norm.as<float>(), m,
                                                  num_kv_heads, head_dim, eps, stream));
      }
      SCORED_RETURN_IF_ERROR(kernels::RopeWithTable<T>(qkv_rows, qkv_dim, positions + b, rope_table,
                                                       acts->max_tokens, m, num_heads + num_kv_heads,
                                                       head_dim, stream));
      // The chunk's sequences: cu_seqlens holds absolute rows, so q / k / v / attn stay the batch's.
      attn_shape.num_tokens = m;
      attn_shape.num_seqs = ch.num_seqs;
      attn_shape.max_seqlen = ch.max_seqlen;
      SCORED_RETURN_IF_ERROR(
          kernels::CausalAttention<T>(q, k, v, cu_seqlens + ch.first_seq, attn_shape, attn, stream));
      SCORED_RETURN_IF_ERROR(gemm_rows(o_w, attn, residual, to_fp32, o_io, ch));
      if (c == num_chunks - 1) SCORED_RETURN_IF_ERROR(release(o_w));
      SCORED_RETURN_IF_ERROR(reduce_rows(kAfterO, c, ch));
    }
    // MLP block, chunk by chunk: norm, gate|up, SwiGLU, down_proj joining the residual, the chunk's sum.
    const bool gate_up_fp8 = norm_fp8_ok && fp8_fed(layer.gate_up);
    const bool swiglu_fp8 = swiglu_fp8_ok && layer.gate_up.fp8_resident() && fp8_fed(layer.down);
    const LinearIo gate_up_io{false, gate_up_fp8 ? fp8_scale_norm : nullptr, swiglu_fp8, false};
    const LinearIo down_io{
        add_to_residual, swiglu_fp8 ? fp8_scale_mlp : nullptr, false,
        tp == nullptr && acts->row_parallel_halves && SumsInHalves(layer.down, model.dtype)};
    SCORED_ASSIGN_OR_RETURN(const InUse gate_up_w, acquire(layer.gate_up));
    SCORED_ASSIGN_OR_RETURN(const InUse down_w, acquire(layer.down));
    for (int c = 0; c < num_chunks; ++c) {
      const RowChunk& ch = chunks[c];
      const int64_t b = ch.begin, m = ch.rows;
      SCORED_RETURN_IF_ERROR(norm(layer.post_norm.as<float>(), gate_up_fp8, tp != nullptr, kAfterO, c, ch));
      SCORED_RETURN_IF_ERROR(gemm_rows(gate_up_w, normed, gate_up, types, gate_up_io, ch));
      if (c == num_chunks - 1) SCORED_RETURN_IF_ERROR(release(gate_up_w));
      T* gate_up_rows = gate_up + b * 2 * inter;  // [m, 2 inter]
      if (swiglu_fp8) {
        if constexpr (!kFp32) {
          // gate_up's raw FP8 GEMM output: its scales, SwiGLU and down_proj's input quantization in one pass.
          SCORED_ASSIGN_OR_RETURN(const bool scaled, gemm.Fp8ScalesInEpilogue(layer.gate_up.out_features(),
                                                                              hidden, GemmTypes::kFp8ToBf16));
          SCORED_RETURN_IF_ERROR(kernels::SwiGluQuantFp8(
              gate_up_rows, m, inter, scaled ? nullptr : fp8_scale_norm + b,
              scaled ? nullptr : layer.gate_up.fp8_scale(), act_fp8 + b * inter, fp8_scale_mlp + b, stream));
        }
      } else {
        SCORED_RETURN_IF_ERROR(kernels::SwiGlu<T>(gate_up_rows, gate_up_rows + inter, 2 * inter, m, inter,
                                                  mlp + b * inter, stream));
      }
      SCORED_RETURN_IF_ERROR(gemm_rows(down_w, mlp, residual, to_fp32, down_io, ch));
      if (c == num_chunks - 1) SCORED_RETURN_IF_ERROR(release(down_w));
      SCORED_RETURN_IF_ERROR(reduce_rows(kAfterDown, c, ch));
    }
  }
  for (int c = 0; c < num_chunks; ++c) {
    SCORED_RETURN_IF_ERROR(
        norm(model.final_norm.as<float>(), false, tp != nullptr, kAfterDown, c, chunks[c]));
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

bool SumsInHalves(const DeviceLinear& linear, ComputeDtype dtype) {
  const int64_t in = linear.in_features();
  return !linear.fp8_resident() && !linear.w8a8_dynamic_fp8() && in % 2 == 0 &&
         (in / 2 * ActBytes(dtype)) % 16 == 0;
}

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
      tp_size > 1
          ? LogitsRows(max_tokens) * (tp_size * static_cast<int64_t>(sizeof(kernels::LogitPartialStats)) + 4 +
                                      tp_size * kernels::kMaxTopK * 8) +
                max_tokens * 4
          : 0;
  const int64_t fp8_bytes = model.max_fp8_in_features > 0 ? max_tokens * (model.max_fp8_in_features + 8) : 0;
  return LogitsRows(max_tokens) * config.vocab_size * 4 +
         2 * model.max_scratch_elements * ActBytes(model.dtype) + tp_bytes + fp8_bytes;
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
  SCORED_ASSIGN_OR_RETURN(a.rope_table,
                          DeviceBuffer::Allocate(t * config.head_dim * 4, "the RoPE cos/sin table"));
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
        a.tp_stats, DeviceBuffer::Allocate(
                        tp_size * LogitsRows(t) * static_cast<int64_t>(sizeof(kernels::LogitPartialStats)),
                        "the vocab-parallel statistics"));
    SCORED_ASSIGN_OR_RETURN(a.tp_target_logit, DeviceBuffer::Allocate(LogitsRows(t) * 4, "target logits"));
    SCORED_ASSIGN_OR_RETURN(a.act_amax, DeviceBuffer::Allocate(t * 4, "activation amax"));
    SCORED_ASSIGN_OR_RETURN(
        a.tp_topk_ids,
        DeviceBuffer::Allocate(tp_size * LogitsRows(t) * kernels::kMaxTopK * 4, "vocab-parallel top-k ids"));
    SCORED_ASSIGN_OR_RETURN(a.tp_topk_values,
                            DeviceBuffer::Allocate(tp_size * LogitsRows(t) * kernels::kMaxTopK * 4,
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
  // A rank that stops enqueueing must not leave its peer waiting for pushes that will never come.
  if (!status.ok() && tp != nullptr && tp->peer != nullptr) tp->peer->Abort(status);
  if (tp != nullptr && acts->comm_stream.get() != nullptr) {
    // Whatever was enqueued on comm_stream (all of it on success; up to the failure otherwise) finishes
    // before `stream` drains, so the caller's Synchronize(stream) (with its timeout and abort) covers it.
    SCORED_CUDA_CHECK(cudaEventRecord(acts->comm_done.get(), acts->comm_stream.get()));
    SCORED_CUDA_CHECK(cudaStreamWaitEvent(stream, acts->comm_done.get(), 0));
  }
  return status;
}

}  // namespace scored::cuda

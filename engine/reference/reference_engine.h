// The CPU reference backend: a real Engine (the oracle for every GPU kernel and a backend for small
// models). fp32 math with fp64 reductions; quantized weights are decoded once at load, exactly
// (LinearWeight::DequantizeRows), and held in fp32 (host memory: 4 bytes per parameter, embeddings and a
// tied lm_head counted twice; ModelInfo::resident_bytes reports it).
//
// Forward (Llama / Mistral / Qwen2 / Qwen3): embedding; per layer RMSNorm -> q/k/v linears (Qwen2 bias) ->
// per-head q/k RMSNorm (Qwen3) -> RoPE (default, linear, llama3 scaling) -> causal GQA attention -> o linear
// -> residual add -> RMSNorm -> gate/up linears -> SwiGLU -> down linear -> residual add; final RMSNorm;
// lm_head in fp32 for the scored positions only; ref::ScoreLogits per position. A linear whose checkpoint
// is W8A8 dynamic FP8 has each input row fake-quantized first (ref::FakeQuantizeFp8PerToken).
//
// Score(): sequences are validated (DESIGN.md §3 codes: OUT_OF_RANGE for n > max_seq_len or
// n > max_batch_tokens; INVALID_ARGUMENT for n < 2, score_from >= n, top_k outside [0, 64], an id outside
// [0, vocab_size) naming its position) before any work; one bad sequence fails the whole call. Each
// sequence is then run alone, so batch composition never changes a result, and the thread count
// (EngineOptions::num_threads; 0 = the CPUs in this process's affinity mask) never changes one either:
// results are bitwise reproducible.
#ifndef SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_
#define SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace scored {

absl::StatusOr<std::unique_ptr<Engine>> CreateReferenceEngine(const EngineOptions& options);

}  // namespace scored

#endif  // SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

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
// A reference model R (EngineOptions::reference_model_dir) is loaded by the same path as the model Q, into a
// second engine of the same kind (host memory: both models' fp32 weights). want_reference then runs R's
// forward on the same tokens and compares each scored position's two logit rows (ref::CompareWithBaseline).
//
// Score(): each sequence is validated (engine/score_contract.h) before any work of its own; a bad sequence
// gets its error and the others are still scored. Each sequence is run alone, so batch composition never
// changes a result, and the thread count (EngineOptions::num_threads; 0 = the CPUs in this process's affinity
// mask) never changes one either: results are bitwise reproducible.
#ifndef SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_
#define SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace scored {

absl::StatusOr<std::unique_ptr<Engine>> CreateReferenceEngine(const EngineOptions& options);

}  // namespace scored

#endif  // SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

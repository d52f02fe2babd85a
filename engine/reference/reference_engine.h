// The CPU reference backend: a real Engine (the oracle for every GPU kernel and a backend for small
// models). fp32 math with fp64 reductions; quantized weights are decoded once at load, exactly
// (LinearWeight::DequantizeRows), and held in fp32.
#ifndef SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_
#define SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace scored {

absl::StatusOr<std::unique_ptr<Engine>> CreateReferenceEngine(const EngineOptions& options);

}  // namespace scored

#endif  // SCORED_ENGINE_REFERENCE_REFERENCE_ENGINE_H_

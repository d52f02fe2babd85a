// Testing only: `scored --fault_inject=fatal_after:N` wraps the engine so that the server's handling of
// a sticky fatal engine error (a CUDA/NCCL failure on the GPU backend, which sets fatal_status()
// itself) can be exercised end to end on the CPU backend.
//
// FaultInjectingEngine forwards the first N Score() batches to the wrapped engine; from call N+1 on,
// Score() gives every sequence UNAVAILABLE and fatal_status() returns the same UNAVAILABLE forever, exactly
// as a failed device would. info() and DeviceMemory() forward unchanged.
// `--fault_inject=fatal_after_ms:T` instead turns fatal T ms after the wrapper is made, with or without
// traffic, as a multi-process engine does when it loses a peer process while idle (the server must
// notice through fatal_status() alone).
// `--fault_inject=device_trap_after:N` needs no wrapper: the CUDA engine itself runs a kernel that traps on
// the device before its (N+1)-th batch (EngineOptions::fault_device_trap_after_batches), a real sticky CUDA
// failure, so the whole path of a GPU failure runs: the engine's own sticky status, health NOT_SERVING, exit
// non-zero.
// `--fault_inject=slow_load_ms:T` makes the server wait T ms before it creates the engine, as a large
// checkpoint on a cold disk or a leader waiting for its follower processes does (a stop signal during
// startup must end the process at once).
//
// Thread-safety: as Engine (Score() from one thread; fatal_status() and info() from any thread).
#ifndef SCORED_SERVER_FAULT_INJECTION_H_
#define SCORED_SERVER_FAULT_INJECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace scored {

struct FaultInjection {
  int64_t fatal_after_batches = -1;  // -1 = no fault; N >= 0 = the (N+1)-th Score() batch fails fatally
  int64_t fatal_after_ms = -1;       // -1 = no fault; T >= 0 = fatal T ms after the engine is wrapped
  int64_t slow_load_ms = -1;         // -1 = no fault; T >= 0 = T ms of waiting before the engine is made
  int64_t device_trap_after_batches = -1;  // -1 = no fault; N >= 0 = the CUDA engine traps before batch N+1
};

// "" -> no fault; "fatal_after:N", "fatal_after_ms:T", "slow_load_ms:T" or "device_trap_after:N" with N, T in
// [0, 1000000000]. INVALID_ARGUMENT names --fault_inject and the range otherwise.
absl::StatusOr<FaultInjection> ParseFaultInjection(const std::string& text);

class FaultInjectingEngine final : public Engine {
 public:
  FaultInjectingEngine(std::unique_ptr<Engine> engine, FaultInjection fault)
      : engine_(std::move(engine)), fault_(fault), created_(absl::Now()) {}

  std::vector<absl::StatusOr<ScoreResult>> Score(absl::Span<const ScoreRequest> batch) override;
  const ModelInfo& info() const override { return engine_->info(); }
  absl::Status fatal_status() const override;
  std::vector<std::pair<int64_t, int64_t>> DeviceMemory() const override { return engine_->DeviceMemory(); }

 private:
  const std::unique_ptr<Engine> engine_;
  // Sets fatal_ once the fatal_after_ms deadline has passed.
  void CheckTimedFault() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FaultInjection fault_;
  const absl::Time created_;
  int64_t batches_ = 0;  // Score() calls forwarded so far (Score() runs on one thread)
  mutable absl::Mutex mu_;
  mutable absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scored

#endif  // SCORED_SERVER_FAULT_INJECTION_H_

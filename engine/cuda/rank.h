// One rank of the CUDA engine (one GPU's share of the model): building it (its stream, GEMM runner, weights
// (the whole model at tp 1, the rank's shard otherwise), activation memory for max_batch_tokens with a memory
// fit check that says what would fit, and the GEMM algorithm choices pinned before the first batch
// (TuneLayerGemms times the decoder-layer shapes, the rest by heuristic)), and running one packed batch on it
// with the host / device copies around the forward (RunRank). Everything a rank holds is created
// on the thread that will use it (cudaSetDevice is per thread): the caller has set the rank's device.
// Thread-safety: none; one rank per call.
#ifndef SCORED_ENGINE_CUDA_RANK_H_
#define SCORED_ENGINE_CUDA_RANK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/cuda/batch_pack.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/peer_link.h"
#include "engine/cuda/transformer.h"
#include "engine/dist/nccl_communicator.h"
#include "engine/engine.h"
#include "engine/model/config.h"
#include "engine/model/shard_plan.h"
#include "engine/model/weights.h"

namespace scored::cuda {

// One rank's device state. At tp > 1 it is created, used and destroyed on the rank's RankWorker thread;
// at tp == 1 on the engine's calling thread.
struct Rank {
  int index = 0;       // tp_rank
  int device = 0;      // CUDA ordinal
  ModelConfig config;  // the model's (tp == 1) or the rank's LocalConfig
  CudaStream stream;
  std::unique_ptr<GemmRunner> gemm;
  std::unique_ptr<DeviceModel> model;
  // The reference model R (--reference_model), null without one: its config (tp > 1: its LocalConfig) and
  // weights (its shard), on the same device, in the same activations and GEMM runner as the model.
  ModelConfig ref_config;
  std::unique_ptr<DeviceModel> ref_model;
  Activations acts;
  std::unique_ptr<dist::NcclCommunicator> comm;  // tp > 1 only
  TensorParallelContext tp;                      // tp > 1 only
};

// "GPU <ordinal> (<name>)" for messages.
std::string DeviceName(int device);

// Everything of one rank after its communicator: shard upload (`plan` null: the whole model, tp 1), the
// reference model's (`reference` non-null: its own shard of the same tp), activation reservation (with
// `link`: this rank's peer-copy receive buffers too), the execution settings of `options` (tp_row_chunks at
// tp > 1, row_parallel_halves), GEMM choices. rank->index, device and config are set by the caller.
// *activation_bytes: the device bytes reserved for activations. RESOURCE_EXHAUSTED naming the device, what
// max_batch_tokens needs and how many tokens would fit when it does not fit; with a reference model, checked
// before the reference is uploaded: naming both models' weights and suggesting a larger --tp.
absl::Status BuildRank(const ModelWeights& weights, const ModelWeights* reference,
                       const EngineOptions& options, const ShardPlan* plan, PeerLink* link, Rank* rank,
                       int64_t* activation_bytes);

// The smallest tensor-parallel size above `tp` (2, 4 or 8) at which `weights_at_tp` bytes per GPU (at `tp`)
// spread over the GPUs (they scale as 1 / tp) plus `activations` bytes per GPU (they barely shrink) fit in
// `usable` bytes per GPU; 0 when not even 8 does. For the start-up error of a reference model that does not
// fit.
int SmallestTpThatFits(int64_t weights_at_tp, int tp, int64_t activations, int64_t usable);

// bf16 only: times the heuristic's top GEMM candidates of each decoder-layer shape at max_tokens rows on the
// activation buffers (their contents are overwritten later by every forward) with layer 0's weights, and
// pins the fastest (GemmRunner::Tune). one_gpu: o_proj / down_proj run as two GEMMs over their input column
// halves where acts.row_parallel_halves says so (SumsInHalves); those shapes are the ones timed.
absl::Status TuneLayerGemms(const DeviceModel& model, GemmRunner& gemm, Activations& acts,
                            cudaStream_t stream, bool one_gpu);

// Copies the packed batch to `rank`'s device, runs its forward (Forward, with rank.tp when the rank has a
// communicator) and, when `out` is set, copies the per-row results back into it (HostResults::Resize);
// returns once the rank's stream has drained (with a communicator: its deadline-bounded Synchronize, so a
// lost peer cannot hang it). Call on the rank's thread.
absl::Status RunRank(Rank& rank, const PackedBatch& batch, HostResults* out);

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_RANK_H_

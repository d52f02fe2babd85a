// One rank of a tensor-parallel forward (engine/model/shard_plan.h has the layout): what the forward
// (transformer.h), the row-parallel sums (row_reduce.h) and the rank (rank.h) share of it. Plain data; the
// communicator and peer link are borrowed (the rank owns them).
#ifndef SCORED_ENGINE_CUDA_TP_CONTEXT_H_
#define SCORED_ENGINE_CUDA_TP_CONTEXT_H_

#include <cstdint>

namespace scored::dist {
class NcclCommunicator;
}  // namespace scored::dist

namespace scored::cuda {

class PeerLink;

// Every rank runs Forward on the same batch at the same time: the collectives of `comm` pair up in order.
struct TensorParallelContext {
  dist::NcclCommunicator* comm = nullptr;  // this rank's; its stream is the forward's stream
  int64_t vocab_size = 0;                  // the full vocabulary (config.vocab_size is the padded shard)
  int64_t vocab_begin = 0;                 // first embedding / lm_head row of this rank
  int64_t vocab_rows = 0;                  // rows of this rank: [vocab_begin, vocab_begin + vocab_rows)
  // tp 2 in one process: the row-parallel partial products are summed by peer copies (peer_link.h) instead
  // of NCCL all-reduces (bitwise the same sums); null otherwise. Its ranks are the communicator's.
  PeerLink* peer = nullptr;
};

}  // namespace scored::cuda

#endif  // SCORED_ENGINE_CUDA_TP_CONTEXT_H_

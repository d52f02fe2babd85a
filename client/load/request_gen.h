// Random token sequences for scored-load: lengths drawn from a mix, ids uniform in [0, vocab_size),
// the first id BOS (when the model has one).
//
// Thread-safety: a RequestGenerator is used by one thread (it owns its random state); the
// LengthSampler it points to is shared read-only.
#ifndef SCORED_CLIENT_LOAD_REQUEST_GEN_H_
#define SCORED_CLIENT_LOAD_REQUEST_GEN_H_

#include <cstdint>
#include <random>
#include <vector>

#include "client/load/length_mix.h"

namespace scored {
namespace load {

class RequestGenerator {
 public:
  // `sampler` must outlive the generator; vocab_size >= 1. bos_id outside [0, vocab_size) (e.g. -1:
  // the model has none) makes the first id random too. The stream of sequences is a pure function
  // of (sampler's mix, vocab_size, bos_id, seed, client).
  RequestGenerator(const LengthSampler* sampler, int64_t vocab_size, int32_t bos_id, uint64_t seed,
                   int client);

  // Replaces *ids with the next sequence: n = sampler->Sample() ids, ids[0] = BOS, the rest uniform in
  // [0, vocab_size) (rng() % vocab_size; its bias is below vocab_size / 2^64, negligible).
  void Next(std::vector<int32_t>* ids);  // [n]

 private:
  const LengthSampler* const sampler_;
  const int64_t vocab_size_;
  const int32_t bos_id_;
  std::mt19937_64 rng_;
};

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_REQUEST_GEN_H_

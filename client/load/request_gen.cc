#include "client/load/request_gen.h"

namespace scored {
namespace load {
namespace {

std::mt19937_64 SeededRng(uint64_t seed, int client) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(client)};
  return std::mt19937_64(seq);
}

}  // namespace

RequestGenerator::RequestGenerator(const LengthSampler* sampler, int64_t vocab_size, int32_t bos_id,
                                   uint64_t seed, int client)
    : sampler_(sampler), vocab_size_(vocab_size), bos_id_(bos_id), rng_(SeededRng(seed, client)) {}

void RequestGenerator::Next(std::vector<int32_t>* ids) {
  const int64_t n = sampler_->Sample(rng_);
  ids->resize(static_cast<size_t>(n));
  const uint64_t vocab = static_cast<uint64_t>(vocab_size_);
  for (int64_t j = 0; j < n; ++j) (*ids)[static_cast<size_t>(j)] = static_cast<int32_t>(rng_() % vocab);
  if (bos_id_ >= 0 && bos_id_ < vocab_size_) (*ids)[0] = bos_id_;
}

}  // namespace load
}  // namespace scored

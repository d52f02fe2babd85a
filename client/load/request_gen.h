// Random token sequences for scored-load: lengths drawn from a mix, ids uniform in [0, vocab_size),
// the first id BOS (when the model has one); and the kind of each request (normal, cancelled by the
// client, or malformed on purpose) drawn from the cancel and malformed fractions.
//
// Thread-safety: a RequestGenerator is used by one thread (it owns its random state); the
// LengthSampler it points to is shared read-only.
#ifndef SCORED_CLIENT_LOAD_REQUEST_GEN_H_
#define SCORED_CLIENT_LOAD_REQUEST_GEN_H_

#include <cstdint>
#include <random>
#include <string>
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

// What a request is meant to exercise.
enum class RequestKind {
  kNormal,  // a valid request that must succeed
  kCancel,  // a valid request the client cancels shortly after sending it (CANCELLED or OK expected)
  // Malformed: the server must answer INVALID_ARGUMENT.
  kMalformedOutOfVocab,  // one id == vocab_size
  kMalformedEmpty,       // a token list with no ids
  kMalformedTopK,        // top_k 1025 (kMaxTopK + 1: the limit is 1024)
  kMalformedRawBytes,    // raw bytes: a `text` field holding invalid UTF-8, which does not parse
};
constexpr int kNumRequestKinds = 6;

// "normal", "cancel", "oov", "empty", "top_k", "raw_bytes".
const char* RequestKindName(RequestKind kind);
bool IsMalformed(RequestKind kind);

// Draws request kinds: with probability cancel_fraction kCancel, with probability malformed_fraction
// one of the four malformed kinds (each equally likely), else kNormal. Its own std::mt19937_64 seeded
// from (seed, client), separate from the RequestGenerator's, so that the token sequences of a run do
// not depend on the fractions; with both fractions 0 it draws nothing and always answers kNormal.
// Requires 0 <= each fraction and their sum <= 1 (ValidateLoadOptions checks the flags).
class KindSampler {
 public:
  KindSampler(double cancel_fraction, double malformed_fraction, uint64_t seed, int client);
  RequestKind Next();

 private:
  const double cancel_fraction_;
  const double malformed_fraction_;
  std::mt19937_64 rng_;
};

// ScoreRequest{request_id, text: TextInput{text: "ab\xff\xfe"}} encoded by hand: 0xff, 0xfe are no
// UTF-8, so the server's protobuf parser refuses the message. The generated stub cannot send it (its
// serializer would be the one to complain), so scored-load sends these bytes through a generic call.
std::string InvalidUtf8ScoreRequest(uint64_t request_id);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_REQUEST_GEN_H_

#include "client/load/request_gen.h"

namespace scored {
namespace load {
namespace {

std::mt19937_64 SeededRng(uint64_t seed, int client) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(client)};
  return std::mt19937_64(seq);
}

// A different stream from SeededRng's for the same (seed, client): the extra word tells them apart.
std::mt19937_64 KindRng(uint64_t seed, int client) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(client), 0x6b696e64u};
  return std::mt19937_64(seq);
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
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

const char* RequestKindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kNormal:
      return "normal";
    case RequestKind::kCancel:
      return "cancel";
    case RequestKind::kMalformedOutOfVocab:
      return "oov";
    case RequestKind::kMalformedEmpty:
      return "empty";
    case RequestKind::kMalformedTopK:
      return "top_k";
    case RequestKind::kMalformedRawBytes:
      return "raw_bytes";
  }
  return "unknown";
}

bool IsMalformed(RequestKind kind) { return kind != RequestKind::kNormal && kind != RequestKind::kCancel; }

KindSampler::KindSampler(double cancel_fraction, double malformed_fraction, uint64_t seed, int client)
    : cancel_fraction_(cancel_fraction),
      malformed_fraction_(malformed_fraction),
      rng_(KindRng(seed, client)) {}

RequestKind KindSampler::Next() {
  if (cancel_fraction_ <= 0.0 && malformed_fraction_ <= 0.0) return RequestKind::kNormal;
  // 53 random bits: u uniform in [0, 1).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  if (u < cancel_fraction_) return RequestKind::kCancel;
  if (u < cancel_fraction_ + malformed_fraction_) {
    static constexpr RequestKind kMalformed[] = {RequestKind::kMalformedOutOfVocab,
                                                 RequestKind::kMalformedEmpty, RequestKind::kMalformedTopK,
                                                 RequestKind::kMalformedRawBytes};
    return kMalformed[rng_() % 4];
  }
  return RequestKind::kNormal;
}

std::string InvalidUtf8ScoreRequest(uint64_t request_id) {
  const std::string text_input(
      "\x0a\x04"
      "ab\xff\xfe",
      6);                      // TextInput field 1 (string), 4 bytes
  std::string out("\x08", 1);  // ScoreRequest field 1 (request_id, varint)
  AppendVarint(request_id, &out);
  out.push_back('\x1a');  // field 3 (text, a TextInput message)
  AppendVarint(text_input.size(), &out);
  out += text_input;
  return out;
}

}  // namespace load
}  // namespace scored

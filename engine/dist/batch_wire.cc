#include "engine/dist/batch_wire.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace scored::dist {
namespace {

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void PutArray(std::string* out, const std::vector<T>& v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("malformed batch from the leader: ", what));
}

class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  absl::Status Get(const char* field, T* v) {
    if (bytes_.size() - pos_ < sizeof(T)) {
      return Malformed(absl::StrCat("truncated at ", field, " (byte ", pos_, " of ", bytes_.size(), ")"));
    }
    std::memcpy(v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status GetArray(const char* field, int64_t n, std::vector<T>* v) {
    if (n < 0 || static_cast<uint64_t>(n) > (bytes_.size() - pos_) / sizeof(T)) {
      return Malformed(absl::StrCat("truncated in ", field, " (", n, " entries from byte ", pos_, " of ",
                                    bytes_.size(), ")"));
    }
    v->resize(n);
    if (n == 0) return absl::OkStatus();  // data() may be null: memcpy's arguments must not be
    std::memcpy(v->data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return absl::OkStatus();
  }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::string SerializeBatch(const cuda::PackedBatch& b) {
  std::string out;
  Put(&out, b.fb.num_tokens);
  Put(&out, b.fb.num_seqs);
  Put(&out, b.fb.max_seqlen);
  Put(&out, b.fb.options.top_k);
  Put(&out, static_cast<uint8_t>(b.fb.options.want_rank));
  Put(&out, static_cast<uint8_t>(b.fb.options.want_entropy));
  Put(&out, static_cast<uint8_t>(b.fb.options.want_reference));
  Put(&out, b.fb.options.num_candidates);
  Put(&out, static_cast<uint8_t>(b.fb.options.want_min_logprob));
  Put(&out, static_cast<int64_t>(b.fb.lm_head_rows.size()));
  for (const cuda::RowSpan& span : b.fb.lm_head_rows) {
    Put(&out, span.begin);
    Put(&out, span.end);
  }
  PutArray(&out, b.tokens);
  PutArray(&out, b.positions);
  PutArray(&out, b.targets);
  PutArray(&out, b.fb.cu_seqlens);
  PutArray(&out, b.candidate_ids);
  return out;
}

absl::StatusOr<cuda::PackedBatch> ParseBatch(absl::string_view bytes, int64_t max_tokens) {
  cuda::PackedBatch b;
  cuda::ForwardBatch& fb = b.fb;
  Reader in(bytes);
  uint8_t want_rank = 0, want_entropy = 0, want_reference = 0, want_min_logprob = 0;
  int64_t spans = 0;
  SCORED_RETURN_IF_ERROR(in.Get("num_tokens", &fb.num_tokens));
  SCORED_RETURN_IF_ERROR(in.Get("num_seqs", &fb.num_seqs));
  SCORED_RETURN_IF_ERROR(in.Get("max_seqlen", &fb.max_seqlen));
  SCORED_RETURN_IF_ERROR(in.Get("top_k", &fb.options.top_k));
  SCORED_RETURN_IF_ERROR(in.Get("want_rank", &want_rank));
  SCORED_RETURN_IF_ERROR(in.Get("want_entropy", &want_entropy));
  SCORED_RETURN_IF_ERROR(in.Get("want_reference", &want_reference));
  SCORED_RETURN_IF_ERROR(in.Get("num_candidates", &fb.options.num_candidates));
  SCORED_RETURN_IF_ERROR(in.Get("want_min_logprob", &want_min_logprob));
  SCORED_RETURN_IF_ERROR(in.Get("num_spans", &spans));
  if (fb.num_tokens <= 0 || fb.num_tokens > max_tokens) {
    return Malformed(absl::StrCat("num_tokens ", fb.num_tokens, " outside [1, ", max_tokens, "]"));
  }
  if (fb.num_seqs <= 0 || fb.num_seqs > fb.num_tokens) {
    return Malformed(absl::StrCat("num_seqs ", fb.num_seqs, " outside [1, ", fb.num_tokens, "]"));
  }
  if (fb.options.top_k < 0 || fb.options.top_k > kMaxTopK) {
    return Malformed(absl::StrCat("top_k ", fb.options.top_k, " outside [0, ", kMaxTopK, "]"));
  }
  if (fb.options.num_candidates < 0 || fb.options.num_candidates > kMaxCandidates) {
    return Malformed(
        absl::StrCat("num_candidates ", fb.options.num_candidates, " outside [0, ", kMaxCandidates, "]"));
  }
  if (spans < 0 || spans > fb.num_seqs) {
    return Malformed(absl::StrCat("num_spans ", spans, " outside [0, ", fb.num_seqs, "]"));
  }
  for (int64_t i = 0; i < spans; ++i) {
    cuda::RowSpan span;
    SCORED_RETURN_IF_ERROR(in.Get("a span", &span.begin));
    SCORED_RETURN_IF_ERROR(in.Get("a span", &span.end));
    if (span.begin < 0 || span.begin > span.end || span.end > fb.num_tokens) {
      return Malformed(
          absl::StrCat("span ", i, " [", span.begin, ", ", span.end, ") outside [0, ", fb.num_tokens, "]"));
    }
    fb.lm_head_rows.push_back(span);
  }
  SCORED_RETURN_IF_ERROR(in.GetArray("tokens", fb.num_tokens, &b.tokens));
  SCORED_RETURN_IF_ERROR(in.GetArray("positions", fb.num_tokens, &b.positions));
  SCORED_RETURN_IF_ERROR(in.GetArray("targets", fb.num_tokens, &b.targets));
  SCORED_RETURN_IF_ERROR(in.GetArray("cu_seqlens", int64_t{fb.num_seqs} + 1, &fb.cu_seqlens));
  SCORED_RETURN_IF_ERROR(
      in.GetArray("candidate_ids", fb.num_tokens * fb.options.num_candidates, &b.candidate_ids));
  if (in.left() != 0) return Malformed(absl::StrCat(in.left(), " bytes left over after candidate_ids"));
  int32_t longest = 0;
  for (int32_t s = 0; s < fb.num_seqs; ++s) {
    if (fb.cu_seqlens[s + 1] <= fb.cu_seqlens[s]) {
      return Malformed(absl::StrCat("cu_seqlens not increasing at sequence ", s));
    }
    longest = std::max(longest, fb.cu_seqlens[s + 1] - fb.cu_seqlens[s]);
  }
  if (fb.cu_seqlens.front() != 0 || fb.cu_seqlens.back() != fb.num_tokens) {
    return Malformed(absl::StrCat("cu_seqlens run from ", fb.cu_seqlens.front(), " to ", fb.cu_seqlens.back(),
                                  ", not 0 to num_tokens ", fb.num_tokens));
  }
  if (fb.max_seqlen != longest) {
    return Malformed(
        absl::StrCat("max_seqlen ", fb.max_seqlen, " but the longest sequence has ", longest, " tokens"));
  }
  fb.options.want_rank = want_rank != 0;
  fb.options.want_entropy = want_entropy != 0;
  fb.options.want_reference = want_reference != 0;
  fb.options.want_min_logprob = want_min_logprob != 0;
  return b;
}

}  // namespace scored::dist

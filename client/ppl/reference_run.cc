#include "client/ppl/reference_run.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ppl/stored_kld.h"
#include "engine/base/score_options.h"
#include "engine/base/status_macros.h"

namespace scored {
namespace ppl {
namespace {

int64_t NumPositions(const Plan& plan) {
  int64_t n = 0;
  for (const Window& w : plan.windows) n += w.num_scored();
  return n;
}

// Every window's num_scored * k candidate ids within one request's kMaxCandidateIds.
absl::Status CheckCandidateLimit(const Plan& plan, int32_t k, const char* flag) {
  for (size_t i = 0; i < plan.windows.size(); ++i) {
    const int64_t ids = plan.windows[i].num_scored() * k;
    if (ids > kMaxCandidateIds) {
      return absl::FailedPreconditionError(absl::StrCat(
          "window ", i, " scores ", plan.windows[i].num_scored(), " positions; at K = ", k, " that is ", ids,
          " candidate ids, more than the ", kMaxCandidateIds,
          " one Score request may name (kMaxCandidateIds): use shorter windows (--ctx) or a smaller K (",
          flag, ")"));
    }
  }
  return absl::OkStatus();
}

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.1f kB", b / 1e3);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoredReference>> StoredReference::ForSave(
    const std::string& path, int32_t top_k, const JournalIdentity& identity, const Plan& plan,
    const scored::v1::ModelInfo& info, std::FILE* note_out) {
  if (top_k < 1 || top_k > kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference_top_k must be in [1, ", kMaxTopK, "], got ", top_k));
  }
  std::unique_ptr<StoredReference> ref(new StoredReference());
  ref->path_ = path;
  ReferenceHeader& h = ref->header_;
  h.identity = identity;
  h.model_fingerprint = info.model_fingerprint();
  h.model_path = info.model_path();
  h.model_format = info.format();
  h.vocab_size = info.vocab_size();
  h.top_k = static_cast<int32_t>(std::min<int64_t>(top_k, info.vocab_size()));
  h.num_windows = static_cast<int64_t>(plan.windows.size());
  h.num_positions = NumPositions(plan);
  SCORED_RETURN_IF_ERROR(CheckCandidateLimit(plan, h.top_k, "--reference_top_k"));
  std::fprintf(note_out,
               "scored-ppl: --save_reference %s: K=%d (R's top-%d per position%s): ~%s for %lld positions in "
               "%lld windows (16 + 8 K bytes a position)\n",
               path.c_str(), h.top_k, h.top_k, h.top_k < top_k ? ", the whole vocabulary" : "",
               HumanBytes(ReferenceFileBytes(h.num_windows, h.num_positions, h.top_k)).c_str(),
               static_cast<long long>(h.num_positions), static_cast<long long>(h.num_windows));
  SCORED_ASSIGN_OR_RETURN(ref->writer_, ReferenceWriter::Open(path, h, note_out));
  return ref;
}

absl::StatusOr<std::unique_ptr<StoredReference>> StoredReference::ForCompare(
    const std::string& path, const JournalIdentity& identity, const Plan& plan,
    const scored::v1::ModelInfo& info) {
  std::unique_ptr<StoredReference> ref(new StoredReference());
  ref->path_ = path;
  SCORED_ASSIGN_OR_RETURN(ref->file_, ReferenceFile::Open(path));
  ref->header_ = ref->file_->header();
  SCORED_RETURN_IF_ERROR(ref->file_->CheckRun(identity));
  if (ref->header_.vocab_size != info.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--reference_file ", path, " holds a model of vocab_size ", ref->header_.vocab_size,
        " but the server's has ", info.vocab_size(), ": KL divergence needs the same vocabulary"));
  }
  SCORED_RETURN_IF_ERROR(CheckCandidateLimit(plan, ref->header_.top_k, "save with --reference_top_k"));
  return ref;
}

RequestOptions StoredReference::Requests() const {
  RequestOptions o;
  if (saving()) {
    o.top_k = header_.top_k;
    o.want_entropy = true;
  } else {
    o.top_k = 1;  // Q's argmax, for same top
    o.want_min_logprob = true;
    o.num_candidates = header_.top_k;
  }
  return o;
}

absl::Status StoredReference::AddCandidates(int64_t window, scored::v1::ScoreRequest* request) const {
  if (file_ == nullptr) return absl::OkStatus();
  SCORED_ASSIGN_OR_RETURN(const ReferenceWindow stored, file_->Read(window));
  request->set_num_candidates(stored.k);
  request->mutable_candidate_ids()->Assign(stored.top_ids.begin(), stored.top_ids.end());
  return absl::OkStatus();
}

std::map<int64_t, WindowScore> StoredReference::Resumed() const {
  std::map<int64_t, WindowScore> out;
  if (writer_ == nullptr) return out;
  for (const auto& [index, stored] : writer_->resumed()) {
    WindowScore score;
    score.sum_logprob = stored.sum_logprob;
    score.logprobs = stored.logprob;
    out.emplace(index, std::move(score));
  }
  return out;
}

absl::Status StoredReference::OnScored(int64_t window, WindowScore* score) {
  const int32_t n = static_cast<int32_t>(score->logprobs.size());
  if (writer_ != nullptr) {
    ReferenceWindow w;
    w.window = window;
    w.num_scored = n;
    w.k = header_.top_k;
    w.sum_logprob = score->sum_logprob;
    w.logprob = score->logprobs;
    w.entropy = std::move(score->entropy);
    w.top_ids = std::move(score->top_ids);
    w.top_logprobs = std::move(score->top_logprobs);
    score->entropy.clear();
    score->top_ids.clear();
    score->top_logprobs.clear();
    return writer_->Append(w);
  }
  SCORED_ASSIGN_OR_RETURN(const ReferenceWindow stored, file_->Read(window));
  if (stored.num_scored != n) {
    return absl::DataLossError(absl::StrCat("--reference_file ", path_, ": window ", window, " holds ",
                                            stored.num_scored, " positions, the run scores ", n));
  }
  StoredComparison c;
  SCORED_RETURN_IF_ERROR(
      CompareWithStored(stored, score->candidate_logprobs, score->min_logprobs, score->top_ids, &c));
  score->sum_ref_logprob = stored.sum_logprob;
  score->ref_logprobs = std::move(c.ref_logprobs);
  score->kld = std::move(c.kld);
  score->kld_lower = std::move(c.kld_lower);
  score->kld_upper = std::move(c.kld_upper);
  score->same_top = std::move(c.same_top);
  score->sum_tail_mass = 0.0;
  for (double m : stored.tail_mass) score->sum_tail_mass += m;
  score->candidate_logprobs.clear();
  score->candidate_logprobs.shrink_to_fit();
  score->min_logprobs.clear();
  score->top_ids.clear();
  score->top_logprobs.clear();
  return absl::OkStatus();
}

absl::Status StoredReference::Finish() {
  if (writer_ == nullptr) return absl::OkStatus();
  return writer_->Finish();
}

}  // namespace ppl
}  // namespace scored

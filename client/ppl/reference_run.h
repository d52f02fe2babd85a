// The stored-reference side of a scored-ppl run (issue 35; the file: reference_file.h, the arithmetic:
// stored_kld.h):
//   --save_reference FILE [--reference_top_k K]: the server's model is R; every request also asks for R's
//     top-K (K = min(K, vocab_size)) and entropy, and every answered window is appended to FILE.partial
//     (FILE once all are stored). An interrupted save resumes from FILE.partial: its windows are not scored
//     again, and the report (R's PPL) is the one an uninterrupted run prints.
//   --kld --reference_file FILE: the server's model is Q (no reference model needed on it); every request
//     also names the window's stored top-K ids as candidates and asks for Q's min logprob and top-1; each
//     answered window gets the --kld fields (R's logprobs and sum from the file, the KLD estimate and bounds,
//     same top) from the file's window and Q's answer.
// Both check, before anything is scored, that every window's num_scored * K ids fit one request
// (kMaxCandidateIds, FAILED_PRECONDITION naming it and what to change); comparing also checks that the file
// was saved for this run (ReferenceFile::CheckRun) and that Q's vocabulary is R's.
// Thread-safety: AddCandidates may be called from several threads at once; the rest from one thread (the
// run's window sink, serialized).
#ifndef SCORED_CLIENT_PPL_REFERENCE_RUN_H_
#define SCORED_CLIENT_PPL_REFERENCE_RUN_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/ppl/journal.h"
#include "client/ppl/plan.h"
#include "client/ppl/reference_file.h"
#include "client/ppl/scorer_client.h"
#include "scored/v1/scorer.pb.h"

namespace scored {
namespace ppl {

class StoredReference {
 public:
  // --save_reference `path` with K = top_k (clamped to the vocabulary) for the run `identity` / `plan` on the
  // model `info`; prints the file's size before the run ("K=1024: ~2.38 GB for 289,077 positions ...") on
  // `note_out`.
  static absl::StatusOr<std::unique_ptr<StoredReference>> ForSave(const std::string& path, int32_t top_k,
                                                                  const JournalIdentity& identity,
                                                                  const Plan& plan,
                                                                  const scored::v1::ModelInfo& info,
                                                                  std::FILE* note_out);
  // --reference_file `path` for the run `identity` / `plan` of the model `info` (Q).
  static absl::StatusOr<std::unique_ptr<StoredReference>> ForCompare(const std::string& path,
                                                                     const JournalIdentity& identity,
                                                                     const Plan& plan,
                                                                     const scored::v1::ModelInfo& info);

  bool saving() const { return writer_ != nullptr; }
  // What every request asks for (RequestOptions::add_candidates left to the caller: AddCandidates).
  RequestOptions Requests() const;
  // Comparing: sets request->num_candidates and candidate_ids to plan window `window`'s stored top-K ids.
  absl::Status AddCandidates(int64_t window, scored::v1::ScoreRequest* request) const;
  // The windows a resumed save already holds, as the run's WindowScores (R's logprobs and sum).
  std::map<int64_t, WindowScore> Resumed() const;
  // Window `window` answered: saving, it is appended to the file and its top-K and entropies dropped from
  // *score; comparing, *score gets the --kld fields from the file and its candidate arrays are dropped.
  absl::Status OnScored(int64_t window, WindowScore* score);
  // Saving: the trailer and the rename (every window must be stored). Comparing: nothing.
  absl::Status Finish();

  const std::string& path() const { return path_; }
  int32_t top_k() const { return header_.top_k; }
  const ReferenceHeader& header() const { return header_; }
  int64_t bytes() const { return writer_ != nullptr ? writer_->bytes() : 0; }

 private:
  StoredReference() = default;

  std::string path_;
  ReferenceHeader header_;
  std::unique_ptr<ReferenceWriter> writer_;  // saving
  std::unique_ptr<ReferenceFile> file_;      // comparing
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_REFERENCE_RUN_H_

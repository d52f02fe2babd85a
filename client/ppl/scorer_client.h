// gRPC client of the Scorer service for scored-ppl: connect with a deadline, read ModelInfo, tokenize
// server-side, and score windows pipelined over ScoreStream.
//
// Thread-safety: a ScorerClient may be used from one thread at a time; ScoreWindows calls its callback
// from the calling thread (responses are read there while a helper thread writes requests).
#ifndef SCORED_CLIENT_PPL_SCORER_CLIENT_H_
#define SCORED_CLIENT_PPL_SCORER_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ppl/windows.h"
#include "scored/v1/scorer.grpc.pb.h"

namespace scored {
namespace ppl {

struct ScorerClientOptions {
  std::string address;                                 // "host:port"
  absl::Duration connect_timeout = absl::Seconds(10);  // channel must be READY within it
  absl::Duration rpc_timeout = absl::Seconds(600);     // GetModelInfo / Tokenize deadline
  std::string bearer_token;                            // sent as "authorization: Bearer <token>" if set
  // TLS (PEM contents, not paths): used when `tls` is set. Empty tls_root_certs_pem = the system's
  // roots; tls_cert_chain_pem + tls_private_key_pem (both or neither) = client certificate for mTLS.
  bool tls = false;
  std::string tls_root_certs_pem;
  std::string tls_cert_chain_pem;
  std::string tls_private_key_pem;
};

// One window's result: the server's double sum and the per-token logprobs of its scored positions.
// With want_reference, also the reference model's per-position values (empty otherwise); a stored reference
// (client/ppl/reference_run.h) fills the same fields from its file and the kld bounds.
struct WindowScore {
  double sum_logprob = 0.0;
  std::vector<float> logprobs;  // [num_scored]
  double sum_ref_logprob = 0.0;
  std::vector<float> ref_logprobs;  // [num_scored] or empty
  std::vector<float> kld;           // [num_scored] or empty: KL(P_R || P_Q), nats
  std::vector<uint8_t> same_top;    // [num_scored] or empty: 1 when Q's and R's argmax agree
  // What RequestOptions asked for beyond that (empty otherwise).
  std::vector<float> entropy;             // [num_scored]
  std::vector<int32_t> top_ids;           // [num_scored, top_k]
  std::vector<float> top_logprobs;        // [num_scored, top_k]
  std::vector<float> candidate_logprobs;  // [num_scored, num_candidates]
  std::vector<float> min_logprobs;        // [num_scored]
  // A stored reference's KLD bounds (stored_kld.h) and the sum of R's left-out mass over the positions.
  std::vector<float> kld_lower, kld_upper;  // [num_scored] or empty
  double sum_tail_mass = 0.0;
};

// What every Score request of a run asks for beyond the logprobs; each response is checked to carry it.
struct RequestOptions {
  bool want_reference = false;    // ScoreRequest.want_reference: ref_logprob, kld, same_top
  int32_t top_k = 0;              // top_k lists of exactly top_k entries (the caller keeps it <= vocab_size)
  bool want_entropy = false;      // entropy
  bool want_min_logprob = false;  // min_logprob
  // Candidate ids per scored position: `add_candidates(k, request)` sets num_candidates (this many) and
  // candidate_ids of the request of windows[k] (on the writer thread; an error ends the call with it).
  int32_t num_candidates = 0;
  std::function<absl::Status(int64_t, scored::v1::ScoreRequest*)> add_candidates;
};

// The windows of one run shared by several ScoreStreams, one per server (scored-ppl --server a,b,...): a
// stream takes the next unsent window whenever it has a free slot (so each server keeps `inflight` windows
// outstanding and the windows go to whichever server has fewest outstanding, i.e. a free slot, first); the
// unanswered windows of a stream whose server failed go back to the front of the queue for the others.
// Thread-safety: every method is thread-safe.
class WindowPool {
 public:
  // Windows 0 .. num_windows - 1, all unsent; `on_result` (stream, index, score) runs once per window,
  // serialized (never two at once), on the thread of the stream that answered it.
  using ResultFn = std::function<void(int stream, int64_t index, const WindowScore& score)>;
  WindowPool(int64_t num_windows, ResultFn on_result);

  // Blocks until a window is free (its index), or until every window is answered, the pool failed or
  // StopStream(stream) was called (-1).
  int64_t Take(int stream);
  // Window `index` was answered by `stream` (a repeated answer is ignored).
  void Done(int stream, int64_t index, const WindowScore& score);
  // Puts taken but unanswered windows back, first in line.
  void Requeue(const std::vector<int64_t>& indices);
  // Wakes stream `stream`'s Take with -1 from now on.
  void StopStream(int stream);
  // Ends the run: every Take returns -1; status() returns `status` (the first one given).
  void Fail(const absl::Status& status);
  absl::Status status() const;
  int64_t remaining() const;

 private:
  struct TakeArgs {
    const WindowPool* pool;
    int stream;
  };
  static bool TakeReady(TakeArgs* args) ABSL_NO_THREAD_SAFETY_ANALYSIS;  // under mu_

  const ResultFn on_result_;
  mutable absl::Mutex mu_;
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  int64_t remaining_ ABSL_GUARDED_BY(mu_);
  std::set<int> stopped_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Mutex result_mu_;  // serializes on_result_
};

// Whether a multi-server run should move a failed stream's windows to the other servers: the server is gone,
// draining or unreachable (UNAVAILABLE), or the stream was cut (CANCELLED / DEADLINE_EXCEEDED / ABORTED by
// the transport); any other error (a window the server refuses) fails the run as with one server.
bool IsServerLost(const absl::Status& status);

class ScorerClient {
 public:
  // UNAVAILABLE "cannot connect to ADDR within Ns" if the channel is not READY by the deadline.
  static absl::StatusOr<std::unique_ptr<ScorerClient>> Connect(const ScorerClientOptions& options);

  absl::StatusOr<scored::v1::ModelInfo> GetModelInfo();

  // Tokenizes `text` without BOS/EOS (add_bos = false). The whole text goes in one request; the
  // client accepts responses of any size (the server's own receive limit applies to the request).
  absl::StatusOr<TokenStream> Tokenize(const std::string& text, bool want_byte_lengths);

  // Scores every window over one ScoreStream with at most `inflight` requests outstanding; requests
  // carry request_id = window index and the window's score_from. `on_result(index, score)` runs once per
  // window, in completion order, on the calling thread. The first failed request (its Error), a response
  // whose size disagrees with the window, or a stream failure ends the call with that status (the
  // message names the window index). `request` says what else the requests ask for; a response without it
  // (e.g. num_scored ref_logprob / kld / same_top values under want_reference) is then INTERNAL.
  absl::Status ScoreWindows(const std::vector<Window>& windows, int inflight, const RequestOptions& request,
                            const std::function<void(int64_t, const WindowScore&)>& on_result);
  absl::Status ScoreWindows(const std::vector<Window>& windows, int inflight, bool want_reference,
                            const std::function<void(int64_t, const WindowScore&)>& on_result) {
    RequestOptions request;
    request.want_reference = want_reference;
    return ScoreWindows(windows, inflight, request, on_result);
  }

  // One stream of a multi-server run: takes windows of `pool` (as stream `stream`; indices into `windows`,
  // sent as request_id) with at most `inflight` outstanding until the pool has none left, and hands each
  // answer to pool->Done. Returns OK when the pool ran out; else the stream's failure, with the windows it
  // took but did not get answered in *unanswered (the caller requeues them or fails the run). A window's own
  // error response other than UNAVAILABLE (the server refused it) is returned the same way; the caller
  // decides (IsServerLost).
  absl::Status ScoreShared(WindowPool* pool, int stream, const std::vector<Window>& windows, int inflight,
                           const RequestOptions& request, std::vector<int64_t>* unanswered);

 private:
  ScorerClient(ScorerClientOptions options, std::unique_ptr<scored::v1::Scorer::Stub> stub);
  void Prepare(grpc::ClientContext* context, bool with_deadline) const;

  ScorerClientOptions options_;
  std::unique_ptr<scored::v1::Scorer::Stub> stub_;
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_SCORER_CLIENT_H_

// gRPC client of the Scorer service for scored-ppl: connect with a deadline, read ModelInfo, tokenize
// server-side, and score windows pipelined over ScoreStream.
//
// Thread-safety: a ScorerClient may be used from one thread at a time; ScoreWindows calls its callback
// from the calling thread (responses are read there while a helper thread writes requests).
#ifndef SCORED_CLIENT_PPL_SCORER_CLIENT_H_
#define SCORED_CLIENT_PPL_SCORER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
// With want_reference, also the reference model's per-position values (empty otherwise).
struct WindowScore {
  double sum_logprob = 0.0;
  std::vector<float> logprobs;  // [num_scored]
  double sum_ref_logprob = 0.0;
  std::vector<float> ref_logprobs;  // [num_scored] or empty
  std::vector<float> kld;           // [num_scored] or empty: KL(P_R || P_Q), nats
  std::vector<uint8_t> same_top;    // [num_scored] or empty: 1 when Q's and R's argmax agree
};

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
  // message names the window index). want_reference sets ScoreRequest.want_reference; a response without
  // num_scored ref_logprob / kld / same_top values is then INTERNAL.
  absl::Status ScoreWindows(const std::vector<Window>& windows, int inflight, bool want_reference,
                            const std::function<void(int64_t, const WindowScore&)>& on_result);

 private:
  ScorerClient(ScorerClientOptions options, std::unique_ptr<scored::v1::Scorer::Stub> stub);
  void Prepare(grpc::ClientContext* context, bool with_deadline) const;

  ScorerClientOptions options_;
  std::unique_ptr<scored::v1::Scorer::Stub> stub_;
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_SCORER_CLIENT_H_

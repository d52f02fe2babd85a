// The scored.v1.Scorer gRPC service on the callback API (one reactor per call; no completion-queue
// state machine).
//
//   Score         validate -> batcher -> response. A cancelled call's queued work is dropped; the
//                 call's deadline is the batcher deadline.
//   ScoreStream   bidi: reads and writes are pipelined; up to `stream_window` requests of a stream
//                 are in flight or answered-but-unwritten (beyond that the stream stops reading until
//                 one is written, so a client that never reads cannot grow the server's memory). Responses
//                 go out in completion order with their request_id; a failed request yields a response
//                 with `error` set and the stream goes on.
//                 Memory budget: each request is charged before it is queued (its ids and a bound of its
//                 response), streams together up to 3/4 of the budget, one stream up to 1/8 of that
//                 beyond its first request. When that is spent, a stream with
//                 responses of its own in flight or unwritten keeps the request it read and stops reading
//                 (back-pressure) until they are written; a stream with none answers the request with a
//                 RESOURCE_EXHAUSTED `error` and goes on. Every request read gets a response.
//   Tokenize      the model's tokenizer, no engine involved.
//
// Text (Tokenize, and `text` input of Score and ScoreStream; README "Text limits"): a text over
// max_text_bytes is OUT_OF_RANGE before any tokenization; otherwise it is tokenized on the TokenizePool,
// never on a gRPC thread, so token-id requests are not delayed by it (a full pool queue: RESOURCE_EXHAUSTED).
// A Score text stops being tokenized once it passes max_seq_len tokens (OUT_OF_RANGE, the rest of the text
// untouched). A tokenization stops part-way when its call is cancelled (CANCELLED), its deadline passes
// (DEADLINE_EXCEEDED) or the server's shutdown grace ends (UNAVAILABLE); each stop counts in
// scored_tokenizations_stopped_total.
//   GetModelInfo  engine->info() plus the tokenizer's facts and the server version.
//
// Score, ScoreStream and Tokenize receive the request's raw bytes and parse them here, so that bytes which
// are not the method's request message (invalid UTF-8 in a string field, a truncated or malformed
// protobuf) are answered INVALID_ARGUMENT naming the problem: as the RPC status for Score and Tokenize, as
// a response with `error` set (and the request_id, when field 1 could be read) inside ScoreStream, which
// goes on. gRPC's generated handlers would instead answer a unary call with an empty UNIMPLEMENTED and
// take a stream message that fails to parse as the client's half-close, silently dropping the rest.
//
// Files: the service (scorer_service.cc), the unary reactors (score_unary.cc), the stream's reactor
// (score_stream.cc), the raw bytes (wire_scan.h), admission (admission.h).
//
// Thread-safety: gRPC calls the service from its own threads; the batcher completes requests from its
// worker thread. Every reactor guards its state with its own mutex and calls gRPC operations outside
// of it; a reactor is deleted by gRPC's OnDone, which can only follow Finish.
#ifndef SCORED_SERVER_SCORER_SERVICE_H_
#define SCORED_SERVER_SCORER_SERVICE_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/scorer.grpc.pb.h"
#include "server/admission.h"

namespace scored {

class StreamReactor;

// The raw-bytes methods plus the generated typed GetModelInfo (its empty request cannot fail to parse).
using ScorerServiceBase = v1::Scorer::WithRawCallbackMethod_Score<
    v1::Scorer::WithRawCallbackMethod_ScoreStream<v1::Scorer::WithRawCallbackMethod_Tokenize<
        v1::Scorer::WithCallbackMethod_GetModelInfo<v1::Scorer::Service>>>>;

class ScorerService final : public ScorerServiceBase {
 public:
  struct Config {
    // Not owned, required, outlives the service: the way in that every call passes first (the token, the
    // engine's health, the connection cap, the text checks and tokenization, the memory budget; see
    // server/admission.h), and through it the batcher, tokenizer, metrics and limits. Score, ScoreStream and
    // Tokenize take a connection slot for their duration and charge the budget (see the ScoreStream note
    // above).
    const ScoreGate* gate = nullptr;
    int stream_window = 32;
    v1::ModelInfo model_info;  // returned by GetModelInfo
  };

  explicit ScorerService(Config config);

  // `request` holds a serialized ScoreRequest, `response` receives a serialized ScoreResponse.
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  // Reads serialized ScoreRequests, writes serialized ScoreResponses.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ScoreStream(
      grpc::CallbackServerContext* context) override;
  // `request` holds a serialized TokenizeRequest, `response` receives a serialized TokenizeResponse.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

  // Server shutdown: every open ScoreStream stops reading, answers what it has in flight and then
  // finishes (UNAVAILABLE if the client had not half-closed). Called before grpc::Server::Shutdown()
  // so that idle streams do not hold the shutdown until its grace deadline.
  void BeginShutdown();

  const Config& config() const { return config_; }

 private:
  friend class StreamReactor;
  void Register(StreamReactor* stream);
  void Unregister(StreamReactor* stream);

  const Config config_;
  absl::Mutex streams_mu_;
  std::set<StreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool shutting_down_ ABSL_GUARDED_BY(streams_mu_) = false;
};

}  // namespace scored

#endif  // SCORED_SERVER_SCORER_SERVICE_H_

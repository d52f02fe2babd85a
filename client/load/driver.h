// What the drivers of one scored-load run share (internal to client/load/): the run's options, request
// streams and tickets (SharedRun), one client's tallies (ClientStats), and the request and response helpers
// of the closed loop (closed_loop.h), the open loop (open_loop.h) and the stream clients (stream_driver.h).
// RunLoad (load_runner.h) creates them, starts the drivers and merges their tallies.
#ifndef SCORED_CLIENT_LOAD_DRIVER_H_
#define SCORED_CLIENT_LOAD_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/load/length_mix.h"
#include "client/load/load_runner.h"
#include "client/load/request_gen.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"
#include "scored/v1/scorer.pb.h"

namespace scored {
namespace load {

inline absl::StatusCode FromGrpcCode(grpc::StatusCode code) { return static_cast<absl::StatusCode>(code); }

// What all clients of one run share. `options` must outlive it.
// Thread-safety: thread-safe (read-only except for the atomic ticket counter).
class SharedRun {
 public:
  // The run started at `start`: with a duration, requests are sent until start + duration.
  SharedRun(const LoadOptions& options, int64_t vocab_size, int32_t bos_id, absl::Time start);

  // True when the caller may send one more request: not stopped, not past the duration, and in
  // request-count runs a ticket was left (taken).
  bool TakeTicket();

  // Client `client`'s request stream, request kinds and cancel-delay generator (each seeded from
  // (seed, client): a client's sequence is reproducible).
  RequestGenerator Generator(int client) const;
  KindSampler Kinds(int client) const;
  std::mt19937_64 DelayRng(int client) const;

  // Sets `deadline` (none when infinite) and the bearer token on a call's context.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;

  int64_t vocab_size() const { return vocab_size_; }
  const LoadOptions& options() const { return options_; }
  absl::Time send_until() const { return send_until_; }  // InfiniteFuture in request-count runs

 private:
  const LoadOptions& options_;
  const int64_t vocab_size_;
  const int32_t bos_id_;
  const LengthSampler sampler_;
  const absl::Time send_until_;
  std::atomic<int64_t> tickets_left_;
};

// One client's tallies (a unary client, a stream client, or the whole open loop); merged into the
// LoadResult after every client finished. Thread-safety: none; the driver serializes Add.
struct ClientStats {
  int64_t requests = 0;
  int64_t requests_ok = 0;
  int64_t cancelled = 0;
  int64_t refused = 0;
  int64_t unexpected = 0;
  std::string first_unexpected;
  std::map<RequestKind, int64_t> kinds;
  int64_t tokens_ok = 0;
  std::vector<double> latencies_ms;  // OK requests
  std::map<absl::StatusCode, int64_t> codes;
  std::map<absl::StatusCode, std::string> first_message;
  std::vector<RequestRecord> records;
  bool stopped_unavailable = false;
  absl::Duration last_ok_latency = absl::Milliseconds(2);  // bounds the delay before a cancel

  // Counts one request; `record.outcome` is set here from its kind and code (stream_cancelled: its stream
  // was cancelled by the client before it was answered). `message`: the code's message (first per code
  // kept). keep_record: also appended to `records`.
  void Add(RequestRecord record, absl::string_view message, bool keep_record, bool stream_cancelled = false);
};

// The shape every OK response must have for a request of n ids and default score_from: INTERNAL naming
// the mismatch otherwise (first_scored 1, num_scored == logprob and greedy sizes == n - 1, logprobs finite
// and <= 0).
absl::Status CheckResponse(const scored::v1::ScoreResponse& response, int64_t n);

// A ScoreRequest of `kind` from the ids drawn for it (kMalformedRawBytes is never built as a message).
scored::v1::ScoreRequest BuildRequest(RequestKind kind, uint64_t id, const std::vector<int32_t>& ids,
                                      int64_t vocab_size);

// Serialized messages as gRPC buffers (one slice); ParseBuffer: false when `buffer` does not parse.
grpc::ByteBuffer ToBuffer(const std::string& bytes);
bool ParseBuffer(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message);

// A delay before cancelling: uniform in [0, last OK latency], so the cancel likely lands mid-flight.
absl::Duration CancelDelay(absl::Duration last_ok_latency, std::mt19937_64* rng);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_DRIVER_H_

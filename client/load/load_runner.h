// scored-load's engine: drives a `scored` server with concurrent Score calls (unary) or pipelined
// ScoreStream streams and measures throughput, latency and errors by gRPC status code.
//
//   scored::load::LoadOptions o;
//   o.server = "127.0.0.1:50051";
//   o.concurrency = 64;
//   o.duration = absl::Seconds(60);
//   o.lengths = *scored::load::ParseLengthMix("64:0.5,512:0.4,2048:0.1");
//   absl::StatusOr<scored::load::LoadResult> r = scored::load::RunLoad(o);
//
// Requests: each has a length drawn from `lengths`; ids are uniform in [0, vocab_size) (the server's
// GetModelInfo), the first id is BOS (a random id when the model has none). Client i draws from its own
// std::mt19937_64 seeded from (seed, i), so a run's request sequence per client is reproducible.
//
// Unary mode: `concurrency` threads, each with one blocking Score call outstanding at a time.
// Stream mode: `concurrency` ScoreStream calls, each keeping up to `inflight` requests outstanding
// (a writer thread per stream; responses are matched by request_id).
//
// Request kinds (--cancel_fraction, --malformed_fraction; see KindSampler in request_gen.h):
//   - cancelled: unary: the call is started asynchronously and ClientContext::TryCancel is called from
//     the client's thread after a delay drawn uniformly from [0, that client's last OK latency] (so it
//     is likely mid-flight); CANCELLED is expected, OK (it finished first) counts as ok. Stream: one
//     stream cannot cancel one request, so a cancel-kind request is written and, after such a delay,
//     the whole stream is cancelled (TryCancel); every request of that stream still unanswered then
//     counts as cancelled (expected), and the client opens a new stream and goes on. Stream mode
//     therefore cancels more requests than the fraction (about inflight times as many).
//   - malformed: one id == vocab_size, an empty token list, top_k 1025, or a message whose `text` holds
//     invalid UTF-8 (raw bytes sent through a generic call, so it reaches the server's parser);
//     INVALID_ARGUMENT is expected (an error response on a stream).
// Each outcome is one of ok, cancelled (expected), refused (INVALID_ARGUMENT for a malformed request,
// expected) or unexpected (any other code, a malformed request answered OK, a normal request failing).
//
// Open loop (`rate` > 0, unary mode): request i is started at start + i / rate on a fixed schedule, through
// the asynchronous stub, whether or not earlier ones have finished (no client count: `concurrency` is not
// used), until `duration` has passed or `num_requests` were started. A request's latency runs from its
// scheduled start, not from when it was actually sent, so a client that falls behind its schedule (or a
// server whose queue grows) shows up in the latencies rather than hiding as fewer requests (coordinated
// omission). The result reports the rate achieved: (started - 1) / (last start - first start), with the
// largest lag of an actual start behind its scheduled time. Open-loop runs send normal requests only
// (cancel_fraction and malformed_fraction must be 0).
//
// Graceful on server shutdown: an UNAVAILABLE outcome (the server is draining, or the connection is
// refused) is counted, and with `stop_on_unavailable` that client sends nothing more; its requests
// still in flight are awaited. The run ends when every client has finished.
//
// Every OK response is checked for shape: first_scored == 1, num_scored == n - 1 == logprob size, each
// logprob finite and <= 0. A response that fails the check counts as INTERNAL (client-side).
//
// Thread-safety: RunLoad may be called from several threads at once (each call owns its clients);
// `stop` may be set from any thread.
#ifndef SCORED_CLIENT_LOAD_LOAD_RUNNER_H_
#define SCORED_CLIENT_LOAD_LOAD_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/connect/security.h"
#include "client/load/latency.h"
#include "client/load/length_mix.h"
#include "client/load/request_gen.h"

namespace scored {
namespace load {

enum class Mode { kUnary, kStream };

// "unary" | "stream".
absl::StatusOr<Mode> ParseMode(absl::string_view text);
const char* ModeName(Mode mode);

struct LoadOptions {
  // host:port, or several servers serving the same model: "host:port,host:port" or "dns:///name:port"
  // (client/connect/servers.h). Each is connected and its GetModelInfo read first; they must agree
  // (CheckSameModel, FAILED_PRECONDITION naming the server and field). Closed loop: client (or stream) c
  // talks to server c mod the number of servers; open loop: each request goes to the server with the fewest
  // requests outstanding (round-robin among equals).
  std::string server = "127.0.0.1:50051";
  Mode mode = Mode::kUnary;
  int concurrency = 1;  // unary clients, or ScoreStream streams; >= 1
  int inflight = 8;     // stream mode: outstanding requests per stream; >= 1
  // Exactly one of: run for `duration` (then stop sending and await what is in flight), or send
  // `num_requests` in total (shared by all clients).
  absl::Duration duration = absl::ZeroDuration();
  int64_t num_requests = 0;
  std::vector<LengthBucket> lengths;  // required; every length must be <= the server's max_seq_len
  // The lengths are scored-load's default mix: a length over the server's max_seq_len / max_batch_tokens is
  // lowered to that limit (said on stderr) instead of refused, so the defaults run against any model.
  bool fit_lengths = false;
  uint64_t seed = 0;
  // Per-request deadline (unary); zero = none. A stream cannot carry per-request deadlines, so stream
  // mode sets one deadline on each stream: its start + duration + deadline (with num_requests: its
  // start + deadline, a budget for the whole stream).
  absl::Duration deadline = absl::ZeroDuration();
  // Gives up (UNAVAILABLE) when the server does not accept the connection within this.
  absl::Duration connect_timeout = absl::Seconds(10);
  // TLS / mTLS and the bearer token, as client/connect/security.h loads them from the shared flags.
  client::ClientSecurity security;
  // > 0: open loop at this many requests per second (above; unary mode only).
  double rate = 0.0;
  bool stop_on_unavailable = true;
  // Keep one RequestRecord per request in LoadResult::records (tests use it to check ordering
  // around a shutdown).
  bool record_requests = false;
  // When non-null and set to true (from any thread), clients stop sending; in-flight requests are
  // awaited.
  const std::atomic<bool>* stop = nullptr;
  // Fractions of requests cancelled by the client and malformed on purpose; each in [0, 1], sum <= 1.
  double cancel_fraction = 0.0;
  double malformed_fraction = 0.0;
};

// Checks the options (INVALID_ARGUMENT naming the field).
absl::Status ValidateLoadOptions(const LoadOptions& options);

// How a request's result counts.
enum class Outcome { kOk, kCancelled, kRefused, kUnexpected };

// One request's outcome.
struct RequestRecord {
  int client = 0;  // client (unary) or stream index
  absl::Time start;
  absl::Time end;
  int64_t tokens = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  RequestKind kind = RequestKind::kNormal;
  Outcome outcome = Outcome::kOk;
};

struct LoadResult {
  // What ran. `server` as given; `servers` the addresses it named, `requests_per_server` the requests sent
  // to each (same order).
  std::string server;
  std::vector<std::string> servers;
  std::vector<int64_t> requests_per_server;
  Mode mode = Mode::kUnary;
  int concurrency = 0;
  int inflight = 0;
  std::string lengths;  // FormatLengthMix
  uint64_t seed = 0;
  double cancel_fraction = 0.0;
  double malformed_fraction = 0.0;
  // From GetModelInfo.
  std::string model_architecture;
  std::string model_format;
  std::string backend;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;

  // Open loop: the rate asked for (0 = closed loop), the rate achieved and the largest lag of an actual
  // start behind its schedule; the most requests outstanding at once.
  double rate = 0.0;
  double rate_achieved = 0.0;
  double schedule_lag_max_ms = 0.0;
  int64_t max_outstanding = 0;

  // Measured. `wall` runs from the first request to the last outcome.
  absl::Duration wall = absl::ZeroDuration();
  int64_t requests = 0;     // every request sent (or attempted)
  int64_t requests_ok = 0;  // outcome ok: OK and well-formed, of a normal or cancel-kind request
  // Outcomes: ok == requests_ok; ok + cancelled + refused + unexpected == requests.
  int64_t cancelled = 0;                      // CANCELLED after the client cancelled it (expected)
  int64_t refused = 0;                        // INVALID_ARGUMENT for a malformed request (expected)
  int64_t unexpected = 0;                     // anything else
  std::string first_unexpected;               // "kind: CODE: message" of the first unexpected outcome seen
  std::map<RequestKind, int64_t> kinds;       // requests sent per kind
  int64_t tokens_ok = 0;                      // ids sent in OK requests
  double requests_per_s = 0.0;                // requests_ok / wall
  double tokens_per_s = 0.0;                  // tokens_ok / wall
  LatencySummary latency_ok;                  // OK requests only: send (open loop: scheduled start) to
                                              // response, milliseconds
  std::map<absl::StatusCode, int64_t> codes;  // every outcome, OK included
  std::map<absl::StatusCode, std::string> first_message;  // first message seen per non-OK code
  int clients_finished = 0;             // clients that returned (== concurrency unless RunLoad failed)
  int clients_stopped_unavailable = 0;  // clients that stopped early on UNAVAILABLE
  std::vector<RequestRecord> records;   // only with record_requests; in completion order per client

  int64_t errors() const { return requests - requests_ok; }
  int64_t count(absl::StatusCode code) const {
    auto it = codes.find(code);
    return it == codes.end() ? 0 : it->second;
  }
};

// Connects (UNAVAILABLE after connect_timeout), reads GetModelInfo, validates the mix against the
// server's limits (INVALID_ARGUMENT naming the length and the limit), runs the load and returns the
// result. Request failures are results, not errors: the status is non-OK only when the run could not
// start (bad options, no connection, GetModelInfo failed).
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_LOAD_RUNNER_H_

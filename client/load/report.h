// scored-load's report: a plain-text table for people and a JSON object for scripts.
#ifndef SCORED_CLIENT_LOAD_REPORT_H_
#define SCORED_CLIENT_LOAD_REPORT_H_

#include <string>

#include "client/load/load_runner.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace load {

// Multi-line table: what ran, requests and tokens per second, outcomes (ok, cancelled, refused,
// unexpected; with the first unexpected one), requests per kind when a fraction is set, latency
// percentiles (OK requests, ms), and one line per gRPC status code with the first message seen for each
// error code.
std::string FormatTable(const LoadResult& result);

// JSON object:
//   {"server", "mode", "concurrency", "inflight", "lengths", "seed",
//    "model": {"architecture", "format", "backend", "vocab_size", "max_seq_len"},
//    "wall_s", "requests", "requests_ok", "errors" (requests - requests_ok),
//    "cancel_fraction", "malformed_fraction",
//    "outcomes": {"ok", "cancelled", "refused", "unexpected"}, "unexpected", "first_unexpected",
//    "kinds": {"normal": n, "cancel": n, "oov": n, "empty": n, "top_k": n, "raw_bytes": n},  // sent
//    "tokens_ok", "requests_per_s", "tokens_per_s",
//    "latency_ms": {"count", "mean", "min", "p50", "p90", "p99", "max"},
//    "codes": {"OK": n, "UNAVAILABLE": m, ...},            // absl::StatusCodeToString names
//    "first_error": {"UNAVAILABLE": "message", ...},
//    "clients_finished", "clients_stopped_unavailable"}
// Per-request records are not included.
nlohmann::json ToJson(const LoadResult& result);

}  // namespace load
}  // namespace scored

#endif  // SCORED_CLIENT_LOAD_REPORT_H_

#include "client/load/report.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace scored {
namespace load {

std::string FormatTable(const LoadResult& r) {
  std::string out;
  const std::string shape =
      r.rate > 0.0
          ? absl::StrFormat("open loop at %g req/s", r.rate)
          : absl::StrCat(r.concurrency, r.mode == Mode::kUnary ? " clients" : " streams",
                         r.mode == Mode::kStream ? absl::StrCat(" x ", r.inflight, " in flight") : "");
  absl::StrAppendFormat(&out, "scored-load  %s  %s, %s, lengths %s, seed %d\n", r.server, ModeName(r.mode),
                        shape, r.lengths, r.seed);
  absl::StrAppendFormat(&out, "model        %s %s (%s), vocab %d, max_seq_len %d\n", r.model_architecture,
                        r.model_format, r.backend, r.vocab_size, r.max_seq_len);
  if (r.servers.size() > 1) {
    absl::StrAppend(&out, "servers     ");
    for (size_t i = 0; i < r.servers.size(); ++i) {
      absl::StrAppendFormat(&out, "%s %s %d requests", i == 0 ? "" : ",", r.servers[i],
                            i < r.requests_per_server.size() ? r.requests_per_server[i] : 0);
    }
    absl::StrAppend(&out, "\n");
  }
  if (r.rate > 0.0) {
    absl::StrAppendFormat(
        &out,
        "open loop    %.2f req/s asked, %.2f achieved (start lag max %.2f ms, %d outstanding "
        "max); latency from the scheduled start\n",
        r.rate, r.rate_achieved, r.schedule_lag_max_ms, r.max_outstanding);
  }
  absl::StrAppendFormat(&out, "wall         %.2f s\n", absl::ToDoubleSeconds(r.wall));
  absl::StrAppendFormat(&out, "requests     %d sent, %d ok, %d failed  %.1f req/s\n", r.requests,
                        r.requests_ok, r.errors(), r.requests_per_s);
  absl::StrAppendFormat(&out, "outcomes     ok %d, cancelled %d, refused %d (expected), unexpected %d\n",
                        r.requests_ok, r.cancelled, r.refused, r.unexpected);
  if (r.cancel_fraction > 0.0 || r.malformed_fraction > 0.0) {
    absl::StrAppendFormat(&out, "kinds        cancel fraction %g, malformed fraction %g:", r.cancel_fraction,
                          r.malformed_fraction);
    for (const auto& [kind, count] : r.kinds)
      absl::StrAppendFormat(&out, " %s %d", RequestKindName(kind), count);
    absl::StrAppend(&out, "\n");
  }
  if (r.unexpected > 0) absl::StrAppend(&out, "unexpected   first: ", r.first_unexpected, "\n");
  absl::StrAppendFormat(&out, "tokens       %d ok  %.0f tok/s\n", r.tokens_ok, r.tokens_per_s);
  const LatencySummary& l = r.latency_ok;
  absl::StrAppendFormat(&out, "latency ms   p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  (mean %.2f, %d ok)\n",
                        l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms, l.mean_ms, l.count);
  absl::StrAppendFormat(&out, "clients      %d finished, %d stopped on UNAVAILABLE\n", r.clients_finished,
                        r.clients_stopped_unavailable);
  for (const auto& [code, count] : r.codes) {
    absl::StrAppendFormat(&out, "status       %-20s %d", absl::StatusCodeToString(code), count);
    auto it = r.first_message.find(code);
    if (it != r.first_message.end()) absl::StrAppend(&out, "  first: ", it->second);
    absl::StrAppend(&out, "\n");
  }
  return out;
}

nlohmann::json ToJson(const LoadResult& r) {
  nlohmann::json j;
  j["server"] = r.server;
  j["servers"] = r.servers;
  j["requests_per_server"] = r.requests_per_server;
  j["mode"] = ModeName(r.mode);
  j["concurrency"] = r.concurrency;
  j["inflight"] = r.inflight;
  j["lengths"] = r.lengths;
  j["seed"] = r.seed;
  j["model"] = {{"architecture", r.model_architecture},
                {"format", r.model_format},
                {"backend", r.backend},
                {"vocab_size", r.vocab_size},
                {"max_seq_len", r.max_seq_len}};
  if (r.rate > 0.0) {
    j["open_loop"] = {{"rate", r.rate},
                      {"rate_achieved", r.rate_achieved},
                      {"schedule_lag_max_ms", r.schedule_lag_max_ms},
                      {"max_outstanding", r.max_outstanding}};
  }
  j["wall_s"] = absl::ToDoubleSeconds(r.wall);
  j["requests"] = r.requests;
  j["requests_ok"] = r.requests_ok;
  j["errors"] = r.errors();
  j["cancel_fraction"] = r.cancel_fraction;
  j["malformed_fraction"] = r.malformed_fraction;
  j["outcomes"] = {{"ok", r.requests_ok},
                   {"cancelled", r.cancelled},
                   {"refused", r.refused},
                   {"unexpected", r.unexpected}};
  j["unexpected"] = r.unexpected;
  j["first_unexpected"] = r.first_unexpected;
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [kind, count] : r.kinds) kinds[RequestKindName(kind)] = count;
  j["kinds"] = kinds;
  j["tokens_ok"] = r.tokens_ok;
  j["requests_per_s"] = r.requests_per_s;
  j["tokens_per_s"] = r.tokens_per_s;
  const LatencySummary& l = r.latency_ok;
  j["latency_ms"] = {{"count", l.count}, {"mean", l.mean_ms}, {"min", l.min_ms}, {"p50", l.p50_ms},
                     {"p90", l.p90_ms},  {"p99", l.p99_ms},   {"max", l.max_ms}};
  nlohmann::json codes = nlohmann::json::object();
  for (const auto& [code, count] : r.codes) codes[absl::StatusCodeToString(code)] = count;
  j["codes"] = codes;
  nlohmann::json first = nlohmann::json::object();
  for (const auto& [code, message] : r.first_message) first[absl::StatusCodeToString(code)] = message;
  j["first_error"] = first;
  j["clients_finished"] = r.clients_finished;
  j["clients_stopped_unavailable"] = r.clients_stopped_unavailable;
  return j;
}

}  // namespace load
}  // namespace scored

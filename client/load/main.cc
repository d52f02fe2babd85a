// scored-load: a load generator for a `scored` server.
//
//   scored-load --server 127.0.0.1:50051 --mode unary --concurrency 64 --duration 60
//               --lengths 64:0.5,512:0.4,2048:0.1 --json load.json
//
// Prints a table (throughput, latency percentiles, outcomes by gRPC status code) to stdout and, with
// --json FILE, the same as JSON. With --cancel_fraction F a fraction of requests is cancelled by the
// client (CANCELLED expected); with --malformed_fraction F a fraction is malformed on purpose
// (INVALID_ARGUMENT expected): see load_runner.h. Exit status: 0 when no outcome was unexpected (with both
// fractions 0: every request succeeded), 3 when some were (the report is still printed), 1 when the run
// could not start, 2 on bad flags. With --rate R the load is open loop (load_runner.h): R requests per second
// on a fixed schedule, latencies from the scheduled starts. TLS and token flags are scored-ppl's.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "cli/flags_help.h"
#include "client/connect/security.h"
#include "client/load/length_mix.h"
#include "client/load/load_runner.h"
#include "client/load/report.h"

ABSL_FLAG(
    std::string, server, "127.0.0.1:50051",
    "scored address host:port; several servers serving the same model: a comma list or dns:///NAME:PORT "
    "(every address NAME resolves to); clients are spread round-robin over them, open loop sends each "
    "request to the one with the fewest outstanding");
ABSL_FLAG(std::string, mode, "unary", "unary (one Score call at a time per client) | stream (ScoreStream)");
ABSL_FLAG(int32_t, concurrency, 8, "concurrent unary clients, or ScoreStream streams");
ABSL_FLAG(int32_t, inflight, 8, "stream mode: requests kept outstanding per stream");
ABSL_FLAG(double, duration, 0.0, "seconds to send requests (then in-flight ones are awaited); or --requests");
ABSL_FLAG(int64_t, requests, 0, "total requests to send, shared by all clients; or --duration");
constexpr char kDefaultLengths[] = "64:0.5,512:0.4,2048:0.1";
ABSL_FLAG(
    std::string, lengths, kDefaultLengths,
    "request lengths in tokens with relative weights, TOKENS:WEIGHT,...; ids are random in "
    "[0, vocab) with BOS first (the default mix is fitted to the server's max_seq_len / max_batch_tokens; "
    "a given one must fit)");
ABSL_FLAG(uint64_t, seed, 0, "random seed of the request contents and lengths");
ABSL_FLAG(int64_t, deadline_ms, 0,
          "per-request deadline in ms (0 = none); stream mode: per stream, on top of --duration");
ABSL_FLAG(double, cancel_fraction, 0.0,
          "fraction of requests the client cancels shortly after sending (unary: TryCancel after a delay "
          "up to the last OK latency; stream: the whole stream is cancelled after such a request is sent, "
          "its unanswered requests count as cancelled, and a new stream is opened)");
ABSL_FLAG(double, malformed_fraction, 0.0,
          "fraction of requests malformed on purpose, which the server must refuse with INVALID_ARGUMENT: "
          "an out-of-vocabulary id, an empty token list, top_k 1025, or raw bytes with invalid UTF-8 text");
ABSL_FLAG(std::string, json, "", "also write the report as JSON to this file");
ABSL_FLAG(double, connect_timeout_s, 10.0, "seconds to wait for the server to accept the connection");
// --auth_token, --auth_token_file, --tls_ca, --tls_cert, --tls_key: client/connect/security.h (the same flags
// as scored-ppl's).
ABSL_FLAG(double, rate, 0.0,
          "open loop: start this many requests per second on a fixed schedule whatever the completions "
          "(unary mode; --concurrency unused), latency measured from each request's scheduled start; the "
          "report gives the rate achieved (0 = closed loop: --concurrency clients)");
ABSL_FLAG(bool, stop_on_unavailable, true,
          "a client that gets UNAVAILABLE (server draining or gone) stops sending");

namespace {

constexpr char kUsage[] =
    "scored-load --server host:port [--mode unary|stream] [--concurrency N] [--inflight M]\n"
    "            (--duration S | --requests N) [--lengths 64:0.5,512:0.5] [--seed S] [--json OUT]\n"
    "            [--cancel_fraction F] [--malformed_fraction F] [--rate R]\n"
    "            [--tls_ca CA.pem [--tls_cert C.pem --tls_key K.pem]] [--auth_token_file F]\n"
    "Drives a scored server with random-token Score requests and reports throughput, latency\n"
    "percentiles, outcomes (ok, cancelled, refused as expected, unexpected) and gRPC status codes.\n"
    "Exit 0: no unexpected outcome; 3: some; 1: could not start; 2: bad flags.";

// --help's sections (cli/flags_help.h); a flag left out still shows, under "Other flags".
const std::vector<scored::cli::FlagGroup>& HelpGroups() {
  static const auto* const groups = new std::vector<scored::cli::FlagGroup>{
      {"Server connection", {"server", "connect_timeout_s", "stop_on_unavailable"}},
      {"TLS and authentication", {"tls_ca", "tls_cert", "tls_key", "auth_token", "auth_token_file"}},
      {"Load shape", {"mode", "concurrency", "inflight", "rate", "duration", "requests", "deadline_ms"}},
      {"Request contents", {"lengths", "seed", "cancel_fraction", "malformed_fraction"}},
      {"Output", {"json"}},
  };
  return *groups;
}

absl::StatusOr<scored::load::LoadOptions> OptionsFromFlags() {
  scored::load::LoadOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  auto mode = scored::load::ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  o.mode = *mode;
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.inflight = absl::GetFlag(FLAGS_inflight);
  const double duration = absl::GetFlag(FLAGS_duration);
  if (!(duration >= 0.0)) return absl::InvalidArgumentError("--duration must be >= 0");
  o.duration = absl::Seconds(duration);
  o.num_requests = absl::GetFlag(FLAGS_requests);
  if (o.duration == absl::ZeroDuration() && o.num_requests == 0) {
    return absl::InvalidArgumentError("give --duration SECONDS or --requests N");
  }
  if (o.duration > absl::ZeroDuration() && o.num_requests > 0) {
    return absl::InvalidArgumentError("give only one of --duration and --requests");
  }
  auto lengths = scored::load::ParseLengthMix(absl::GetFlag(FLAGS_lengths));
  if (!lengths.ok())
    return absl::InvalidArgumentError(absl::StrCat("--lengths: ", lengths.status().message()));
  o.lengths = *lengths;
  // The default mix (up to 2048 tokens) is fitted to a server with smaller limits; an explicit one is not.
  o.fit_lengths = absl::GetFlag(FLAGS_lengths) == kDefaultLengths;
  o.seed = absl::GetFlag(FLAGS_seed);
  const int64_t deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  if (deadline_ms < 0) return absl::InvalidArgumentError("--deadline_ms must be >= 0");
  o.deadline = absl::Milliseconds(deadline_ms);
  const double connect_timeout = absl::GetFlag(FLAGS_connect_timeout_s);
  if (!(connect_timeout > 0.0)) return absl::InvalidArgumentError("--connect_timeout_s must be > 0");
  o.connect_timeout = absl::Seconds(connect_timeout);
  absl::StatusOr<scored::client::ClientSecurity> security =
      scored::client::LoadSecurity(scored::client::SecurityFlagsFromCommandLine());
  if (!security.ok()) return security.status();
  o.security = *std::move(security);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.stop_on_unavailable = absl::GetFlag(FLAGS_stop_on_unavailable);
  o.cancel_fraction = absl::GetFlag(FLAGS_cancel_fraction);
  o.malformed_fraction = absl::GetFlag(FLAGS_malformed_fraction);
  absl::Status valid = scored::load::ValidateLoadOptions(o);
  if (!valid.ok()) return valid;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  scored::cli::SetUsageConfig("scored-load");
  absl::SetProgramUsageMessage(kUsage);
  if (scored::cli::WantsHelp(argc, argv)) {
    std::fputs(scored::cli::GroupedHelp(kUsage, HelpGroups(), __FILE__).c_str(), stdout);
    return 0;
  }
  const scored::cli::CommandLineRules rules{"scored-load takes only flags, e.g. --server HOST:PORT",
                                            {{"host", "server"}, {"port", "server"}}};
  if (const absl::Status command_line = scored::cli::CheckCommandLine(argc, argv, rules);
      !command_line.ok()) {
    std::fprintf(stderr, "scored-load: %s (see --help)\n", std::string(command_line.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<scored::load::LoadOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "scored-load: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<scored::load::LoadResult> result = scored::load::RunLoad(*options);
  if (!result.ok()) {
    std::fprintf(stderr, "scored-load: %s\n", result.status().ToString().c_str());
    return 1;
  }
  std::fputs(scored::load::FormatTable(*result).c_str(), stdout);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << scored::load::ToJson(*result).dump(2) << "\n";
    if (!out.good()) {
      std::fprintf(stderr, "scored-load: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return result->unexpected == 0 ? 0 : 3;
}

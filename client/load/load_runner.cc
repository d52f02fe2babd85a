#include "client/load/load_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/connect/servers.h"
#include "client/load/closed_loop.h"
#include "client/load/driver.h"
#include "client/load/open_loop.h"
#include "client/load/stream_driver.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/scorer.grpc.pb.h"

namespace scored {
namespace load {

absl::StatusOr<Mode> ParseMode(absl::string_view text) {
  if (text == "unary") return Mode::kUnary;
  if (text == "stream") return Mode::kStream;
  return absl::InvalidArgumentError(absl::StrCat("mode must be unary or stream, got '", text, "'"));
}

const char* ModeName(Mode mode) { return mode == Mode::kUnary ? "unary" : "stream"; }

absl::Status ValidateLoadOptions(const LoadOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("server address is empty");
  if (options.concurrency < 1) {
    return absl::InvalidArgumentError(absl::StrCat("concurrency must be >= 1, got ", options.concurrency));
  }
  if (options.inflight < 1) {
    return absl::InvalidArgumentError(absl::StrCat("inflight must be >= 1, got ", options.inflight));
  }
  const bool by_time = options.duration > absl::ZeroDuration();
  const bool by_count = options.num_requests > 0;
  if (by_time == by_count) {
    return absl::InvalidArgumentError("give exactly one of a duration > 0 or a request count > 0");
  }
  if (options.num_requests < 0) {
    return absl::InvalidArgumentError(absl::StrCat("request count must be >= 0, got ", options.num_requests));
  }
  if (options.lengths.empty()) return absl::InvalidArgumentError("the length mix is empty");
  for (const LengthBucket& b : options.lengths) {
    if (b.tokens < 2 || !std::isfinite(b.weight) || b.weight <= 0.0) {
      return absl::InvalidArgumentError(absl::StrCat("length mix entry ", b.tokens, ":", b.weight,
                                                     " is invalid (tokens >= 2, weight > 0)"));
    }
  }
  if (options.deadline < absl::ZeroDuration()) return absl::InvalidArgumentError("deadline must be >= 0");
  for (const auto& [name, f] : {std::pair<const char*, double>{"cancel_fraction", options.cancel_fraction},
                                {"malformed_fraction", options.malformed_fraction}}) {
    if (!(f >= 0.0 && f <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [0, 1], got ", f));
    }
  }
  if (options.cancel_fraction + options.malformed_fraction > 1.0) {
    return absl::InvalidArgumentError("cancel_fraction + malformed_fraction must be <= 1");
  }
  if (!(options.rate >= 0.0) || !std::isfinite(options.rate)) {
    return absl::InvalidArgumentError(absl::StrCat("rate must be >= 0, got ", options.rate));
  }
  if (options.rate > 0.0) {
    if (options.mode != Mode::kUnary) return absl::InvalidArgumentError("rate (open loop) needs unary mode");
    if (options.cancel_fraction > 0.0 || options.malformed_fraction > 0.0) {
      return absl::InvalidArgumentError(
          "rate (open loop) sends normal requests only: cancel_fraction and "
          "malformed_fraction must be 0");
    }
  }
  return absl::OkStatus();
}

namespace {

// One server of the run: its channel, stub and model.
struct Target {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<scored::v1::Scorer::Stub> stub;
  scored::v1::ModelInfo info;
};

absl::StatusOr<Target> Connect(const LoadOptions& options, const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  Target t;
  t.address = address;
  t.channel = grpc::CreateCustomChannel(address, client::ChannelCredentials(options.security), args);
  if (!t.channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to scored at ", address, " within ", absl::FormatDuration(options.connect_timeout),
        options.security.tls
            ? " (is the server running there, speaking TLS with a certificate --tls_ca trusts, "
              "and accepting this client's certificate?)"
            : " (is the server running and listening there?)"));
  }
  t.stub = scored::v1::Scorer::NewStub(t.channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.connect_timeout));
  client::AddAuthorization(options.security.bearer_token, &context);
  const grpc::Status status = t.stub->GetModelInfo(&context, scored::v1::GetModelInfoRequest(), &t.info);
  if (!status.ok()) {
    return absl::Status(FromGrpcCode(status.error_code()),
                        absl::StrCat("GetModelInfo", address == options.server ? "" : " of " + address, ": ",
                                     status.error_message()));
  }
  if (t.info.vocab_size() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", address, " reports vocab_size ", t.info.vocab_size()));
  }
  for (const LengthBucket& b : options.lengths) {
    if (options.fit_lengths) break;  // FitLengths lowers them once every server is known
    if (t.info.max_seq_len() > 0 && b.tokens > t.info.max_seq_len()) {
      return absl::InvalidArgumentError(
          absl::StrCat("length ", b.tokens, " exceeds the server's max_seq_len ", t.info.max_seq_len(),
                       address == options.server ? "" : " (" + address + ")"));
    }
    if (t.info.max_batch_tokens() > 0 && b.tokens > t.info.max_batch_tokens()) {
      return absl::InvalidArgumentError(
          absl::StrCat("length ", b.tokens, " exceeds the server's max_batch_tokens ",
                       t.info.max_batch_tokens(), address == options.server ? "" : " (" + address + ")"));
    }
  }
  return t;
}

// Connects every server of options.server (load_runner.h: each checked alone, then CheckSameModel).
absl::StatusOr<std::vector<Target>> ConnectTargets(const LoadOptions& options,
                                                   const std::vector<std::string>& addresses) {
  std::vector<Target> targets;
  std::vector<scored::v1::ModelInfo> infos;
  for (const std::string& address : addresses) {
    absl::StatusOr<Target> t = Connect(options, address);
    if (!t.ok()) return t.status();
    infos.push_back(t->info);
    targets.push_back(*std::move(t));
  }
  absl::Status same = client::CheckSameModel(addresses, infos);
  if (!same.ok()) return same;
  return targets;
}

// What ran: the options and the first server's model (no measurement yet).
LoadResult DescribeRun(const LoadOptions& options, const std::vector<std::string>& addresses,
                       const scored::v1::ModelInfo& info) {
  LoadResult result;
  result.server = options.server;
  result.mode = options.mode;
  result.concurrency = options.concurrency;
  result.inflight = options.mode == Mode::kStream ? options.inflight : 1;
  result.lengths = FormatLengthMix(options.lengths);
  result.seed = options.seed;
  result.cancel_fraction = options.cancel_fraction;
  result.malformed_fraction = options.malformed_fraction;
  result.model_architecture = info.architecture();
  result.model_format = info.format();
  result.backend = info.backend();
  result.vocab_size = info.vocab_size();
  result.max_seq_len = info.max_seq_len();
  result.rate = options.rate;
  result.servers = addresses;
  result.requests_per_server.assign(addresses.size(), 0);
  return result;
}

// Runs the open loop over every server (options.rate > 0; its tallies in *result and stats[0]), else
// `concurrency` closed-loop clients, unary or stream, client c on server c mod the number of servers;
// returns when every client finished.
void Dispatch(const LoadOptions& options, SharedRun* shared, absl::Time start, std::vector<Target>* targets,
              std::vector<ClientStats>* stats, LoadResult* result) {
  if (options.rate > 0.0) {
    result->concurrency = 0;
    std::vector<scored::v1::Scorer::Stub*> stubs;
    for (Target& t : *targets) stubs.push_back(t.stub.get());
    const OpenLoopTally tally = RunOpenLoop(shared, std::move(stubs), start, &(*stats)[0]);
    result->requests_per_server = tally.per_server;
    result->rate_achieved = tally.rate_achieved;
    result->schedule_lag_max_ms = tally.lag_max_ms;
    result->max_outstanding = tally.max_outstanding;
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(stats->size());
  for (int c = 0; c < options.concurrency; ++c) {
    ClientStats* s = &(*stats)[static_cast<size_t>(c)];
    Target& t = (*targets)[static_cast<size_t>(c) % targets->size()];
    grpc::Channel* channel = t.channel.get();
    if (options.mode == Mode::kUnary) {
      threads.emplace_back(RunUnaryClient, c, shared, t.stub.get(), channel, s);
    } else {
      threads.emplace_back(RunStreamClient, c, shared, channel, s);
    }
  }
  for (std::thread& t : threads) t.join();
}

// Adds every client's tallies to *result (closed loop: client c's requests to server c mod the number of
// servers) and derives the latency summary and the rates over result->wall.
void MergeStats(const LoadOptions& options, const std::vector<ClientStats>& stats, LoadResult* result) {
  const size_t num_servers = result->servers.size();
  std::vector<double> latencies;
  for (size_t c = 0; c < stats.size(); ++c) {
    const ClientStats& s = stats[c];
    if (options.rate <= 0.0) result->requests_per_server[c % num_servers] += s.requests;
    ++result->clients_finished;
    if (s.stopped_unavailable) ++result->clients_stopped_unavailable;
    result->requests += s.requests;
    result->requests_ok += s.requests_ok;
    result->cancelled += s.cancelled;
    result->refused += s.refused;
    result->unexpected += s.unexpected;
    if (result->first_unexpected.empty()) result->first_unexpected = s.first_unexpected;
    for (const auto& [kind, count] : s.kinds) result->kinds[kind] += count;
    result->tokens_ok += s.tokens_ok;
    latencies.insert(latencies.end(), s.latencies_ms.begin(), s.latencies_ms.end());
    for (const auto& [code, count] : s.codes) result->codes[code] += count;
    for (const auto& [code, message] : s.first_message) result->first_message.emplace(code, message);
    result->records.insert(result->records.end(), s.records.begin(), s.records.end());
  }
  result->latency_ok = SummarizeLatencies(&latencies);
  const double seconds = absl::ToDoubleSeconds(result->wall);
  if (seconds > 0.0) {
    result->requests_per_s = static_cast<double>(result->requests_ok) / seconds;
    result->tokens_per_s = static_cast<double>(result->tokens_ok) / seconds;
  }
}

}  // namespace

// LoadOptions::fit_lengths: every length above the servers' smallest limit (max_seq_len, max_batch_tokens)
// becomes that limit; buckets that end up equal are merged (their weights added).
void FitLengths(const std::vector<Target>& targets, std::vector<LengthBucket>* lengths) {
  int64_t limit = std::numeric_limits<int64_t>::max();
  for (const Target& t : targets) {
    if (t.info.max_seq_len() > 0) limit = std::min<int64_t>(limit, t.info.max_seq_len());
    if (t.info.max_batch_tokens() > 0) limit = std::min<int64_t>(limit, t.info.max_batch_tokens());
  }
  std::vector<LengthBucket> fitted;
  for (LengthBucket b : *lengths) {
    b.tokens = std::min<int64_t>(b.tokens, limit);
    auto same = std::find_if(fitted.begin(), fitted.end(),
                             [&](const LengthBucket& f) { return f.tokens == b.tokens; });
    if (same != fitted.end()) {
      same->weight += b.weight;
    } else {
      fitted.push_back(b);
    }
  }
  if (fitted.size() != lengths->size() ||
      !std::equal(fitted.begin(), fitted.end(), lengths->begin(),
                  [](const LengthBucket& a, const LengthBucket& b) { return a.tokens == b.tokens; })) {
    std::fprintf(
        stderr, "scored-load: the default --lengths %s fitted to the server's limit of %lld tokens: %s\n",
        FormatLengthMix(*lengths).c_str(), static_cast<long long>(limit), FormatLengthMix(fitted).c_str());
  }
  *lengths = std::move(fitted);
}

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& requested) {
  absl::Status valid = ValidateLoadOptions(requested);
  if (!valid.ok()) return valid;
  absl::StatusOr<std::vector<std::string>> addresses = client::ResolveServers(requested.server);
  if (!addresses.ok()) return addresses.status();
  absl::StatusOr<std::vector<Target>> targets = ConnectTargets(requested, *addresses);
  if (!targets.ok()) return targets.status();
  LoadOptions options = requested;
  if (options.fit_lengths) FitLengths(*targets, &options.lengths);
  const scored::v1::ModelInfo& info = (*targets)[0].info;

  LoadResult result = DescribeRun(options, *addresses, info);
  const absl::Time start = absl::Now();
  SharedRun shared(options, info.vocab_size(), info.bos_id(), start);
  std::vector<ClientStats> stats(static_cast<size_t>(options.rate > 0.0 ? 1 : options.concurrency));
  Dispatch(options, &shared, start, &*targets, &stats, &result);
  result.wall = absl::Now() - start;
  MergeStats(options, stats, &result);
  return result;
}

}  // namespace load
}  // namespace scored

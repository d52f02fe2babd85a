// Soak test of the real `scored` daemon (CPU backend, stories260K-hf) driven in-process by
// scored_load_lib:
//   - 64 concurrent unary clients for SCORED_SOAK_SECONDS (default 60): every request OK, every
//     client finishes, the daemon's RSS at the end is < 10% above its RSS after warm-up;
//   - then SIGTERM under load: the daemon exits 0, requests in flight complete OK, later ones get
//     UNAVAILABLE, and the load run ends (no hang);
//   - the same for a shorter ScoreStream run;
//   - a deliberately tiny queue (--max_queue=1): only OK and RESOURCE_EXHAUSTED;
//   - 10% cancelled and 10% malformed requests, unary and stream: no unexpected outcome, every
//     malformed kind refused with INVALID_ARGUMENT, cancellations seen, the daemon still exits 0;
//   - the scored-load binary itself: flags, exit codes, --json.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/load/length_mix.h"
#include "client/load/load_runner.h"
#include "client/load/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace load {
namespace {

using ::scored::testing::ScoredProcess;
using ::scored::testing::ScoredProcessOptions;

// stories260K accepts at most 512 tokens (max_position_embeddings). A mix of short and full-length
// requests keeps the batcher packing batches of varied shape; mostly short ones so that the CPU
// backend (~3k tokens/s on 2 shared cores, measured) answers thousands of requests per minute.
constexpr char kLengthMix[] = "16:0.4,64:0.4,512:0.2";
// A request that takes this long means the daemon is stuck: it shows up as DEADLINE_EXCEEDED (an
// unexpected code) instead of a hung test.
constexpr absl::Duration kRequestDeadline = absl::Seconds(30);
// The peak RSS of the last window of the soak may exceed the peak RSS of the first window after
// warm-up by less than this. Peaks, not single samples: the daemon allocates and frees each batch's
// activations, so one sample depends on where in a batch it falls (single samples of a 20 s run
// varied by 7%); a window spans several batches. Allocator caches and gRPC buffer pools settle during
// warm-up. The daemon's RSS is ~25 MB, so 10% is ~2.5 MB: a leak of ~1 kB per request over the
// thousands of requests of a 60 s soak exceeds it.
constexpr double kMaxRssGrowth = 0.10;

int64_t SoakSeconds() {
  const char* env = std::getenv("SCORED_SOAK_SECONDS");
  int64_t seconds = 60;
  if (env != nullptr && absl::SimpleAtoi(env, &seconds) && seconds >= 2) return seconds;
  return 60;
}

// VmRSS of `pid` in kB, from /proc/PID/status.
absl::StatusOr<int64_t> ReadVmRssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return absl::NotFoundError(absl::StrCat("no /proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    int64_t kb = 0;
    if (!absl::SimpleAtoi(digits, &kb)) return absl::DataLossError(absl::StrCat("bad line: ", line));
    return kb;
  }
  return absl::NotFoundError("no VmRSS line");
}

absl::StatusOr<std::unique_ptr<ScoredProcess>> StartScored(std::vector<std::string> extra_args) {
  ScoredProcessOptions options;
  options.args = {"--model=" + scored::testing::StoriesModelDir(), "--backend=cpu"};
  for (std::string& a : extra_args) options.args.push_back(std::move(a));
  return ScoredProcess::Start(options);
}

LoadOptions BaseOptions(const ScoredProcess& proc, Mode mode, int concurrency) {
  LoadOptions o;
  o.server = proc.grpc_address();
  o.mode = mode;
  o.concurrency = concurrency;
  o.lengths = *ParseLengthMix(kLengthMix);
  o.seed = 20261122;
  o.deadline = kRequestDeadline;
  return o;
}

// A load run on its own thread. `options.stop` is wired to `stop`.
class AsyncLoad {
 public:
  explicit AsyncLoad(LoadOptions options) {
    options.stop = &stop_;
    future_ = std::async(std::launch::async, [options] { return RunLoad(options); });
  }
  ~AsyncLoad() {
    stop_.store(true);
    if (future_.valid()) future_.wait();
  }
  bool WaitFor(absl::Duration timeout) {
    return future_.wait_for(absl::ToChronoMilliseconds(timeout)) == std::future_status::ready;
  }
  absl::StatusOr<LoadResult> Get() { return future_.get(); }
  void Stop() { stop_.store(true); }

 private:
  std::atomic<bool> stop_{false};
  std::future<absl::StatusOr<LoadResult>> future_;
};

// Codes other than those allowed, as "NAME=count" text (empty when none).
std::string UnexpectedCodes(const LoadResult& r, const std::vector<absl::StatusCode>& allowed) {
  std::string out;
  for (const auto& [code, count] : r.codes) {
    if (std::find(allowed.begin(), allowed.end(), code) != allowed.end()) continue;
    auto it = r.first_message.find(code);
    absl::StrAppend(&out, absl::StatusCodeToString(code), "=", count,
                    " (first: ", it == r.first_message.end() ? "" : it->second, ") ");
  }
  return out;
}

// Sends SIGTERM while `load` runs and checks the drain: exit 0, every request the server had accepted
// answered, none but OK and UNAVAILABLE (and CANCELLED for calls the server never took up, below), every
// client ends. `proc` must be serving under `load` already.
void SigtermUnderLoad(ScoredProcess* proc, AsyncLoad* load, int concurrency) {
  const absl::Time term = absl::Now();
  ASSERT_TRUE(proc->SendSignal(SIGTERM).ok());
  absl::StatusOr<int> exit_code = proc->Wait(absl::Seconds(60));
  const absl::Time exited = absl::Now();
  if (!exit_code.ok()) {
    ADD_FAILURE() << "scored did not exit within 60 s of SIGTERM: " << exit_code.status();
    proc->SendSignal(SIGKILL).IgnoreError();
    proc->Wait(absl::Seconds(10)).IgnoreError();
  } else {
    EXPECT_EQ(*exit_code, 0) << proc->ReadLog();
  }
  // Every client gets UNAVAILABLE (draining, or connection refused) at once and stops.
  if (!load->WaitFor(absl::Seconds(60))) {
    ADD_FAILURE() << "the load run did not end within 60 s of the server's exit (a hung client)";
    load->Stop();
    ASSERT_TRUE(load->WaitFor(absl::Seconds(60)));
  }
  absl::StatusOr<LoadResult> r = load->Get();
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << "--- SIGTERM under load (sent " << absl::FormatDuration(exited - term)
            << " before the exit was seen) ---\n"
            << FormatTable(*r);
  EXPECT_EQ(UnexpectedCodes(
                *r, {absl::StatusCode::kOk, absl::StatusCode::kUnavailable, absl::StatusCode::kCancelled}),
            "");
  EXPECT_EQ(r->clients_finished, concurrency);
  EXPECT_EQ(r->clients_stopped_unavailable, concurrency)
      << "every client should have seen UNAVAILABLE once the server went away";

  // What the server had accepted when the drain began (queued or running: its log says how many) is answered
  // during the drain. A request the client sent earlier but the server had not read yet (a stream's next
  // message, a call still being set up on a loaded machine) may fairly be refused with UNAVAILABLE: which
  // requests those are depends on scheduling, so the check is the server's own account, not a time margin.
  const std::string log = proc->ReadLog();
  int64_t owed = -1, answered = -1;
  const std::regex owed_re(R"(shutting down: finishing (\d+) in-flight requests)");
  const std::regex answered_re(R"(shut down: (\d+) requests answered during the drain)");
  std::smatch match;
  if (std::regex_search(log, match, owed_re)) owed = std::stoll(match[1].str());
  if (std::regex_search(log, match, answered_re)) answered = std::stoll(match[1].str());
  ASSERT_GE(owed, 0) << "no drain line in the server's log:\n" << log;
  ASSERT_GE(answered, 0) << "no drain summary in the server's log:\n" << log;
  EXPECT_GE(answered, owed) << "the drain left requests it had accepted unanswered";
  // A call gRPC had received but not yet handed to the service when the server shut down (one still being set
  // up on a loaded machine) is cancelled by gRPC itself, and its client sees CANCELLED: seen once in 256 on a
  // fresh-clone run of the suite on 2 cores (the server's account: 63 of 64 clients' calls accepted when the
  // drain began). Only such calls may end so: around the drain (the check below holds every request sent
  // later than 1 s after SIGTERM to UNAVAILABLE), none after the exit, at most one per client.
  int64_t cancelled = 0;
  for (const RequestRecord& rec : r->records) {
    if (rec.code != absl::StatusCode::kCancelled) continue;
    ++cancelled;
    EXPECT_LT(rec.start, exited) << "a request sent after the server's exit ended CANCELLED";
  }
  EXPECT_LE(cancelled, concurrency) << "more requests ended CANCELLED than there are clients";
  int64_t inflight_ok = 0;
  int64_t after_exit = 0;
  for (const RequestRecord& rec : r->records) {
    if (rec.start < term && rec.end > term && rec.code == absl::StatusCode::kOk) ++inflight_ok;
    // Nothing sent after the daemon has exited can succeed; everything sent after the drain began is
    // refused.
    if (rec.start > exited) {
      ++after_exit;
      EXPECT_EQ(rec.code, absl::StatusCode::kUnavailable);
    }
    if (rec.start > term + absl::Seconds(1)) {
      EXPECT_EQ(rec.code, absl::StatusCode::kUnavailable);
    }
  }
  EXPECT_GT(inflight_ok, 0) << "no request in flight at SIGTERM was completed";
  std::cout << "in flight at SIGTERM and completed OK: " << inflight_ok << "; server: " << owed
            << " accepted when the drain began, " << answered
            << " answered during it; sent after the exit: " << after_exit << "\n";
}

TEST(ScoredSoakTest, UnarySoakThenSigtermUnderLoad) {
  const int64_t seconds = SoakSeconds();
  const int kClients = 64;
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored({});
  ASSERT_TRUE(proc.ok()) << proc.status();
  const pid_t pid = (*proc)->pid();

  LoadOptions o = BaseOptions(**proc, Mode::kUnary, kClients);
  o.duration = absl::Seconds(seconds);
  // Windows of the run: [0, W) warm-up, [W, 2W) the baseline, [duration - W, duration) the end.
  const absl::Duration window = std::max(absl::Seconds(2), absl::Seconds(seconds) / 6);
  const absl::Time start = absl::Now();
  int64_t rss_warm_kb = 0;  // peak over the baseline window
  int64_t rss_end_kb = 0;   // peak over the end window
  int64_t rss_max_kb = 0;   // peak after warm-up
  int64_t samples = 0;
  absl::StatusOr<LoadResult> r;
  {
    AsyncLoad load(o);
    // Sample the RSS every 100 ms while the load runs.
    while (!load.WaitFor(absl::Milliseconds(100))) {
      absl::StatusOr<int64_t> rss = ReadVmRssKb(pid);
      ASSERT_TRUE(rss.ok()) << rss.status() << "\n" << (*proc)->ReadLog();
      const absl::Duration t = absl::Now() - start;
      if (t < window) continue;
      ++samples;
      rss_max_kb = std::max(rss_max_kb, *rss);
      if (t < 2 * window) rss_warm_kb = std::max(rss_warm_kb, *rss);
      if (t >= absl::Seconds(seconds) - window && t < absl::Seconds(seconds)) {
        rss_end_kb = std::max(rss_end_kb, *rss);
      }
      if (t > absl::Seconds(seconds) + absl::Seconds(60)) {
        ADD_FAILURE() << "the soak run did not end 60 s after its duration (a hung client)";
        load.Stop();
      }
    }
    r = load.Get();
  }
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << "--- unary soak, " << seconds << " s ---\n" << FormatTable(*r);
  std::cout << "scored RSS (peaks over " << absl::FormatDuration(window) << " windows, " << samples
            << " samples): after warm-up " << rss_warm_kb << " kB, at the end " << rss_end_kb << " kB, max "
            << rss_max_kb << " kB\n";
  ::testing::Test::RecordProperty("requests_per_s", std::to_string(r->requests_per_s));
  ::testing::Test::RecordProperty("tokens_per_s", std::to_string(r->tokens_per_s));
  ::testing::Test::RecordProperty("p50_ms", std::to_string(r->latency_ok.p50_ms));
  ::testing::Test::RecordProperty("p99_ms", std::to_string(r->latency_ok.p99_ms));
  ::testing::Test::RecordProperty("rss_warm_kb", std::to_string(rss_warm_kb));
  ::testing::Test::RecordProperty("rss_end_kb", std::to_string(rss_end_kb));

  EXPECT_EQ(UnexpectedCodes(*r, {absl::StatusCode::kOk}), "");
  EXPECT_EQ(r->clients_finished, kClients);
  EXPECT_EQ(r->clients_stopped_unavailable, 0);
  EXPECT_GT(r->requests_ok, kClients);
  EXPECT_EQ(r->requests, r->requests_ok);
  ASSERT_GT(rss_warm_kb, 0);
  ASSERT_GT(rss_end_kb, 0);
  EXPECT_LT(static_cast<double>(rss_end_kb), static_cast<double>(rss_warm_kb) * (1.0 + kMaxRssGrowth))
      << "scored RSS grew from " << rss_warm_kb << " kB to " << rss_end_kb << " kB";

  // SIGTERM under load: 64 clients again; the signal goes once requests flow.
  LoadOptions term = BaseOptions(**proc, Mode::kUnary, kClients);
  term.duration = absl::Seconds(120);  // ended by the shutdown, never by the clock
  term.record_requests = true;
  AsyncLoad load(term);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  SigtermUnderLoad(proc->get(), &load, kClients);
}

TEST(ScoredSoakTest, StreamSoakThenSigtermUnderLoad) {
  const int64_t seconds = std::max<int64_t>(5, SoakSeconds() / 6);
  const int kStreams = 8;
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored({});
  ASSERT_TRUE(proc.ok()) << proc.status();

  LoadOptions o = BaseOptions(**proc, Mode::kStream, kStreams);
  o.inflight = 4;
  o.duration = absl::Seconds(seconds);
  absl::StatusOr<LoadResult> r;
  {
    AsyncLoad load(o);
    ASSERT_TRUE(load.WaitFor(absl::Seconds(seconds) + absl::Seconds(60))) << "the stream run hung";
    r = load.Get();
  }
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << "--- stream soak, " << seconds << " s ---\n" << FormatTable(*r);
  EXPECT_EQ(UnexpectedCodes(*r, {absl::StatusCode::kOk}), "");
  EXPECT_EQ(r->clients_finished, kStreams);
  EXPECT_GE(r->requests_ok, kStreams * o.inflight);
  EXPECT_EQ(r->requests, r->requests_ok);

  LoadOptions term = o;
  term.duration = absl::Seconds(120);
  term.record_requests = true;
  AsyncLoad load(term);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  SigtermUnderLoad(proc->get(), &load, kStreams);
}

TEST(ScoredSoakTest, TinyQueueGivesOnlyOkAndResourceExhausted) {
  // One queued request at most, and a batcher that waits 20 ms to fill a batch: with 16 clients the
  // queue is full most of the time, so refusals are certain.
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc =
      StartScored({"--max_queue=1", "--batch_timeout_us=20000"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  LoadOptions o = BaseOptions(**proc, Mode::kUnary, 16);
  o.duration = absl::Seconds(3);
  absl::StatusOr<LoadResult> r;
  {
    AsyncLoad load(o);
    ASSERT_TRUE(load.WaitFor(absl::Seconds(60))) << "the run hung";
    r = load.Get();
  }
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << "--- max_queue=1 ---\n" << FormatTable(*r);
  EXPECT_EQ(UnexpectedCodes(*r, {absl::StatusCode::kOk, absl::StatusCode::kResourceExhausted}), "");
  EXPECT_GT(r->requests_ok, 0);
  EXPECT_GT(r->count(absl::StatusCode::kResourceExhausted), 0);
  EXPECT_EQ(r->clients_finished, 16);
  // The daemon is unharmed: it still drains and exits 0.
  ASSERT_TRUE((*proc)->SendSignal(SIGTERM).ok());
  absl::StatusOr<int> exit_code = (*proc)->Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
}

// Short unary and stream runs with cancelled and malformed requests mixed in.
TEST(ScoredSoakTest, CancelledAndMalformedRequestsAreExpectedOutcomes) {
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored({});
  ASSERT_TRUE(proc.ok()) << proc.status();
  for (Mode mode : {Mode::kUnary, Mode::kStream}) {
    LoadOptions o = BaseOptions(**proc, mode, 8);
    o.inflight = 4;
    o.duration = absl::Seconds(4);
    o.cancel_fraction = 0.1;
    o.malformed_fraction = 0.1;
    absl::StatusOr<LoadResult> r;
    {
      AsyncLoad load(o);
      ASSERT_TRUE(load.WaitFor(absl::Seconds(90))) << "the run hung";
      r = load.Get();
    }
    ASSERT_TRUE(r.ok()) << r.status();
    std::cout << "--- " << ModeName(mode) << ", 10% cancelled, 10% malformed ---\n" << FormatTable(*r);
    EXPECT_EQ(r->unexpected, 0) << r->first_unexpected;
    EXPECT_EQ(r->requests_ok + r->cancelled + r->refused + r->unexpected, r->requests);
    EXPECT_EQ(r->clients_finished, 8);
    EXPECT_GT(r->requests_ok, 0);
    EXPECT_GT(r->cancelled, 0);
    EXPECT_EQ(r->count(absl::StatusCode::kCancelled), r->cancelled);
    // Every malformed request was refused, and each kind was sent at least once (~700 requests on 2
    // cores, 2.5% of each kind: P(a kind absent) ~ 1e-8; checked from 500 requests on, P < 3e-6).
    int64_t malformed = 0;
    for (RequestKind k : {RequestKind::kMalformedOutOfVocab, RequestKind::kMalformedEmpty,
                          RequestKind::kMalformedTopK, RequestKind::kMalformedRawBytes}) {
      if (r->requests >= 500) {
        EXPECT_GT(r->kinds[k], 0) << RequestKindName(k);
      }
      malformed += r->kinds[k];
    }
    EXPECT_GT(malformed, 0);
    if (mode == Mode::kUnary) {
      EXPECT_EQ(r->refused, malformed);
    } else {
      // A malformed request still unanswered when its stream is cancelled counts as cancelled.
      EXPECT_GT(r->refused, 0);
      EXPECT_LE(r->refused, malformed);
    }
    EXPECT_EQ(r->count(absl::StatusCode::kInvalidArgument), r->refused);
  }
  // The daemon is unharmed: it still drains and exits 0.
  ASSERT_TRUE((*proc)->SendSignal(SIGTERM).ok());
  absl::StatusOr<int> exit_code = (*proc)->Wait(absl::Seconds(60));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*proc)->ReadLog();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `scored-load ARGS` with stdout+stderr to `log`; returns its exit code.
int RunScoredLoad(const std::string& args, const std::string& log) {
  const std::string command =
      absl::StrCat(SCORED_BINARY_DIR, "/client/load/scored-load ", args, " > ", log, " 2>&1");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ScoredLoadCliTest, FlagsExitCodesAndJson) {
  absl::StatusOr<std::unique_ptr<ScoredProcess>> proc = StartScored({});
  ASSERT_TRUE(proc.ok()) << proc.status();
  const std::string server = absl::StrCat("--server=", (*proc)->grpc_address());
  const std::string dir = ::testing::TempDir();
  const std::string json = dir + "/scored_load_cli.json";
  const std::string log = dir + "/scored_load_cli.log";

  ASSERT_EQ(RunScoredLoad(absl::StrCat(server, " --mode=stream --concurrency=2 --inflight=4 --requests=30 ",
                                       "--lengths=16:1,64:1 --seed=3 --deadline_ms=60000 --json=", json),
                          log),
            0)
      << ReadFile(log);
  EXPECT_THAT(ReadFile(log), ::testing::HasSubstr("30 sent, 30 ok, 0 failed"));
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << ReadFile(json);
  EXPECT_EQ(j["mode"], "stream");
  EXPECT_EQ(j["requests"], 30);
  EXPECT_EQ(j["requests_ok"], 30);
  EXPECT_EQ(j["codes"]["OK"], 30);
  EXPECT_EQ(j["model"]["vocab_size"], 512);
  EXPECT_EQ(j["lengths"], "16:1,64:1");
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);

  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --concurrency=3 --requests=10 --lengths=32"), log), 0)
      << ReadFile(log);
  // Cancelled and malformed requests are expected outcomes: exit 0, counted by kind.
  ASSERT_EQ(
      RunScoredLoad(absl::StrCat(server, " --concurrency=4 --requests=200 --lengths=16:1,64:1 ",
                                 "--cancel_fraction=0.1 --malformed_fraction=0.2 --seed=5 --json=", json),
                    log),
      0)
      << ReadFile(log);
  EXPECT_THAT(ReadFile(log), ::testing::HasSubstr("unexpected 0"));
  const nlohmann::json f = nlohmann::json::parse(ReadFile(json), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(f.is_discarded()) << ReadFile(json);
  EXPECT_EQ(f["unexpected"], 0);
  EXPECT_EQ(f["requests"], 200);
  EXPECT_GT(f["outcomes"]["refused"].get<int64_t>(), 0);
  EXPECT_EQ(f["outcomes"]["refused"].get<int64_t>(),
            f["kinds"]["oov"].get<int64_t>() + f["kinds"]["empty"].get<int64_t>() +
                f["kinds"]["top_k"].get<int64_t>() + f["kinds"]["raw_bytes"].get<int64_t>());
  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --requests=3 --lengths=32 --cancel_fraction=1.5"), log), 2);
  // Bad flags: 2. A length the server cannot take, or no server: 1.
  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --requests=3 --lengths=1:1"), log), 2) << ReadFile(log);
  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --requests=3 --duration=1 --lengths=32"), log), 2);
  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --requests=3 --mode=batch --lengths=32"), log), 2);
  EXPECT_EQ(RunScoredLoad(absl::StrCat(server, " --requests=3 --lengths=1024"), log), 1);
  EXPECT_THAT(ReadFile(log), ::testing::HasSubstr("exceeds the server's max_seq_len 512"));
  EXPECT_EQ(RunScoredLoad("--server=127.0.0.1:1 --connect_timeout_s=0.3 --requests=3 --lengths=32", log), 1);
}

}  // namespace
}  // namespace load
}  // namespace scored

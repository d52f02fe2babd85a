#include "server/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/version.h"
#include "prometheus/text_serializer.h"
#include "server/grpc_status.h"

namespace scored {
namespace {

std::vector<double> DoublingBuckets(double first, int count) {
  std::vector<double> b;
  double v = first;
  for (int i = 0; i < count; ++i, v *= 2) b.push_back(v);
  return b;
}

prometheus::MetricFamily OneValueFamily(const char* name, const char* help, prometheus::MetricType type,
                                        double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

// The fields of /proc/self/stat after the command name (which may hold spaces and parentheses, so the
// split starts after its last ')'): [0] is field 3 (state), so field N of proc(5) is at [N - 3].
std::vector<std::string> ProcSelfStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  return absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
}

// Seconds since the epoch at boot (/proc/stat "btime"); -1 when unknown.
double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

int64_t CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

#ifndef SCORED_BUILD_CUDA
#define SCORED_BUILD_CUDA 0
#endif

}  // namespace

std::vector<prometheus::MetricFamily> ProcessMetricFamilies() {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  const std::vector<std::string> f = ProcSelfStatFields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  auto field = [&f](int n) {
    double v = 0;
    return absl::SimpleAtod(f[static_cast<size_t>(n - 3)], &v) ? v : 0.0;
  };
  if (f.size() >= 22 && ticks > 0 && page > 0) {
    families.push_back(OneValueFamily("process_cpu_seconds_total", "Total user and system CPU time, seconds",
                                      MetricType::Counter, (field(14) + field(15)) / ticks));
    families.push_back(OneValueFamily("process_resident_memory_bytes", "Resident memory size, bytes",
                                      MetricType::Gauge, field(24) * page));
    families.push_back(OneValueFamily("process_virtual_memory_bytes", "Virtual memory size, bytes",
                                      MetricType::Gauge, field(23)));
    families.push_back(
        OneValueFamily("process_threads", "Operating system threads", MetricType::Gauge, field(20)));
    const double boot = BootTimeSeconds();
    if (boot >= 0) {
      families.push_back(OneValueFamily("process_start_time_seconds",
                                        "Start time of the process since the Unix epoch, seconds",
                                        MetricType::Gauge, boot + field(22) / ticks));
    }
  }
  const int64_t fds = CountOpenFds();
  if (fds >= 0) {
    families.push_back(OneValueFamily("process_open_fds", "Open file descriptors", MetricType::Gauge,
                                      static_cast<double>(fds)));
  }
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    families.push_back(OneValueFamily("process_max_fds", "Maximum number of open file descriptors",
                                      MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return families;
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("scored_requests_total")
                   .Help("Finished requests by method and gRPC status code")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("scored_request_latency_seconds")
                  .Help("Request latency from receipt to response, seconds")
                  .Register(*registry_);
  tokens_scored_ = &prometheus::BuildCounter()
                        .Name("scored_tokens_scored_total")
                        .Help("Scored positions returned by successful engine batches")
                        .Register(*registry_)
                        .Add({});
  tokens_input_ =
      &prometheus::BuildCounter()
           .Name("scored_tokens_input_total")
           .Help("Tokens computed (sequence lengths, context included) by successful engine batches")
           .Register(*registry_)
           .Add({});
  batch_tokens_ = &prometheus::BuildHistogram()
                       .Name("scored_batch_tokens")
                       .Help("Tokens per engine Score() call")
                       .Register(*registry_)
                       .Add({}, DoublingBuckets(16, 17));
  nonfinite_results_ = &prometheus::BuildCounter()
                            .Name("scored_nonfinite_results_total")
                            .Help("Requests whose result held a NaN or an infinity (failed with INTERNAL)")
                            .Register(*registry_)
                            .Add({});
  tokenizations_stopped_ = &prometheus::BuildCounter()
                                .Name("scored_tokenizations_stopped_total")
                                .Help("Texts whose tokenization stopped part-way, by reason")
                                .Register(*registry_);
  // Every reason from the start (0), so that a scrape tells "none yet" from "not exported".
  for (const char* reason : {"max_seq_len", "cancelled", "deadline", "shutdown"}) {
    tokenizations_stopped_->Add({{"reason", reason}});
  }
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("scored_queue_depth")
                      .Help("Requests waiting for the engine")
                      .Register(*registry_)
                      .Add({});
  buffered_bytes_ = &prometheus::BuildGauge()
                         .Name("scored_buffered_bytes")
                         .Help("Bytes charged to the memory budget: queued requests, responses not yet sent")
                         .Register(*registry_)
                         .Add({});
  buffered_bytes_limit_ = &prometheus::BuildGauge()
                               .Name("scored_buffered_bytes_limit")
                               .Help("The memory budget, bytes (--max_buffered_bytes)")
                               .Register(*registry_)
                               .Add({});
  limit_rejections_ = &prometheus::BuildCounter()
                           .Name("scored_limit_rejections_total")
                           .Help("Requests refused with RESOURCE_EXHAUSTED by a server-wide limit")
                           .Register(*registry_);
  // Every (limit, method) from the start at 0, so that alert rules and rate() see the series before a
  // refusal.
  for (const char* limit : {"max_buffered_bytes", "max_connections"}) {
    for (const char* method : {"Score", "ScoreStream", "Tokenize"}) {
      limit_rejections_->Add({{"limit", limit}, {"method", method}});
    }
  }
  streams_paused_ = &prometheus::BuildGauge()
                         .Name("scored_streams_paused")
                         .Help("ScoreStreams not reading because the memory budget is spent")
                         .Register(*registry_)
                         .Add({});
  connections_ = &prometheus::BuildGauge()
                      .Name("scored_connections")
                      .Help("Client connections with Scorer calls in progress")
                      .Register(*registry_)
                      .Add({});
  model_info_ = &prometheus::BuildGauge()
                     .Name("scored_model_info")
                     .Help("The loaded model (value 1)")
                     .Register(*registry_);
  device_memory_ = &prometheus::BuildGauge()
                        .Name("scored_device_memory_bytes")
                        .Help("Device memory per device, bytes (kind used or total)")
                        .Register(*registry_);
  prometheus::BuildGauge()
      .Name("scored_build_info")
      .Help("The scored binary (value 1): project version, git commit, CUDA backend built in")
      .Register(*registry_)
      .Add({{"version", cli::ProjectVersion()},
            {"git_commit", cli::GitCommit()},
            {"cuda", SCORED_BUILD_CUDA ? "on" : "off"}})
      .Set(1);
  serving_ = &prometheus::BuildGauge()
                  .Name("scored_serving")
                  .Help("1 while health reports SERVING, else 0 (loading, failed, draining)")
                  .Register(*registry_)
                  .Add({});
  in_flight_ = &prometheus::BuildGauge()
                    .Name("scored_requests_in_flight")
                    .Help("Score requests in the batcher: queued or in the engine's current batch")
                    .Register(*registry_)
                    .Add({});
  // Queue waits start well below a batch (the batch timeout is 2 ms by default): 0.1 ms .. ~105 s.
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("scored_queue_wait_seconds")
                     .Help("Wait of a request in the batcher queue before its engine call, seconds")
                     .Register(*registry_)
                     .Add({}, DoublingBuckets(0.0001, 21));
  batch_compute_ = &prometheus::BuildHistogram()
                        .Name("scored_batch_compute_seconds")
                        .Help("Wall time of one engine Score() call (one batch), seconds")
                        .Register(*registry_)
                        .Add({}, DoublingBuckets(0.0005, 18));
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const std::string& listen) {
  std::unique_ptr<Metrics> m(new Metrics());
  if (listen.empty()) return m;
  Metrics* metrics = m.get();
  auto http = MetricsHttpServer::Create(listen, [metrics] { return metrics->Serialize(); });
  if (!http.ok()) return http.status();
  m->http_ = std::move(*http);
  m->port_ = m->http_->port();
  return m;
}

void Metrics::RecordRequest(const std::string& method, grpc::StatusCode code, double latency_seconds) {
  requests_->Add({{"method", method}, {"code", GrpcCodeName(code)}}).Increment();
  latency_->Add({{"method", method}}, DoublingBuckets(0.0005, 18)).Observe(latency_seconds);
}

void Metrics::RecordBatch(int64_t batch_tokens, int64_t num_scored) {
  batch_tokens_->Observe(static_cast<double>(batch_tokens));
  tokens_scored_->Increment(static_cast<double>(num_scored));
  tokens_input_->Increment(static_cast<double>(batch_tokens));
}

void Metrics::RecordNonFiniteResult() { nonfinite_results_->Increment(); }

void Metrics::RecordTokenizationStopped(const std::string& reason) {
  tokenizations_stopped_->Add({{"reason", reason}}).Increment();
}

void Metrics::SetQueueDepth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }

void Metrics::SetBufferedBytes(int64_t used_bytes) { buffered_bytes_->Set(static_cast<double>(used_bytes)); }

void Metrics::SetBufferedBytesLimit(int64_t limit_bytes) {
  buffered_bytes_limit_->Set(static_cast<double>(limit_bytes));
}

void Metrics::RecordLimitRejection(const std::string& limit, const std::string& method) {
  limit_rejections_->Add({{"limit", limit}, {"method", method}}).Increment();
}

void Metrics::AddPausedStreams(int delta) {
  if (delta >= 0) {
    streams_paused_->Increment(static_cast<double>(delta));
  } else {
    streams_paused_->Decrement(static_cast<double>(-delta));
  }
}

void Metrics::SetConnections(int64_t connections) { connections_->Set(static_cast<double>(connections)); }

void Metrics::SetModelInfo(const ModelInfo& info, const std::string& model) {
  model_info_
      ->Add({{"architecture", info.architecture},
             {"model", model},
             {"fingerprint", info.model_fingerprint},
             {"format", info.format},
             {"backend", info.backend},
             {"dtype", info.compute_dtype},
             {"tp", std::to_string(info.tp)}})
      .Set(1);
}

void Metrics::SetDeviceMemory(const std::vector<std::pair<int64_t, int64_t>>& per_device) {
  for (size_t d = 0; d < per_device.size(); ++d) {
    const std::string device = std::to_string(d);
    device_memory_->Add({{"device", device}, {"kind", "used"}}).Set(static_cast<double>(per_device[d].first));
    device_memory_->Add({{"device", device}, {"kind", "total"}})
        .Set(static_cast<double>(per_device[d].second));
  }
}

void Metrics::SetServing(bool serving) { serving_->Set(serving ? 1 : 0); }

void Metrics::SetInFlight(int64_t requests) { in_flight_->Set(static_cast<double>(requests)); }

void Metrics::RecordQueueWait(double seconds) { queue_wait_->Observe(seconds); }

void Metrics::RecordBatchCompute(double seconds) { batch_compute_->Observe(seconds); }

std::string Metrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : ProcessMetricFamilies()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace scored

#include "server/metrics.h"

#include "absl/strings/str_cat.h"
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

}  // namespace

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

void Metrics::SetModelInfo(const ModelInfo& info) {
  model_info_
      ->Add({{"architecture", info.architecture},
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

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace scored

// Prometheus metrics of `scored`, served as text exposition at http://<--metrics_listen>/metrics.
//
// Metric                                   type       labels                         meaning
// scored_requests_total                    counter    method, code                   finished requests.
// method is
//     Score | ScoreStream | Tokenize | GetModelInfo; code the gRPC code name (OK, INVALID_ARGUMENT, ...).
//     Each request inside a ScoreStream counts once under method="ScoreStream" with its own code (the
//     code of its `error`, or OK).
// scored_request_latency_seconds           histogram  method                         receive -> response
//     ready, seconds, for the same requests (buckets 0.5 ms .. ~65 s, doubling).
// scored_tokens_scored_total               counter    -                              scored positions
//     (sum of num_scored) of successful engine batches.
// scored_tokens_input_total                counter    -                              tokens computed (sum of
//     the sequence lengths, context included) of the same batches: what scored-ppl's tok/s counts (tokens
//     sent), where scored positions are half of them for llamacpp and a quarter for exl3 at stride ctx/4.
// scored_batch_tokens                      histogram  -                              tokens (sum of sequence
//     lengths) per engine Score() call (buckets 16 .. 1Mi, doubling).
// scored_nonfinite_results_total           counter    -                              requests whose result
//     held a NaN or an infinity (NaN/Inf in the model's activations; each failed with INTERNAL instead).
// scored_queue_depth                       gauge      -                              requests waiting for the
//     engine (batcher queue, not counting the batch being computed).
// scored_buffered_bytes                    gauge      -                              bytes charged to the
//     memory budget now (server/memory_budget.h: queued requests, responses not yet sent).
// scored_buffered_bytes_limit              gauge      -                              --max_buffered_bytes.
// scored_limit_rejections_total            counter    limit, method                  requests refused with
//     RESOURCE_EXHAUSTED by a server-wide limit: limit = max_buffered_bytes | max_connections; method as
//     above (a ScoreStream request refused inside its stream counts once; a refused stream counts once). The
//     series of both limits for Score, ScoreStream and Tokenize exist from the start (0).
// scored_streams_paused                    gauge      -                              ScoreStreams that
// stopped
//     reading because the memory budget is spent (they resume once their own responses are read).
// scored_connections                       gauge      -                              client connections with
//     Scorer calls in progress (counted against --max_connections).
// scored_tokenizations_stopped_total      counter    reason                         texts whose tokenization
//     stopped part-way (README "Text limits"): max_seq_len (a Score text passed max_seq_len tokens),
//     cancelled (the call was cancelled), deadline (its deadline passed), shutdown (the server's shutdown
//     grace ended).
// scored_model_info                        gauge = 1  architecture, model, fingerprint, format, backend,
//     dtype, tp: model the served name (--openai_model_name, else the model folder's), fingerprint
//     ModelInfo.model_fingerprint (which checkpoint a replica holds, in a fleet of several quantizations).
// scored_device_memory_bytes               gauge      device, kind (used | total)    per-device memory, only
//     when the engine reports devices (CUDA backend); refreshed at start and after each batch.
// scored_build_info                        gauge = 1  version, git_commit, cuda      the binary: project
//     version, git commit at configure time ("" when unknown), cuda "on" when the CUDA backend is built in.
// scored_serving                           gauge      -                              1 while health reports
//     SERVING (model loaded, listener up, no fatal engine error), 0 while loading, after a fatal error and
//     during the shutdown drain.
// scored_requests_in_flight                gauge      -                              score requests the
//     batcher holds: queued or in the engine's current batch (what a drain still owes).
// scored_queue_wait_seconds                histogram  -                              per request that reached
//     the engine: Submit -> its batch's Engine::Score() call starts (buckets 0.1 ms .. ~105 s, doubling).
// scored_batch_compute_seconds             histogram  -                              wall time of each
//     Engine::Score() call (buckets 0.5 ms .. ~65 s, doubling).
// Process metrics (the names every Prometheus client library exports), read from /proc at each scrape:
//   process_cpu_seconds_total (counter; user + system), process_resident_memory_bytes,
//   process_virtual_memory_bytes, process_open_fds, process_max_fds (RLIMIT_NOFILE soft limit),
//   process_start_time_seconds (Unix time), process_threads. Absent where /proc cannot be read.
//
// Thread-safety: every method is thread-safe.
#ifndef SCORED_SERVER_METRICS_H_
#define SCORED_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/metrics_http.h"

namespace scored {

class Metrics {
 public:
  // listen: "host:port" for the HTTP endpoint (port 0 = any free port); empty = no endpoint (the
  // metrics are still kept, e.g. for Serialize()). UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const std::string& listen);

  // The bound HTTP port; 0 when there is no endpoint.
  int port() const { return port_; }

  void RecordRequest(const std::string& method, grpc::StatusCode code, double latency_seconds);
  void RecordBatch(int64_t batch_tokens, int64_t num_scored);
  void RecordNonFiniteResult();
  // reason: max_seq_len | cancelled | deadline | shutdown (scored_tokenizations_stopped_total).
  void RecordTokenizationStopped(const std::string& reason);
  void SetQueueDepth(int64_t depth);
  // The memory budget and the connection cap (server/memory_budget.h).
  void SetBufferedBytes(int64_t used_bytes);
  void SetBufferedBytesLimit(int64_t limit_bytes);
  // `limit`: "max_buffered_bytes" | "max_connections"; `method`: the Scorer method refused.
  void RecordLimitRejection(const std::string& limit, const std::string& method);
  // +1 when a ScoreStream stops reading for the budget, -1 when it resumes or ends.
  void AddPausedStreams(int delta);
  void SetConnections(int64_t connections);
  // `model`: the served name (--openai_model_name, else the model folder's name).
  void SetModelInfo(const ModelInfo& info, const std::string& model);
  // One (used, total) pair per device, bytes.
  void SetDeviceMemory(const std::vector<std::pair<int64_t, int64_t>>& per_device);
  // Whether health reports SERVING (scored_serving).
  void SetServing(bool serving);
  // The batcher's requests, queued or computing (Batcher::outstanding()).
  void SetInFlight(int64_t requests);
  // One request's wait in the batcher queue, seconds; one Engine::Score() call's wall time, seconds.
  void RecordQueueWait(double seconds);
  void RecordBatchCompute(double seconds);

  // The current exposition text (as the endpoint would serve it).
  std::string Serialize() const;

 private:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> http_;  // destroyed first: it calls Serialize()
  int port_ = 0;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Counter* tokens_scored_;
  prometheus::Counter* tokens_input_;
  prometheus::Histogram* batch_tokens_;
  prometheus::Counter* nonfinite_results_;
  prometheus::Family<prometheus::Counter>* tokenizations_stopped_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* buffered_bytes_;
  prometheus::Gauge* buffered_bytes_limit_;
  prometheus::Family<prometheus::Counter>* limit_rejections_;
  prometheus::Gauge* streams_paused_;
  prometheus::Gauge* connections_;
  prometheus::Family<prometheus::Gauge>* model_info_;
  prometheus::Family<prometheus::Gauge>* device_memory_;
  prometheus::Gauge* serving_;
  prometheus::Gauge* in_flight_;
  prometheus::Histogram* queue_wait_;
  prometheus::Histogram* batch_compute_;
};

// The process_* families above for this process, read from /proc/self now (empty where /proc is missing).
std::vector<prometheus::MetricFamily> ProcessMetricFamilies();

}  // namespace scored

#endif  // SCORED_SERVER_METRICS_H_

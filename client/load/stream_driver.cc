#include "client/load/stream_driver.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "scored/v1/scorer.pb.h"

namespace scored {
namespace load {
namespace {

// One client's ScoreStream calls: a writer thread keeps up to `inflight` requests outstanding, the
// client's thread reads the responses and matches them by request_id. Messages go as raw bytes
// (ByteBuffer) so that a malformed one can be sent as it is; the stream is opened the way the
// generated stub opens it. After the client cancels a stream (a cancel-kind request), it opens the
// next one.
class StreamClient {
 public:
  StreamClient(int client, SharedRun* shared, grpc::Channel* channel, ClientStats* stats)
      : client_(client),
        shared_(shared),
        channel_(channel),
        stats_(stats),
        generator_(shared->Generator(client)),
        kinds_(shared->Kinds(client)),
        delay_rng_(shared->DelayRng(client)) {}

  void Run() {
    const LoadOptions& options = shared_->options();
    absl::Time deadline = absl::InfiniteFuture();
    if (options.deadline > absl::ZeroDuration()) {
      deadline = absl::Now() + options.deadline +
                 (options.duration > absl::ZeroDuration() ? options.duration : absl::ZeroDuration());
    }
    while (RunOneStream(deadline)) {
    }
  }

 private:
  struct Pending {
    absl::Time start;
    int64_t tokens = 0;
    RequestKind kind = RequestKind::kNormal;
  };

  // One ScoreStream call; true when the client cancelled it and should open another.
  bool RunOneStream(absl::Time deadline) {
    static const grpc::internal::RpcMethod kScoreStream("/scored.v1.Scorer/ScoreStream",
                                                        grpc::internal::RpcMethod::BIDI_STREAMING);
    context_ = std::make_unique<grpc::ClientContext>();
    shared_->Prepare(context_.get(), deadline);
    stream_.reset(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
        channel_, kScoreStream, context_.get()));
    {
      absl::MutexLock lock(&mu_);
      stop_writing_ = false;
      cancelled_ = false;
    }
    std::thread writer([this] { WriteLoop(); });

    grpc::ByteBuffer buffer;
    while (stream_->Read(&buffer)) HandleResponse(buffer);
    {
      absl::MutexLock lock(&mu_);
      stop_writing_ = true;
    }
    writer.join();
    return EndStream(stream_->Finish());
  }

  // Requests never answered take the stream's final status `finish`; true when the client cancelled the
  // stream and should open another.
  bool EndStream(const grpc::Status& finish) {
    const LoadOptions& options = shared_->options();
    absl::MutexLock lock(&mu_);
    if (finish.error_code() == grpc::StatusCode::UNAVAILABLE && options.stop_on_unavailable) {
      stats_->stopped_unavailable = true;
    }
    for (const auto& [id, pending] : pending_) {
      RequestRecord record;
      record.client = client_;
      record.start = pending.start;
      record.end = absl::Now();
      record.tokens = pending.tokens;
      record.kind = pending.kind;
      std::string message;
      if (finish.ok()) {
        record.code = absl::StatusCode::kInternal;
        message = absl::StrCat("ScoreStream ended without a response to request ", id);
      } else {
        record.code = FromGrpcCode(finish.error_code());
        message = finish.error_message();
      }
      if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
        stats_->stopped_unavailable = true;
      }
      stats_->Add(record, message, options.record_requests, cancelled_);
    }
    pending_.clear();
    return cancelled_ && !stats_->stopped_unavailable;
  }

  void WriteLoop() {
    const int inflight = shared_->options().inflight;
    std::vector<int32_t> ids;
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this, inflight]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_writing_ || static_cast<int>(pending_.size()) < inflight;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_writing_) break;
      }
      if (!shared_->TakeTicket()) break;
      const uint64_t id = next_id_++;
      const RequestKind kind = kinds_.Next();
      generator_.Next(&ids);
      std::string bytes;
      int64_t n = static_cast<int64_t>(ids.size());
      if (kind == RequestKind::kMalformedRawBytes) {
        bytes = InvalidUtf8ScoreRequest(id);
      } else {
        const scored::v1::ScoreRequest request = BuildRequest(kind, id, ids, shared_->vocab_size());
        n = request.tokens().ids_size();
        bytes = request.SerializeAsString();
      }
      absl::Duration cancel_delay;
      {
        // Registered before the write so that a fast response always finds its entry.
        absl::MutexLock lock(&mu_);
        pending_[id] = Pending{absl::Now(), n, kind};
        cancel_delay = CancelDelay(stats_->last_ok_latency, &delay_rng_);
      }
      if (!stream_->Write(ToBuffer(bytes))) break;  // the call is over; Finish() gives the reason
      if (kind == RequestKind::kCancel) {
        absl::SleepFor(cancel_delay);
        absl::MutexLock lock(&mu_);
        if (stop_writing_) break;  // the stream ended meanwhile
        cancelled_ = true;
        context_->TryCancel();
        return;
      }
    }
    stream_->WritesDone();
  }

  void HandleResponse(const grpc::ByteBuffer& buffer) {
    const LoadOptions& options = shared_->options();
    RequestRecord record;
    record.client = client_;
    record.end = absl::Now();
    std::string message;
    scored::v1::ScoreResponse response;
    absl::MutexLock lock(&mu_);
    const bool parsed = ParseBuffer(buffer, &response);
    auto it = parsed ? pending_.find(response.request_id()) : pending_.end();
    if (!parsed) {
      record.start = record.end;
      record.code = absl::StatusCode::kInternal;
      message = "ScoreStream sent a response that does not parse";
    } else if (it == pending_.end()) {
      record.start = record.end;
      record.code = absl::StatusCode::kInternal;
      message = absl::StrCat("ScoreStream answered unknown or repeated request_id ", response.request_id());
    } else {
      record.start = it->second.start;
      record.tokens = it->second.tokens;
      record.kind = it->second.kind;
      pending_.erase(it);
      if (response.has_error()) {
        record.code = static_cast<absl::StatusCode>(response.error().code());
        message = response.error().message();
      } else if (!IsMalformed(record.kind)) {
        const absl::Status shape = CheckResponse(response, record.tokens);
        record.code = shape.code();
        message = std::string(shape.message());
      }
    }
    stats_->Add(record, message, options.record_requests);
    if (record.code == absl::StatusCode::kUnavailable && options.stop_on_unavailable) {
      stats_->stopped_unavailable = true;
      stop_writing_ = true;
    }
  }

  const int client_;
  SharedRun* const shared_;
  grpc::Channel* const channel_;
  ClientStats* const stats_;  // written under mu_ while the writer runs, by Run() after it ended
  // Used by the writer thread only (across streams).
  RequestGenerator generator_;
  KindSampler kinds_;
  uint64_t next_id_ = 0;
  std::mt19937_64 delay_rng_ ABSL_GUARDED_BY(mu_);
  // Per stream; replaced by RunOneStream while no writer runs.
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // this stream was cancelled by the writer
};

}  // namespace

void RunStreamClient(int client, SharedRun* shared, grpc::Channel* channel, ClientStats* stats) {
  StreamClient(client, shared, channel, stats).Run();
}

}  // namespace load
}  // namespace scored

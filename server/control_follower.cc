// The follower side of the control plane (node rank > 0; server/control_service.h): one Join call to the
// leader (FollowerCall), the transport over it (GrpcFollower), and GrpcControlTransportFactory::Follower,
// which retries the join until the leader admits it, refuses it, or the join timeout passes.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/control.grpc.pb.h"
#include "server/control_internal.h"
#include "server/control_service.h"

namespace scored {
namespace {

using control_internal::FromGrpcStatus;
using control_internal::HostPort;
using control_internal::LossWatcher;
using control_internal::Ms;
using control_internal::ParseRendezvous;

// Whether a failed attempt got a TCP connection that the leader then closed during the TLS / HTTP/2
// handshake (rather than no connection at all: refused, unresolvable, timed out). gRPC reports both as
// UNAVAILABLE and tells them apart only in the message, so this is a best effort for a better error: a
// miss leaves DEADLINE_EXCEEDED, which is what a leader that is not up gives.
bool LooksLikeAHandshakeRefusal(const absl::Status& status) {
  const absl::string_view m = status.message();
  return absl::IsUnavailable(status) && !absl::StrContains(m, "Connection refused") &&
         (absl::StrContains(m, "Socket closed") || absl::StrContains(m, "andshake") ||
          absl::StrContains(m, "SSL") || absl::StrContains(m, "ssl") || absl::StrContains(m, "certificate"));
}

// One Join call. Owned by its creator, who must not destroy it before done (the destructor cancels the
// call and waits).
class FollowerCall final : public grpc::ClientBidiReactor<v1::FollowerMessage, v1::LeaderMessage> {
 public:
  FollowerCall(v1::Control::Stub* stub, int nnodes, int node_rank, const std::string& token) {
    hello_.set_protocol_version(kControlProtocolVersion);
    hello_.set_nnodes(nnodes);
    hello_.set_node_rank(node_rank);
    if (!token.empty()) context_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    stub->async()->Join(&context_, this);
    StartWrite(&hello_);
    StartRead(&in_);
    StartCall();
  }

  ~FollowerCall() override {
    context_.TryCancel();
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }

  void OnWriteDone(bool) override {}

  void OnReadInitialMetadataDone(bool ok) override {
    absl::MutexLock lock(&mu);
    reached = reached || ok;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    bool more = true;
    {
      absl::MutexLock lock(&mu);
      if (!have_payload) {
        if (in_.kind_case() == v1::LeaderMessage::kPayload) {
          payload = std::move(*in_.mutable_payload());
          have_payload = true;
        } else {
          protocol_error =
              absl::InternalError("protocol error: the leader's first message is not the payload");
        }
      } else if (in_.kind_case() == v1::LeaderMessage::kBatch) {
        messages.push_back(std::move(*in_.mutable_batch()));
      } else {
        protocol_error = absl::InternalError("protocol error: a message from the leader that is not a batch");
      }
      more = protocol_error.ok();
    }
    if (more) {
      StartRead(&in_);
    } else {
      context_.TryCancel();
    }
  }

  void OnDone(const grpc::Status& s) override {
    absl::MutexLock lock(&mu);
    status = s;
    done = true;
  }

  absl::Mutex mu;
  bool reached ABSL_GUARDED_BY(mu) = false;  // the leader admitted the call (its initial metadata came)
  bool have_payload ABSL_GUARDED_BY(mu) = false;
  std::string payload ABSL_GUARDED_BY(mu);
  std::deque<std::string> messages ABSL_GUARDED_BY(mu);
  absl::Status protocol_error ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  grpc::Status status ABSL_GUARDED_BY(mu);

 private:
  grpc::ClientContext context_;
  v1::FollowerMessage hello_;
  v1::LeaderMessage in_;
};

class GrpcFollower final : public dist::ControlTransport {
 public:
  GrpcFollower(std::string address, int nnodes, int node_rank, std::shared_ptr<grpc::Channel> channel,
               std::unique_ptr<v1::Control::Stub> stub, std::unique_ptr<FollowerCall> call)
      : address_(std::move(address)),
        nnodes_(nnodes),
        node_rank_(node_rank),
        channel_(std::move(channel)),
        stub_(std::move(stub)),
        call_(std::move(call)) {
    absl::MutexLock lock(&call_->mu);
    payload_ = call_->payload;
  }

  ~GrpcFollower() override {
    {
      absl::MutexLock lock(&call_->mu);
      closing_ = true;
    }
    watcher_.Stop();
    call_.reset();  // cancels the call and waits for its end
  }

  int node_rank() const override { return node_rank_; }
  int nnodes() const override { return nnodes_; }
  const std::string& payload() const override { return payload_; }

  absl::Status Broadcast(absl::string_view) override {
    return absl::FailedPreconditionError("Broadcast() is for the leader (node rank 0)");
  }

  absl::StatusOr<std::string> Receive() override {
    FollowerCall* c = call_.get();
    absl::MutexLock lock(&c->mu);
    const auto ready = [c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !c->messages.empty() || c->done || !c->protocol_error.ok();
    };
    c->mu.Await(absl::Condition(&ready));
    if (!c->messages.empty()) {
      std::string m = std::move(c->messages.front());
      c->messages.pop_front();
      return m;
    }
    return EndLocked();
  }

  absl::Status Shutdown() override { return absl::OkStatus(); }

  void WatchPeers(std::function<void(const absl::Status&)> on_lost) override {
    watcher_.Start(
        &call_->mu,
        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          if (closing_) return absl::OkStatus();
          if (!call_->protocol_error.ok()) return absl::UnavailableError(EndLocked().message());
          if (!call_->done) return absl::OkStatus();
          const absl::Status end = EndLocked();
          return absl::IsCancelled(end) ? absl::OkStatus() : end;
        },
        std::move(on_lost));
  }

 private:
  // Why the stream ended (the message queue is empty), under call_->mu.
  absl::Status EndLocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!call_->protocol_error.ok()) {
      return absl::InternalError(absl::StrCat("control channel: from the leader (node rank 0) at ", address_,
                                              ": ", call_->protocol_error.message()));
    }
    if (call_->status.ok()) return absl::CancelledError("the leader shut the control channel down");
    return absl::UnavailableError(absl::StrCat("control channel: lost the leader (node rank 0) at ", address_,
                                               ": the stream ended without a clean shutdown (",
                                               FromGrpcStatus(call_->status).ToString(), ")"));
  }

  const std::string address_;
  const int nnodes_;
  const int node_rank_;
  std::string payload_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Control::Stub> stub_;
  std::unique_ptr<FollowerCall> call_;
  bool closing_ = false;  // under call_->mu
  LossWatcher watcher_;
};

// The channel to the leader: the control message limits, keepalive, quick reconnects.
std::shared_ptr<grpc::Channel> LeaderChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                             const ControlServiceOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxControlMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxFollowerMessageBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(Ms(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(Ms(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Retry a leader that is not up yet often (the defaults back off to minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A connection of its own (not shared with another channel to the same leader in this process).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, credentials, args);
}

// How one Join attempt ended. The call is kept until the next attempt (or the end of the join).
struct JoinAttempt {
  std::unique_ptr<FollowerCall> call;
  bool joined = false;            // the payload came: `call` is the follower's stream
  bool still_connecting = false;  // nothing came by the deadline and the leader never admitted the call
  grpc::Status ended;             // how the call ended without the payload
  absl::Status final_error;       // not OK: the join ends with it (no retry)
};

// One Join call, waited for until it has the payload, ends, or `deadline` passes.
JoinAttempt AttemptJoin(v1::Control::Stub* stub, int nnodes, int node_rank, const std::string& token,
                        const std::string& address, absl::Time deadline, absl::Duration join_timeout) {
  JoinAttempt attempt;
  attempt.call = std::make_unique<FollowerCall>(stub, nnodes, node_rank, token);
  FollowerCall* c = attempt.call.get();
  absl::MutexLock lock(&c->mu);
  const auto ready = [c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return c->have_payload || c->done || !c->protocol_error.ok();
  };
  if (!c->mu.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    if (c->reached) {  // admitted, but the payload never came: the other followers did not all join
      attempt.final_error = absl::DeadlineExceededError(absl::StrCat(
          "node rank ", node_rank, " reached the leader at ", address, " but got no payload within ",
          absl::FormatDuration(join_timeout), " (did every follower start?)"));
    } else {
      attempt.still_connecting = true;
    }
    return attempt;
  }
  if (!c->protocol_error.ok()) {
    attempt.final_error =
        absl::InternalError(absl::StrCat("from the leader at ", address, ": ", c->protocol_error.message()));
    return attempt;
  }
  attempt.joined = c->have_payload;
  attempt.ended = c->status;
  return attempt;
}

// The leader's answer to an attempt that ended without the payload, as the join's final error: a refusal
// (FAILED_PRECONDITION; UNAUTHENTICATED or PERMISSION_DENIED for the token) or a clean shutdown (OK). OK
// status for anything else: the attempt is retried.
absl::Status RefusalOf(const grpc::Status& ended, const std::string& address, int node_rank) {
  switch (ended.error_code()) {
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(absl::StrCat("the leader at ", address, " refused node rank ",
                                                        node_rank, ": ", ended.error_message()));
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::Status(FromGrpcStatus(ended).code(),
                          absl::StrCat("the leader at ", address, " refused node rank ", node_rank,
                                       "'s credentials (--auth_token_file): ", ended.error_message()));
    case grpc::StatusCode::OK:
      return absl::UnavailableError(absl::StrCat(
          "the leader at ", address, " shut down before it sent node rank ", node_rank, " the payload"));
    default:
      return absl::OkStatus();
  }
}

// The join's error once the join timeout passed; `last_error` is the last attempt's gRPC error.
absl::Status GaveUp(const absl::Status& last_error, const std::string& address, int node_rank,
                    absl::Duration join_timeout) {
  if (LooksLikeAHandshakeRefusal(last_error)) {
    return absl::UnavailableError(absl::StrCat(
        "node rank ", node_rank, " could not join the leader at ", address, " within ",
        absl::FormatDuration(join_timeout),
        ": the leader closed every connection during the handshake (TLS on one side only, a leader "
        "certificate this node does not trust, or no client certificate under mTLS?; last error: ",
        last_error.ToString(), ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat("node rank ", node_rank, " could not reach the leader at ",
                                                  address, " within ", absl::FormatDuration(join_timeout),
                                                  " (last error: ", last_error.ToString(),
                                                  "; is the leader up, with the same TLS settings?)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<dist::ControlTransport>> GrpcControlTransportFactory::Follower(
    absl::string_view rendezvous, int nnodes, int node_rank) {
  if (nnodes < 2)
    return absl::InvalidArgumentError(absl::StrCat("a follower needs nnodes >= 2, got ", nnodes));
  if (node_rank < 1 || node_rank >= nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a follower's node rank must be in [1, ", nnodes, "), got ", node_rank));
  }
  SCORED_ASSIGN_OR_RETURN(const HostPort hp, ParseRendezvous(rendezvous));
  if (hp.port == 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed leader address '", rendezvous,
                                                   "': a follower needs HOST:PORT with a port > 0"));
  }
  const std::string address(rendezvous);
  std::shared_ptr<grpc::Channel> channel = LeaderChannel(address, material_->channel_credentials, options_);
  auto stub = v1::Control::NewStub(channel);

  const absl::Time deadline = absl::Now() + options_.join_timeout;
  absl::Status last_error = absl::UnavailableError("no attempt finished");
  while (true) {
    JoinAttempt attempt = AttemptJoin(stub.get(), nnodes, node_rank, material_->token, address, deadline,
                                      options_.join_timeout);
    if (!attempt.final_error.ok()) return attempt.final_error;
    if (attempt.joined) {
      SCORED_LOG(INFO) << "control channel: node rank " << node_rank << " joined the leader at " << address;
      return std::unique_ptr<dist::ControlTransport>(new GrpcFollower(
          address, nnodes, node_rank, std::move(channel), std::move(stub), std::move(attempt.call)));
    }
    if (attempt.still_connecting) attempt.ended = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "");
    SCORED_RETURN_IF_ERROR(RefusalOf(attempt.ended, address, node_rank));
    if (!attempt.still_connecting) last_error = FromGrpcStatus(attempt.ended);
    const absl::Time now = absl::Now();
    if (now >= deadline) return GaveUp(last_error, address, node_rank, options_.join_timeout);
    absl::SleepFor(std::min(absl::Milliseconds(200), deadline - now));
  }
}

}  // namespace scored

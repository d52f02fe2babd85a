// The leader side of the control plane (node rank 0; server/control_service.h): its gRPC server, one
// JoinReactor per follower, the shared LeaderCore, and GrpcControlTransportFactory::Leader.
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/log_throttle.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/control.grpc.pb.h"
#include "server/control_internal.h"
#include "server/control_service.h"
#include "server/grpc_status.h"

namespace scored {
namespace {

using control_internal::HostPort;
using control_internal::LossWatcher;
using control_internal::Ms;
using control_internal::ParseRendezvous;
using Reactor = grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>;

class JoinReactor;

// One gRPC operation set decided under LeaderCore::mu and run after it is released (a gRPC call made
// under our lock could otherwise meet a reaction that takes it). `r` stays alive while it is busy: Finish
// is only decided for a reactor with no operation decided but not yet started and no write in flight.
struct Action {
  JoinReactor* r = nullptr;
  bool read = false;
  const v1::LeaderMessage* write = nullptr;
  bool finish = false;
  grpc::Status status;
};

// The leader's state, shared by the transport and every Join reactor; everything under mu.
struct LeaderCore {
  enum class Phase { kJoining, kRunning, kFailed, kShutdown, kClosing };

  LeaderCore(int nnodes, std::string payload, const BearerTokenAuth* auth)
      : nnodes(nnodes), payload(std::move(payload)), auth(auth), joined(nnodes, nullptr) {}

  const int nnodes;
  const std::string payload;
  const BearerTokenAuth* const auth;
  // A peer may knock as often as it likes: its refusals are logged a few lines a second, with a count.
  LogThrottle refusal_log{4};

  absl::Mutex mu;
  Phase phase ABSL_GUARDED_BY(mu) = Phase::kJoining;
  std::vector<JoinReactor*> joined ABSL_GUARDED_BY(mu);  // [nnodes]; [0] unused; null = not (or no longer)
  int num_joined ABSL_GUARDED_BY(mu) = 0;
  absl::Status join_error ABSL_GUARDED_BY(mu);  // FAILED_PRECONDITION once a join was refused
  absl::Status lost ABSL_GUARDED_BY(mu);        // first peer lost while running (or a failed Broadcast)
  int live ABSL_GUARDED_BY(mu) = 0;             // reactors not yet done

  Action Decide(JoinReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Perform(const Action& a);
  // A joined follower's stream failed or ended: while running, the first such is the loss.
  void PeerGone(JoinReactor* r, absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Refuses every joined follower with `why` (FAILED_PRECONDITION); returns the actions to perform.
  std::vector<Action> RefuseAllLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

class JoinReactor final : public Reactor {
 public:
  JoinReactor(LeaderCore* core, grpc::CallbackServerContext* context) : core_(core), context_(context) {}

  // Called once by the service right after construction: the token first, then the hello.
  void Begin() {
    absl::Status admitted = absl::OkStatus();
    if (core_->auth != nullptr) admitted = core_->auth->Check(*context_);
    Action a;
    {
      absl::MutexLock lock(&core_->mu);
      ++core_->live;
      if (!admitted.ok()) {
        if (const int64_t skipped = core_->refusal_log.Admit(); skipped >= 0) {
          SCORED_LOG(WARNING) << "control channel: refused a peer at " << context_->peer() << ": "
                              << admitted.message()
                              << (skipped > 0
                                      ? absl::StrCat(" (and ", skipped, " more refusals since the last line)")
                                      : std::string());
        }
        finish_wanted = true;
        finish_status = ToGrpcStatus(admitted);
      } else {
        want_read = true;
      }
      a = core_->Decide(this);
    }
    // Admitted: the initial metadata tells the follower that it reached the leader (an admitted join that
    // then times out is "no payload", not "leader unreachable"). Sent before any write, and before the
    // hello can be read (so no other thread acts on this reactor meanwhile).
    if (admitted.ok()) StartSendInitialMetadata();
    core_->Perform(a);
  }

  void OnReadDone(bool ok) override {
    Action a;
    std::vector<Action> more;
    {
      absl::MutexLock lock(&core_->mu);
      --reads_pending;
      if (!ok) {
        dead = true;
        core_->PeerGone(this, "its stream closed (process gone or connection lost)");
      } else if (!got_hello) {
        got_hello = true;
        more = Hello();
      } else {
        dead = true;
        core_->PeerGone(this, "protocol error: a follower sends only its hello");
      }
      a = core_->Decide(this);
    }
    core_->Perform(a);
    for (const Action& m : more) core_->Perform(m);
  }

  void OnWriteDone(bool ok) override {
    Action a;
    {
      absl::MutexLock lock(&core_->mu);
      writing = false;
      if (!queue.empty()) queue.pop_front();
      if (!ok) {
        dead = true;
        core_->PeerGone(this, "sending failed (process gone or connection lost)");
      }
      a = core_->Decide(this);
    }
    core_->Perform(a);
  }

  void OnCancel() override {
    Action a;
    {
      absl::MutexLock lock(&core_->mu);
      dead = true;
      core_->PeerGone(this, "its stream was cancelled (process gone or connection lost)");
      a = core_->Decide(this);
    }
    core_->Perform(a);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&core_->mu);
      if (rank > 0 && core_->joined[rank] == this) {
        core_->joined[rank] = nullptr;
        if (core_->phase == LeaderCore::Phase::kJoining) --core_->num_joined;
      }
      --core_->live;
    }
    delete this;
  }

  // All under core_->mu.
  int rank = 0;  // > 0 once joined
  bool got_hello = false;
  bool want_read = false;  // a read decided but not started
  int reads_pending = 0;   // reads started, not done
  int busy = 0;            // actions decided but not yet run
  bool writing = false;    // queue.front() is being written
  bool dead = false;       // the stream failed: finish at once (CANCELLED), nothing more to send
  bool finish_wanted = false;
  bool finished = false;
  grpc::Status finish_status;
  std::deque<std::shared_ptr<const v1::LeaderMessage>> queue;  // to send, in order
  v1::FollowerMessage in;

 private:
  // The hello (core_->mu held). Accepts it (rank set, joined) or refuses the whole join.
  std::vector<Action> Hello() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
    const std::string peer = context_->peer();
    const int64_t their_rank = in.node_rank();
    const int nnodes = core_->nnodes;
    if (core_->phase != LeaderCore::Phase::kJoining) {
      finish_wanted = true;
      finish_status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   absl::StrCat("node rank ", their_rank, " at ", peer,
                                                ": the leader is not accepting joins (the group is complete "
                                                "or its join failed)"));
      SCORED_LOG(WARNING) << "control channel: " << finish_status.error_message();
      return {};
    }
    std::string refusal;
    if (in.protocol_version() != kControlProtocolVersion) {
      refusal = absl::StrCat("node rank ", their_rank, " at ", peer, " speaks control protocol version ",
                             in.protocol_version(), ", the leader speaks ", kControlProtocolVersion,
                             " (run the same scored build everywhere)");
    } else if (in.nnodes() != nnodes) {
      refusal =
          absl::StrCat("node rank ", their_rank, " at ", peer, " was started with --nnodes=", in.nnodes(),
                       " but the leader has --nnodes=", nnodes);
    } else if (their_rank < 1 || their_rank >= nnodes) {
      refusal =
          absl::StrCat("a follower at ", peer, " says node rank ", their_rank, ", outside [1, ", nnodes, ")");
    } else if (core_->joined[their_rank] != nullptr) {
      refusal = absl::StrCat("node rank ", their_rank, " joined twice (from ",
                             core_->joined[their_rank]->context_->peer(), " and from ", peer,
                             "): every process needs its own --node_rank");
    }
    if (!refusal.empty()) {
      finish_wanted = true;
      finish_status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, refusal);
      core_->phase = LeaderCore::Phase::kFailed;
      core_->join_error = absl::FailedPreconditionError(absl::StrCat("control channel: ", refusal));
      return core_->RefuseAllLocked(refusal);
    }
    rank = static_cast<int>(their_rank);
    core_->joined[rank] = this;
    ++core_->num_joined;
    want_read = true;  // stays pending: it fails when the follower goes away
    SCORED_LOG(INFO) << "control channel: node rank " << rank << " joined from " << peer << " ("
                     << core_->num_joined << " of " << nnodes - 1 << ")";
    return {};
  }

  friend struct LeaderCore;
  LeaderCore* const core_;
  grpc::CallbackServerContext* const context_;
};

Action LeaderCore::Decide(JoinReactor* r) {
  Action a;
  if (r->finished || r->busy > 0) return a;
  a.r = r;
  if (r->want_read && !r->dead && !r->finish_wanted) {
    r->want_read = false;
    ++r->reads_pending;
    a.read = true;
  }
  if (!r->writing && !r->dead && !r->queue.empty()) {
    r->writing = true;
    a.write = r->queue.front().get();
  } else if (!r->writing && (r->dead || r->finish_wanted)) {
    r->finished = true;
    a.finish = true;
    a.status = r->dead && !r->finish_wanted ? grpc::Status::CANCELLED : r->finish_status;
  }
  if (!a.read && a.write == nullptr && !a.finish) return Action();
  if (!a.finish) ++r->busy;
  return a;
}

void LeaderCore::Perform(const Action& a) {
  JoinReactor* r = a.r;
  if (r == nullptr) return;
  if (a.finish) {
    r->Finish(a.status);  // `r` may be gone once this returns
    return;
  }
  if (a.read) r->StartRead(&r->in);
  if (a.write != nullptr) r->StartWrite(a.write);
  Action next;
  {
    absl::MutexLock lock(&mu);
    --r->busy;
    next = Decide(r);
  }
  Perform(next);
}

void LeaderCore::PeerGone(JoinReactor* r, absl::string_view why) {
  r->queue.clear();
  if (r->rank == 0) return;
  if (phase == Phase::kJoining) {
    // Gone before the group was complete: its rank may join again (a follower that restarted).
    if (joined[r->rank] == r) {
      joined[r->rank] = nullptr;
      --num_joined;
    }
    SCORED_LOG(WARNING) << "control channel: node rank " << r->rank << " left during the join: " << why;
    return;
  }
  if (phase == Phase::kRunning && lost.ok()) {
    lost = absl::UnavailableError(absl::StrCat("control channel: lost node rank ", r->rank, ": ", why));
  }
}

std::vector<Action> LeaderCore::RefuseAllLocked(const std::string& why) {
  std::vector<Action> actions;
  for (int rank = 1; rank < nnodes; ++rank) {
    JoinReactor* r = joined[rank];
    if (r == nullptr) continue;
    r->finish_wanted = true;
    r->finish_status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
    actions.push_back(Decide(r));
  }
  return actions;
}

class ControlServiceImpl final : public v1::Control::CallbackService {
 public:
  explicit ControlServiceImpl(LeaderCore* core) : core_(core) {}
  Reactor* Join(grpc::CallbackServerContext* context) override {
    auto* reactor = new JoinReactor(core_, context);
    reactor->Begin();
    return reactor;
  }

 private:
  LeaderCore* const core_;
};

class GrpcLeader final : public dist::ControlTransport {
 public:
  GrpcLeader(std::unique_ptr<LeaderCore> core, std::unique_ptr<ControlServiceImpl> service,
             std::unique_ptr<grpc::Server> server, absl::Duration peer_timeout)
      : core_(std::move(core)),
        service_(std::move(service)),
        server_(std::move(server)),
        peer_timeout_(peer_timeout) {}

  ~GrpcLeader() override {
    {
      absl::MutexLock lock(&core_->mu);
      if (core_->phase != LeaderCore::Phase::kShutdown) core_->phase = LeaderCore::Phase::kClosing;
    }
    watcher_.Stop();
    // Cancels every open stream (followers see UNAVAILABLE); returns once every reactor is done.
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  int node_rank() const override { return 0; }
  int nnodes() const override { return core_->nnodes; }
  const std::string& payload() const override { return core_->payload; }

  absl::Status Broadcast(absl::string_view message) override {
    if (static_cast<int64_t>(message.size()) > kMaxControlMessageBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "control message of ", message.size(), " bytes exceeds the limit of ", kMaxControlMessageBytes));
    }
    auto m = std::make_shared<v1::LeaderMessage>();
    m->set_batch(std::string(message));
    std::vector<Action> actions;
    {
      absl::MutexLock lock(&core_->mu);
      SCORED_RETURN_IF_ERROR(UsableLocked());
      for (int rank = 1; rank < core_->nnodes; ++rank) {
        core_->joined[rank]->queue.push_back(m);
        actions.push_back(core_->Decide(core_->joined[rank]));
      }
    }
    for (const Action& a : actions) core_->Perform(a);
    // Back-pressure: wait until every follower took the previous messages (only this one may be left).
    absl::MutexLock lock(&core_->mu);
    int stalled = 0;
    const auto drained = [&] {
      if (!core_->lost.ok() || core_->phase != LeaderCore::Phase::kRunning) return true;
      for (int rank = 1; rank < core_->nnodes; ++rank) {
        const JoinReactor* r = core_->joined[rank];
        if (r != nullptr && r->queue.size() > 1) {
          stalled = rank;
          return false;
        }
      }
      return true;
    };
    if (!core_->mu.AwaitWithTimeout(absl::Condition(&drained), peer_timeout_) && core_->lost.ok()) {
      core_->lost =
          absl::UnavailableError(absl::StrCat("control channel: node rank ", stalled, " took no message for ",
                                              absl::FormatDuration(peer_timeout_), " (stalled)"));
    }
    return UsableLocked();
  }

  absl::StatusOr<std::string> Receive() override {
    return absl::FailedPreconditionError("Receive() is for followers (node rank > 0)");
  }

  absl::Status Shutdown() override {
    std::vector<Action> actions;
    {
      absl::MutexLock lock(&core_->mu);
      if (core_->phase == LeaderCore::Phase::kShutdown) return absl::OkStatus();
      core_->phase = LeaderCore::Phase::kShutdown;
      for (int rank = 1; rank < core_->nnodes; ++rank) {
        JoinReactor* r = core_->joined[rank];
        if (r == nullptr) continue;
        r->finish_wanted = true;
        r->finish_status = grpc::Status::OK;
        actions.push_back(core_->Decide(r));
      }
    }
    for (const Action& a : actions) core_->Perform(a);
    // Told once the status went out (the reactor is done).
    absl::MutexLock lock(&core_->mu);
    int pending = 0;
    const auto told = [&] {
      for (int rank = 1; rank < core_->nnodes; ++rank) {
        if (core_->joined[rank] != nullptr) {
          pending = rank;
          return false;
        }
      }
      return true;
    };
    if (!core_->mu.AwaitWithTimeout(absl::Condition(&told), peer_timeout_)) {
      return absl::UnavailableError(absl::StrCat("control channel: telling node rank ", pending,
                                                 " to shut down: no progress for ",
                                                 absl::FormatDuration(peer_timeout_)));
    }
    return absl::OkStatus();
  }

  void WatchPeers(std::function<void(const absl::Status&)> on_lost) override {
    LeaderCore* core = core_.get();
    watcher_.Start(
        &core_->mu,
        [core]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return core->phase == LeaderCore::Phase::kRunning ? core->lost : absl::OkStatus();
        },
        std::move(on_lost));
  }

 private:
  absl::Status UsableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
    if (core_->phase == LeaderCore::Phase::kShutdown) {
      return absl::FailedPreconditionError("the control channel was shut down");
    }
    if (!core_->lost.ok()) return core_->lost;
    for (int rank = 1; rank < core_->nnodes; ++rank) {
      if (core_->joined[rank] == nullptr) {
        core_->lost = absl::UnavailableError(absl::StrCat("control channel: lost node rank ", rank));
        return core_->lost;
      }
    }
    return absl::OkStatus();
  }

  const std::unique_ptr<LeaderCore> core_;
  const std::unique_ptr<ControlServiceImpl> service_;
  const std::unique_ptr<grpc::Server> server_;
  const absl::Duration peer_timeout_;
  LossWatcher watcher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<dist::ControlTransport>> GrpcControlTransportFactory::Leader(
    absl::string_view rendezvous, int nnodes, absl::string_view payload) {
  if (nnodes < 2) {
    return absl::InvalidArgumentError(absl::StrCat("a control channel needs nnodes >= 2, got ", nnodes));
  }
  if (static_cast<int64_t>(payload.size()) > kMaxControlMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload of ", payload.size(), " bytes exceeds ", kMaxControlMessageBytes));
  }
  SCORED_ASSIGN_OR_RETURN(const HostPort hp, ParseRendezvous(rendezvous));
  const std::string listen = absl::StrCat("[::]:", hp.port);
  auto core = std::make_unique<LeaderCore>(nnodes, std::string(payload), material_->auth.get());
  auto service = std::make_unique<ControlServiceImpl>(core.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, material_->server_credentials, &port);
  builder.RegisterService(service.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxFollowerMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxControlMessageBytes));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(Ms(options_.keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(Ms(options_.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept the followers' keepalive pings on an idle stream (the default policy allows one per 5 min
  // and answers more with GOAWAY "too_many_pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(Ms(options_.keepalive_time) / 2));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("control channel: cannot listen on ", listen,
                                               " (port in use, or a bad --tls_* certificate or key?)"));
  }
  SCORED_LOG(INFO) << "control channel: listening on " << listen.substr(0, listen.rfind(':')) << ":" << port
                   << " for " << nnodes - 1 << " follower(s)";
  if (options_.on_listening) options_.on_listening(port);

  const absl::Time deadline = absl::Now() + options_.join_timeout;
  std::vector<Action> actions;
  absl::Status failed;
  {
    LeaderCore* c = core.get();
    absl::MutexLock lock(&c->mu);
    const auto complete = [c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return c->num_joined == c->nnodes - 1 || c->phase == LeaderCore::Phase::kFailed;
    };
    c->mu.AwaitWithDeadline(absl::Condition(&complete), deadline);
    if (c->phase == LeaderCore::Phase::kFailed) {
      failed = c->join_error;
    } else if (c->num_joined < nnodes - 1) {
      std::vector<int> missing;
      for (int rank = 1; rank < nnodes; ++rank) {
        if (c->joined[rank] == nullptr) missing.push_back(rank);
      }
      failed = absl::DeadlineExceededError(
          absl::StrCat("node rank(s) ", absl::StrJoin(missing, ", "), " of ", nnodes,
                       " did not join the control channel on ", rendezvous, " within ",
                       absl::FormatDuration(options_.join_timeout), " (", c->num_joined, " of ", nnodes - 1,
                       " follower(s) joined)"));
      c->phase = LeaderCore::Phase::kFailed;
      actions = c->RefuseAllLocked("the leader gave up waiting for the other followers");
    } else {
      c->phase = LeaderCore::Phase::kRunning;
      auto m = std::make_shared<v1::LeaderMessage>();
      m->set_payload(c->payload);
      for (int rank = 1; rank < nnodes; ++rank) {
        c->joined[rank]->queue.push_back(m);
        actions.push_back(c->Decide(c->joined[rank]));
      }
    }
  }
  for (const Action& a : actions) core->Perform(a);
  if (!failed.ok()) {
    // Let the refusals reach the followers (bounded), then close.
    {
      LeaderCore* c = core.get();
      absl::MutexLock lock(&c->mu);
      const auto quiet = [c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->live == 0; };
      c->mu.AwaitWithTimeout(absl::Condition(&quiet), absl::Seconds(2));
      c->phase = LeaderCore::Phase::kClosing;
    }
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
    return failed;
  }
  SCORED_LOG(INFO) << "control channel: all " << nnodes - 1 << " follower(s) joined";
  return std::unique_ptr<dist::ControlTransport>(
      new GrpcLeader(std::move(core), std::move(service), std::move(server), options_.peer_timeout));
}

}  // namespace scored

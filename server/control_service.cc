#include "server/control_service.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "scored/v1/control.grpc.pb.h"
#include "server/grpc_status.h"

namespace scored {

struct GrpcControlTransportFactory::Material {
  std::shared_ptr<grpc::ServerCredentials> server_credentials;    // leader: plaintext, TLS or mTLS
  std::unique_ptr<BearerTokenAuth> auth;                          // leader: null = no token required
  std::string token;                                              // follower: sent when non-empty
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;  // follower
};

namespace {

using Reactor = grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>;

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// gRPC's codes are google.rpc.Code, as absl's.
absl::Status FromGrpcStatus(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::StatusOr<std::string> ReadTextFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  return text.str();
}

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

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port" or "[v6]:port" (the form followers dial); the port in [0, 65535].
absl::StatusOr<HostPort> ParseRendezvous(absl::string_view address) {
  HostPort hp;
  absl::string_view rest;
  const auto malformed = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed rendezvous address '", address, "': ", why));
  };
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return malformed("expected [IPv6]:PORT, HOST:PORT or IPv4:PORT");
    }
    hp.host = std::string(address.substr(1, close - 1));
    rest = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return malformed("expected HOST:PORT");
    hp.host = std::string(address.substr(0, colon));
    if (hp.host.find(':') != std::string::npos)
      return malformed("write an IPv6 host in brackets, [::1]:PORT");
    rest = address.substr(colon + 1);
  }
  if (rest.empty() || rest.size() > 5 || rest.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(rest, &hp.port) || hp.port > 65535) {
    return malformed("the port must be an integer in [0, 65535]");
  }
  return hp;
}

// ---------------------------------------------------------------------------------------------------
// Leader

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
        SCORED_LOG(WARNING) << "control channel: refused a peer at " << context_->peer() << ": "
                            << admitted.message();
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

// Runs on_lost once on a thread of its own when `lost()` (checked under `mu`) turns non-OK, unless the
// transport closes first.
class LossWatcher {
 public:
  ~LossWatcher() { Stop(); }
  void Start(absl::Mutex* mu, std::function<absl::Status()> lost,
             std::function<void(const absl::Status&)> on_lost) {
    mu_ = mu;
    thread_ = std::thread([this, mu, lost = std::move(lost), on_lost = std::move(on_lost)] {
      absl::Status status;
      {
        absl::MutexLock lock(mu);
        const auto ready = [&] {
          status = lost();
          return !status.ok() || stop_;
        };
        mu->Await(absl::Condition(&ready));
        if (stop_) return;
      }
      on_lost(status);
    });
  }
  // Before the watched state goes away; the caller must not hold `mu`.
  void Stop() {
    if (!thread_.joinable()) return;
    {
      absl::MutexLock lock(mu_);
      stop_ = true;
    }
    thread_.join();
  }

 private:
  absl::Mutex* mu_ = nullptr;
  bool stop_ = false;  // under *mu_
  std::thread thread_;
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

// ---------------------------------------------------------------------------------------------------
// Follower

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

}  // namespace

absl::StatusOr<std::shared_ptr<GrpcControlTransportFactory>> GrpcControlTransportFactory::Create(
    const ControlSecurity& security, const ControlServiceOptions& options) {
  auto material = std::make_shared<Material>();
  SCORED_ASSIGN_OR_RETURN(material->server_credentials, BuildServerCredentials(security.tls));
  if (!security.auth_token_file.empty()) {
    SCORED_ASSIGN_OR_RETURN(material->auth, BearerTokenAuth::FromFile(security.auth_token_file));
    SCORED_ASSIGN_OR_RETURN(std::string text, ReadTextFile("auth_token_file", security.auth_token_file));
    material->token = std::string(absl::StripAsciiWhitespace(text));
  }
  if (security.tls.cert_file.empty()) {
    material->channel_credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    SCORED_ASSIGN_OR_RETURN(std::string cert, ReadTextFile("tls_cert", security.tls.cert_file));
    if (!security.tls.client_ca_file.empty()) {
      SCORED_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadTextFile("tls_client_ca", security.tls.client_ca_file));
      if (!ssl.pem_root_certs.empty() && ssl.pem_root_certs.back() != '\n') ssl.pem_root_certs += '\n';
      ssl.pem_cert_chain = cert;
      SCORED_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadTextFile("tls_key", security.tls.key_file));
    }
    ssl.pem_root_certs += cert;
    material->channel_credentials = grpc::SslCredentials(ssl);
  }
  return std::shared_ptr<GrpcControlTransportFactory>(
      new GrpcControlTransportFactory(std::move(material), options));
}

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
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxControlMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxFollowerMessageBytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(Ms(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(Ms(options_.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Retry a leader that is not up yet often (the defaults back off to minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A connection of its own (not shared with another channel to the same leader in this process).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, material_->channel_credentials, args);
  auto stub = v1::Control::NewStub(channel);

  const absl::Time deadline = absl::Now() + options_.join_timeout;
  absl::Status last_error = absl::UnavailableError("no attempt finished");
  while (true) {
    auto call = std::make_unique<FollowerCall>(stub.get(), nnodes, node_rank, material_->token);
    grpc::Status ended;
    bool joined = false;
    bool still_connecting = false;
    {
      FollowerCall* c = call.get();
      absl::MutexLock lock(&c->mu);
      const auto ready = [c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return c->have_payload || c->done || !c->protocol_error.ok();
      };
      if (!c->mu.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        if (c->reached) {  // admitted, but the payload never came: the other followers did not all join
          last_error = absl::DeadlineExceededError(absl::StrCat(
              "node rank ", node_rank, " reached the leader at ", address, " but got no payload within ",
              absl::FormatDuration(options_.join_timeout), " (did every follower start?)"));
          break;
        }
        still_connecting = true;
      } else {
        if (!c->protocol_error.ok()) {
          return absl::InternalError(
              absl::StrCat("from the leader at ", address, ": ", c->protocol_error.message()));
        }
        joined = c->have_payload;
        ended = c->status;
      }
    }
    if (joined) {
      SCORED_LOG(INFO) << "control channel: node rank " << node_rank << " joined the leader at " << address;
      return std::unique_ptr<dist::ControlTransport>(
          new GrpcFollower(address, nnodes, node_rank, std::move(channel), std::move(stub), std::move(call)));
    }
    if (still_connecting) ended = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "");
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
        if (!still_connecting) last_error = FromGrpcStatus(ended);
        break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      if (LooksLikeAHandshakeRefusal(last_error)) {
        last_error = absl::UnavailableError(absl::StrCat(
            "node rank ", node_rank, " could not join the leader at ", address, " within ",
            absl::FormatDuration(options_.join_timeout),
            ": the leader closed every connection during the handshake (TLS on one side only, a leader "
            "certificate this node does not trust, or no client certificate under mTLS?; last error: ",
            last_error.ToString(), ")"));
      } else {
        last_error = absl::DeadlineExceededError(
            absl::StrCat("node rank ", node_rank, " could not reach the leader at ", address, " within ",
                         absl::FormatDuration(options_.join_timeout), " (last error: ", last_error.ToString(),
                         "; is the leader up, with the same TLS settings?)"));
      }
      break;
    }
    absl::SleepFor(std::min(absl::Milliseconds(200), deadline - now));
  }
  return last_error;
}

}  // namespace scored

#include "client/ppl/scorer_client.h"

#include <chrono>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/connect/security.h"
#include "grpcpp/grpcpp.h"

namespace scored {
namespace ppl {
namespace {

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// Admission of ScoreStream requests: at most `limit` outstanding; Stop() releases a waiting writer.
class InflightGate {
 public:
  explicit InflightGate(int64_t limit) : limit_(limit) {}

  // Blocks until a slot is free (true) or Stop() was called (false).
  bool Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &InflightGate::Ready));
    if (stopped_) return false;
    ++outstanding_;
    return true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --outstanding_;
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || outstanding_ < limit_; }

  const int64_t limit_;
  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// The ScoreRequest of window `w` (windows[id]), sent as request `id` (ScoreStream requests carry the
// window's index).
absl::StatusOr<scored::v1::ScoreRequest> BuildRequest(const Window& w, uint64_t id, const RequestOptions& o) {
  scored::v1::ScoreRequest request;
  request.set_request_id(id);
  request.mutable_tokens()->mutable_ids()->Add(w.tokens.begin(), w.tokens.end());
  request.set_score_from(w.score_from);
  request.set_want_reference(o.want_reference);
  request.set_top_k(o.top_k);
  request.set_want_entropy(o.want_entropy);
  request.set_want_min_logprob(o.want_min_logprob);
  if (o.add_candidates) {
    absl::Status added = o.add_candidates(static_cast<int64_t>(id), &request);
    if (!added.ok()) return added;
  }
  return request;
}

// The optional arrays `o` asked for, checked and copied into *score (id: the window, for messages).
absl::Status ReadOptionalArrays(const scored::v1::ScoreResponse& response, uint64_t id, const Window& w,
                                const RequestOptions& o, WindowScore* score) {
  const int64_t n = w.num_scored();
  auto missing = [&](const char* what, int64_t got, int64_t want) {
    return absl::InternalError(
        absl::StrCat("window ", id, ": the response has ", got, " ", what, " for ", want, " asked"));
  };
  score->entropy.clear();
  score->top_ids.clear();
  score->top_logprobs.clear();
  if (o.want_entropy) {
    if (response.entropy_size() != n) return missing("entropies", response.entropy_size(), n);
    score->entropy.assign(response.entropy().begin(), response.entropy().end());
  }
  if (o.top_k > 0) {
    if (response.top_k_size() != n) return missing("top-k lists", response.top_k_size(), n);
    score->top_ids.reserve(static_cast<size_t>(n * o.top_k));
    score->top_logprobs.reserve(static_cast<size_t>(n * o.top_k));
    for (const scored::v1::TopTokens& list : response.top_k()) {
      if (list.tokens_size() != o.top_k) return missing("top-k entries", list.tokens_size(), o.top_k);
      for (const scored::v1::TopToken& t : list.tokens()) {
        score->top_ids.push_back(t.id());
        score->top_logprobs.push_back(t.logprob());
      }
    }
  }
  if (response.candidate_logprob_size() != n * o.num_candidates) {
    return missing("candidate logprobs", response.candidate_logprob_size(), n * o.num_candidates);
  }
  score->candidate_logprobs.assign(response.candidate_logprob().begin(), response.candidate_logprob().end());
  if (o.want_min_logprob && response.min_logprob_size() != n) {
    return missing("min logprobs", response.min_logprob_size(), n);
  }
  score->min_logprobs.assign(response.min_logprob().begin(), response.min_logprob().end());
  return absl::OkStatus();
}

// The window's own error response (request `id`) as a status.
absl::Status ResponseError(const scored::v1::ScoreResponse& response, uint64_t id) {
  return absl::Status(static_cast<absl::StatusCode>(response.error().code()),
                      absl::StrCat("window ", id, ": ", response.error().message()));
}

// The checked WindowScore of `response` for `w` (id = its request_id, for messages); the window's own error
// response comes back as its status.
absl::Status ReadWindowScore(const scored::v1::ScoreResponse& response, uint64_t id, const Window& w,
                             const RequestOptions& options, WindowScore* score) {
  const bool want_reference = options.want_reference;
  if (response.has_error()) return ResponseError(response, id);
  if (response.num_scored() != w.num_scored() || response.logprob_size() != w.num_scored() ||
      response.first_scored() != w.score_from) {
    return absl::InternalError(absl::StrCat("window ", id, ": expected ", w.num_scored(),
                                            " scored positions from ", w.score_from, ", got num_scored ",
                                            response.num_scored(), " with ", response.logprob_size(),
                                            " logprobs from ", response.first_scored()));
  }
  if (want_reference &&
      (response.ref_logprob_size() != w.num_scored() || response.kld_size() != w.num_scored() ||
       response.same_top_size() != w.num_scored())) {
    return absl::InternalError(absl::StrCat("window ", id, ": want_reference asked but the response has ",
                                            response.ref_logprob_size(), " ref_logprob, ",
                                            response.kld_size(), " kld and ", response.same_top_size(),
                                            " same_top values for ", w.num_scored(), " scored positions"));
  }
  score->sum_logprob = response.sum_logprob();
  score->logprobs.assign(response.logprob().begin(), response.logprob().end());
  score->sum_ref_logprob = response.sum_ref_logprob();
  score->ref_logprobs.assign(response.ref_logprob().begin(), response.ref_logprob().end());
  score->kld.assign(response.kld().begin(), response.kld().end());
  score->same_top.assign(response.same_top().begin(), response.same_top().end());
  return ReadOptionalArrays(response, id, w, options, score);
}

}  // namespace

bool IsServerLost(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

WindowPool::WindowPool(int64_t num_windows, ResultFn on_result)
    : on_result_(std::move(on_result)),
      done_(static_cast<size_t>(num_windows), false),
      remaining_(num_windows) {
  for (int64_t i = 0; i < num_windows; ++i) queue_.push_back(i);
}

bool WindowPool::TakeReady(TakeArgs* a) {
  const WindowPool& p = *a->pool;
  return !p.queue_.empty() || p.remaining_ == 0 || !p.status_.ok() || p.stopped_.count(a->stream) > 0;
}

int64_t WindowPool::Take(int stream) {
  absl::MutexLock lock(&mu_);
  TakeArgs args{this, stream};
  mu_.Await(absl::Condition(&WindowPool::TakeReady, &args));
  if (queue_.empty() || remaining_ == 0 || !status_.ok() || stopped_.count(stream) > 0) return -1;
  const int64_t index = queue_.front();
  queue_.pop_front();
  return index;
}

void WindowPool::Done(int stream, int64_t index, const WindowScore& score) {
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || index >= static_cast<int64_t>(done_.size()) || done_[static_cast<size_t>(index)]) return;
    done_[static_cast<size_t>(index)] = true;
  }
  {
    absl::MutexLock lock(&result_mu_);
    on_result_(stream, index, score);
  }
  // Counted after on_result: when remaining() reaches 0 every result has been handed over.
  absl::MutexLock lock(&mu_);
  --remaining_;
}

void WindowPool::Requeue(const std::vector<int64_t>& indices) {
  absl::MutexLock lock(&mu_);
  for (auto it = indices.rbegin(); it != indices.rend(); ++it) {
    if (!done_[static_cast<size_t>(*it)]) queue_.push_front(*it);
  }
}

void WindowPool::StopStream(int stream) {
  absl::MutexLock lock(&mu_);
  stopped_.insert(stream);
}

void WindowPool::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status_.ok()) status_ = status;
}

absl::Status WindowPool::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

int64_t WindowPool::remaining() const {
  absl::MutexLock lock(&mu_);
  return remaining_;
}

ScorerClient::ScorerClient(ScorerClientOptions options, std::unique_ptr<scored::v1::Scorer::Stub> stub)
    : options_(std::move(options)), stub_(std::move(stub)) {}

absl::StatusOr<std::unique_ptr<ScorerClient>> ScorerClient::Connect(const ScorerClientOptions& options) {
  grpc::ChannelArguments args;
  // Tokenize responses of a whole dataset and long windows exceed gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  client::ClientSecurity security;
  security.tls = options.tls;
  security.root_certs_pem = options.tls_root_certs_pem;
  security.cert_chain_pem = options.tls_cert_chain_pem;
  security.private_key_pem = options.tls_private_key_pem;
  std::shared_ptr<grpc::ChannelCredentials> credentials = client::ChannelCredentials(security);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.address, credentials, args);
  if (!channel->WaitForConnected(DeadlineAfter(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to scored at ", options.address, " within ",
        absl::FormatDuration(options.connect_timeout),
        options.tls ? " (is the server running there, speaking TLS with a certificate --tls_ca trusts, "
                      "and accepting this client's certificate?)"
                    : " (is the server running and listening there?)"));
  }
  return std::unique_ptr<ScorerClient>(new ScorerClient(options, scored::v1::Scorer::NewStub(channel)));
}

void ScorerClient::Prepare(grpc::ClientContext* context, bool with_deadline) const {
  if (with_deadline) context->set_deadline(DeadlineAfter(options_.rpc_timeout));
  client::AddAuthorization(options_.bearer_token, context);
}

absl::StatusOr<scored::v1::ModelInfo> ScorerClient::GetModelInfo() {
  grpc::ClientContext context;
  Prepare(&context, true);
  scored::v1::ModelInfo info;
  const grpc::Status status = stub_->GetModelInfo(&context, scored::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return FromGrpc(status, "GetModelInfo");
  return info;
}

absl::StatusOr<TokenStream> ScorerClient::Tokenize(const std::string& text, bool want_byte_lengths) {
  grpc::ClientContext context;
  Prepare(&context, true);
  scored::v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_bos(false);
  request.set_want_byte_lengths(want_byte_lengths);
  scored::v1::TokenizeResponse response;
  const grpc::Status status = stub_->Tokenize(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Tokenize of ", text.size(), " bytes of text: ", status.error_message(),
        " (the text may exceed the server's message size limit; tokenize locally with --tokenizer DIR)"));
  }
  if (status.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
    return absl::OutOfRangeError(
        absl::StrCat("Tokenize of ", text.size(), " bytes of text: ", status.error_message(),
                     " (a limit of the server, a flag of scored; tokenize locally with "
                     "--tokenizer DIR)"));
  }
  if (!status.ok()) return FromGrpc(status, "Tokenize");
  TokenStream stream;
  stream.ids.assign(response.ids().begin(), response.ids().end());
  if (want_byte_lengths) {
    if (response.byte_lengths_size() != response.ids_size()) {
      return absl::InternalError(absl::StrCat("Tokenize returned ", response.byte_lengths_size(),
                                              " byte lengths for ", response.ids_size(), " ids"));
    }
    stream.byte_lengths.assign(response.byte_lengths().begin(), response.byte_lengths().end());
  }
  return stream;
}

absl::Status ScorerClient::ScoreWindows(const std::vector<Window>& windows, int inflight,
                                        const RequestOptions& options,
                                        const std::function<void(int64_t, const WindowScore&)>& on_result) {
  const int64_t n = static_cast<int64_t>(windows.size());
  if (n == 0) return absl::OkStatus();
  grpc::ClientContext context;
  Prepare(&context, false);
  std::unique_ptr<grpc::ClientReaderWriter<scored::v1::ScoreRequest, scored::v1::ScoreResponse>> stream =
      stub_->ScoreStream(&context);
  InflightGate gate(inflight < 1 ? 1 : inflight);

  absl::Status build_error;  // the writer's; read after it is joined
  std::thread writer([&] {
    for (int64_t i = 0; i < n; ++i) {
      if (!gate.Acquire()) break;
      const Window& w = windows[static_cast<size_t>(i)];
      absl::StatusOr<scored::v1::ScoreRequest> request = BuildRequest(w, static_cast<uint64_t>(i), options);
      if (!request.ok()) {
        build_error = request.status();
        break;
      }
      if (!stream->Write(*request)) break;
    }
    stream->WritesDone();
  });

  absl::Status error;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  int64_t received = 0;
  scored::v1::ScoreResponse response;
  WindowScore score;
  while (received < n && stream->Read(&response)) {
    const uint64_t id = response.request_id();
    // The error first: an error response may carry any request_id.
    if (response.has_error()) {
      error = ResponseError(response, id);
      break;
    }
    if (id >= static_cast<uint64_t>(n) || seen[id]) {
      error = absl::InternalError(absl::StrCat("ScoreStream answered unknown or repeated request_id ", id));
      break;
    }
    error = ReadWindowScore(response, id, windows[id], options, &score);
    if (!error.ok()) break;
    seen[id] = true;
    ++received;
    gate.Release();
    on_result(static_cast<int64_t>(id), score);
  }
  if (received < n) {
    gate.Stop();
    // Only cancel on our own error: when Read() returned false the call is over and Finish() must
    // report the server's status.
    if (!error.ok()) context.TryCancel();
  }
  writer.join();
  const grpc::Status finish = stream->Finish();
  if (!build_error.ok()) return build_error;
  if (!error.ok()) return error;
  if (!finish.ok()) return FromGrpc(finish, "ScoreStream");
  if (received < n) {
    return absl::InternalError(absl::StrCat("ScoreStream ended after ", received, " of ", n, " responses"));
  }
  return absl::OkStatus();
}

absl::Status ScorerClient::ScoreShared(WindowPool* pool, int stream_id, const std::vector<Window>& windows,
                                       int inflight, const RequestOptions& options,
                                       std::vector<int64_t>* unanswered) {
  grpc::ClientContext context;
  Prepare(&context, false);
  std::unique_ptr<grpc::ClientReaderWriter<scored::v1::ScoreRequest, scored::v1::ScoreResponse>> stream =
      stub_->ScoreStream(&context);
  InflightGate gate(inflight < 1 ? 1 : inflight);
  absl::Mutex sent_mu;
  std::set<int64_t> sent;  // taken from the pool and not answered yet (ABSL_GUARDED_BY(sent_mu))

  absl::Status build_error;  // the writer's; read after it is joined
  std::thread writer([&] {
    while (gate.Acquire()) {
      const int64_t index = pool->Take(stream_id);
      if (index < 0) break;
      {
        absl::MutexLock lock(&sent_mu);
        sent.insert(index);  // before Write: a window lost with the stream is requeued
      }
      const Window& w = windows[static_cast<size_t>(index)];
      absl::StatusOr<scored::v1::ScoreRequest> request =
          BuildRequest(w, static_cast<uint64_t>(index), options);
      if (!request.ok()) {
        build_error = request.status();
        break;
      }
      if (!stream->Write(*request)) break;
    }
    stream->WritesDone();
  });

  absl::Status error;
  scored::v1::ScoreResponse response;
  WindowScore score;
  while (stream->Read(&response)) {
    const uint64_t id = response.request_id();
    bool known = false;
    {
      absl::MutexLock lock(&sent_mu);
      known = sent.count(static_cast<int64_t>(id)) > 0;
    }
    if (!known || id >= windows.size()) {
      error = absl::InternalError(absl::StrCat("ScoreStream answered unknown or repeated request_id ", id));
      break;
    }
    error = ReadWindowScore(response, id, windows[id], options, &score);
    if (!error.ok()) break;
    pool->Done(stream_id, static_cast<int64_t>(id), score);
    {
      absl::MutexLock lock(&sent_mu);
      sent.erase(static_cast<int64_t>(id));
    }
    gate.Release();
  }
  // The stream is over (the pool ran out and the server answered everything, or it failed): wake the writer.
  pool->StopStream(stream_id);
  gate.Stop();
  if (!error.ok()) context.TryCancel();
  writer.join();
  const grpc::Status finish = stream->Finish();
  {
    absl::MutexLock lock(&sent_mu);
    unanswered->assign(sent.begin(), sent.end());
  }
  if (!build_error.ok()) return build_error;
  if (!error.ok()) return error;
  if (!finish.ok()) return FromGrpc(finish, "ScoreStream");
  if (!unanswered->empty()) {
    return absl::UnavailableError(
        absl::StrCat("ScoreStream ended with ", unanswered->size(), " windows unanswered"));
  }
  return absl::OkStatus();
}

}  // namespace ppl
}  // namespace scored

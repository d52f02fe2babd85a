#include "server/openai_http.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "server/grpc_status.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/options.h"
#include "server/request_validation.h"

namespace scored {
namespace {

using openai::Json;

// A JSON response is several times the size of the protobuf one EstimateScoreResponseBytes bounds (a
// top_logprobs entry is a quoted token string and a decimal float instead of 13 bytes): the budget charge
// for a response is that bound times this factor.
constexpr int64_t kJsonBytesFactor = 8;

// The route's name in scored_limit_rejections_total and the logs (ScoreGate's `method`).
constexpr char kCompletionsMethod[] = "OpenAI/v1/completions";

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// "host:port" / "[v6]:port" -> host ("v6" without brackets), port.
std::pair<std::string, int> SplitListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, std::atoi(listen.c_str() + colon + 1)};
}

}  // namespace

OpenAiHttpServer::OpenAiHttpServer(Config config) : config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Create(Config config) {
  absl::Status listen = ValidateHostPort("--openai_listen", config.listen);
  if (!listen.ok()) return listen;
  if (config.gate == nullptr || config.threads < 1) {
    return absl::InvalidArgumentError("OpenAiHttpServer::Config: a required member is missing");
  }
  std::unique_ptr<OpenAiHttpServer> server(new OpenAiHttpServer(std::move(config)));
  const Config& c = server->config_;
  HttpServer::Config http;
  std::tie(http.host, http.port) = SplitListen(c.listen);
  http.worker_threads = c.threads;
  http.limits = c.limits;
  http.limits.max_body_bytes = c.max_body_bytes;
  http.tls_cert_file = c.tls_cert_file;
  http.tls_key_file = c.tls_key_file;
  http.tls_client_ca_file = c.tls_client_ca_file;
  OpenAiHttpServer* self = server.get();
  http.router = [self](const HttpRequest& head) { return self->Dispatch(head); };
  http.error_body = [](int status, const std::string& message) {
    return Dump(openai::ErrorBody(status, message));
  };
  http.log_name = "--openai_listen";
  SCORED_ASSIGN_OR_RETURN(server->http_, HttpServer::Create(std::move(http)));
  return server;
}

OpenAiHttpServer::~OpenAiHttpServer() { Shutdown(); }

absl::Status OpenAiHttpServer::Start() {
  SCORED_RETURN_IF_ERROR(http_->Start());
  port_ = http_->port();
  return absl::OkStatus();
}

void OpenAiHttpServer::BeginShutdown() {
  stopping_.store(true);
  if (http_) http_->BeginShutdown();
}

void OpenAiHttpServer::Shutdown() {
  stopping_.store(true);
  if (http_) http_->Shutdown();
}

absl::Status OpenAiHttpServer::Admit(const HttpRequest& req) const {
  const bool present = req.has_header("Authorization");
  return config_.gate->Admit(present, present ? req.header("Authorization") : "");
}

absl::Status OpenAiHttpServer::AdmitTokenizerRoute(const HttpRequest& req) const {
  return config_.tokenizer_auth ? Admit(req) : config_.gate->AdmitWithoutToken();
}

void OpenAiHttpServer::Reply(const char* route, absl::Time start, const absl::Status& status,
                             const std::string& json, HttpResponse& res) const {
  config_.gate->metrics()->RecordRequest(absl::StrCat("OpenAI", route), ToGrpcCode(status.code()),
                                         absl::ToDoubleSeconds(absl::Now() - start));
  if (status.ok()) {
    res.status = 200;
    res.set_content(json, "application/json");
    return;
  }
  res.status = openai::HttpStatusOf(status.code());
  if (res.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(Dump(openai::ErrorBody(res.status, status.message())), "application/json");
}

absl::Status OpenAiHttpServer::ChargeParse(const std::string& body, const char* method,
                                           MemoryBudget::Charge* charge) const {
  absl::StatusOr<int64_t> dom_bytes =
      openai::JsonDomBytes(body, std::max<int64_t>(config_.gate->limits().max_seq_len, config_.max_queue));
  if (!dom_bytes.ok()) return dom_bytes.status();
  absl::StatusOr<MemoryBudget::Charge> charged = config_.gate->Charge(*dom_bytes, method);
  if (!charged.ok()) return charged.status();
  *charge = *std::move(charged);
  return absl::OkStatus();
}

Json OpenAiHttpServer::ModelObject() const {
  return {{"id", config_.model_name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "scored"},
          {"max_model_len", config_.gate->limits().max_seq_len}};
}

HttpServer::Dispatch OpenAiHttpServer::Refusal(const char* route, const absl::Status& status) const {
  HttpServer::Dispatch d;
  Reply(route, absl::Now(), status, "", d.refusal);
  return d;
}

HttpServer::Dispatch OpenAiHttpServer::MethodNotAllowed(const char* allowed) {
  HttpServer::Dispatch d;
  d.refusal.status = 405;
  d.refusal.set_header("Allow", allowed);
  d.refusal.set_content(Dump(openai::ErrorBody(405, absl::StrCat("method not allowed: use ", allowed))),
                        "application/json");
  return d;
}

// Routes of the OpenAI API that scored does not serve, answered 501 saying what it serves instead (a bare
// 404 "no such route" sent users searching).
const char* OpenAiHttpServer::NotServed(const std::string& path) {
  if (path == "/v1/chat/completions") {
    return "chat completions are not served: scored scores prompts. Apply the model's chat template yourself "
           "and send the text to /v1/completions with echo, logprobs and max_tokens 0 (or prompt_logprobs)";
  }
  if (path == "/v1/embeddings") return "embeddings are not served: scored scores prompts (/v1/completions)";
  if (path == "/v1/responses")
    return "the Responses API is not served: scored scores prompts (/v1/completions)";
  return nullptr;
}

HttpServer::Dispatch OpenAiHttpServer::Dispatch(const HttpRequest& head) const {
  using Dispatch = HttpServer::Dispatch;
  auto handle = [this](void (OpenAiHttpServer::*fn)(const HttpRequest&, HttpResponse&)) {
    OpenAiHttpServer* self = const_cast<OpenAiHttpServer*>(this);
    return Dispatch{[self, fn](const HttpRequest& r, HttpResponse& s) { (self->*fn)(r, s); }, {}};
  };
  const std::string& path = head.path;
  const bool get = head.method == "GET", post = head.method == "POST";
  // Routes with a body: the token (and health) are checked on the head, so a refused client's body is never
  // read; the handler checks again (no side effects).
  if (path == "/v1/completions" || path == "/tokenize" || path == "/detokenize" ||
      NotServed(path) != nullptr) {
    if (!post) return MethodNotAllowed("POST");
    const absl::Status admitted = path[1] == 't' || path[1] == 'd' ? AdmitTokenizerRoute(head) : Admit(head);
    if (!admitted.ok()) return Refusal(path.c_str(), admitted);
    if (path == "/v1/completions") return handle(&OpenAiHttpServer::Completions);
    if (path == "/tokenize") return handle(&OpenAiHttpServer::Tokenize);
    if (path == "/detokenize") return handle(&OpenAiHttpServer::Detokenize);
    return handle(&OpenAiHttpServer::NotServedRoute);
  }
  if (!get) {
    return path == "/health" || path == "/tokenizer_info" || absl::StartsWith(path, "/v1/models")
               ? MethodNotAllowed("GET")
               : Refusal("/unknown", absl::NotFoundError("no such route"));
  }
  if (path == "/health") return handle(&OpenAiHttpServer::Health);
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) return handle(&OpenAiHttpServer::Models);
  if (path == "/tokenizer_info") return handle(&OpenAiHttpServer::TokenizerInfo);
  return Refusal("/unknown", absl::NotFoundError("no such route"));
}

void OpenAiHttpServer::Health(const HttpRequest&, HttpResponse& res) {
  const absl::Status fatal = config_.gate->batcher()->fatal_status();
  if (!fatal.ok() || stopping_.load()) {
    res.status = 503;
    res.set_content(Dump(openai::ErrorBody(
                        503, fatal.ok() ? "the server is shutting down" : std::string(fatal.message()))),
                    "application/json");
    return;
  }
  res.set_content(R"({"status": "ok"})", "application/json");
}

void OpenAiHttpServer::Models(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  absl::Status admitted = Admit(req);
  if (req.path == "/v1/models") {
    Json list = {{"object", "list"}, {"data", Json::array({ModelObject()})}};
    Reply("/v1/models", start, admitted, Dump(list), res);
    return;
  }
  const std::string wanted = req.path.substr(std::string("/v1/models/").size());
  if (admitted.ok() && wanted != config_.model_name) {
    admitted = absl::NotFoundError(
        absl::StrCat("The model `", wanted, "` does not exist; this server has `", config_.model_name, "`"));
  }
  Reply("/v1/models", start, admitted, admitted.ok() ? Dump(ModelObject()) : "", res);
}

void OpenAiHttpServer::NotServedRoute(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  absl::Status status = Admit(req);
  if (status.ok()) status = absl::UnimplementedError(NotServed(req.path));
  Reply(req.path.c_str(), start, status, "", res);
}

void OpenAiHttpServer::TokenizerInfo(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  absl::Status admitted = AdmitTokenizerRoute(req);
  if (admitted.ok() && config_.gate->tokenizer() == nullptr) {
    admitted = absl::NotFoundError("the model has no tokenizer (token ids only)");
  }
  Reply("/tokenizer_info", start, admitted,
        admitted.ok()
            ? Dump(openai::TokenizerInfo(*config_.gate->tokenizer(), config_.gate->limits().max_seq_len))
            : "",
        res);
}

namespace {

// Scores every request of `requests` (nullopt: nothing to score) through the batcher, all queued before the
// first is waited for, so they may share a batch. The first failure is returned after every queued one
// finished (the others are cancelled). `charges` receives their memory-budget charges, which the caller holds
// until the response is built.
absl::StatusOr<std::vector<ScoreResult>> ScoreAllQueued(
    const ScoreGate& gate, const std::vector<std::optional<ScoreRequest>>& requests,
    std::vector<MemoryBudget::Charge>* charges) {
  // One slot per submitted request: the batcher's callback stores the result, then notifies; a Notification
  // may be destroyed as soon as WaitForNotification returns, even while Notify is still returning.
  struct Slot {
    absl::StatusOr<ScoreResult> result = absl::UnknownError("not scored");
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Slot>> slots(requests.size());
  std::vector<uint64_t> tickets;
  absl::Status failed;
  for (size_t i = 0; i < requests.size() && failed.ok(); ++i) {
    if (!requests[i].has_value()) continue;
    const ScoreRequest& r = *requests[i];
    failed = ValidateScoreRequest(r, gate.limits());
    if (!failed.ok()) break;
    absl::StatusOr<MemoryBudget::Charge> charge =
        gate.Charge(kQueuedBytesPerToken * static_cast<int64_t>(r.tokens.size()) +
                        kJsonBytesFactor * EstimateScoreResponseBytes(r),
                    kCompletionsMethod);
    if (!charge.ok()) {
      failed = charge.status();
      break;
    }
    charges->push_back(*std::move(charge));
    auto slot = std::make_unique<Slot>();
    Slot* s = slot.get();
    absl::StatusOr<uint64_t> ticket =
        gate.batcher()->Submit(r, absl::InfiniteFuture(), [s](absl::StatusOr<ScoreResult> result) {
          s->result = std::move(result);
          s->done.Notify();
        });
    if (!ticket.ok()) {
      failed = ticket.status();
      break;
    }
    slots[i] = std::move(slot);
    tickets.push_back(*ticket);
  }
  if (!failed.ok()) {
    for (uint64_t t : tickets) gate.batcher()->Cancel(t);
  }
  for (const std::unique_ptr<Slot>& slot : slots) {
    if (slot != nullptr) slot->done.WaitForNotification();
  }
  if (!failed.ok()) return failed;
  std::vector<ScoreResult> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (slots[i] == nullptr) continue;
    if (!slots[i]->result.ok()) return slots[i]->result.status();
    out[i] = *std::move(slots[i]->result);
  }
  return out;
}

}  // namespace

void OpenAiHttpServer::Completions(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  const char* route = "/v1/completions";
  const ScoreGate& gate = *config_.gate;
  absl::Status status = Admit(req);
  ConnectionLimiter::Slot slot;
  if (status.ok()) {
    absl::StatusOr<ConnectionLimiter::Slot> taken =
        gate.TakeSlot(absl::StrCat("http:", req.remote_addr, ":", req.remote_port), kCompletionsMethod);
    if (taken.ok()) {
      slot = *std::move(taken);
    } else {
      status = taken.status();
    }
  }
  const int max_logprobs =
      static_cast<int>(gate.limits().smallest_vocab_shard > 0
                           ? std::min<int64_t>(openai::kMaxLogprobs, gate.limits().smallest_vocab_shard)
                           : openai::kMaxLogprobs);
  MemoryBudget::Charge parse_charge;  // held until the response is built
  if (status.ok()) status = ChargeParse(req.body, kCompletionsMethod, &parse_charge);
  absl::StatusOr<openai::CompletionRequest> request =
      status.ok() ? openai::ParseCompletionRequest(req.body, max_logprobs)
                  : absl::StatusOr<openai::CompletionRequest>(status);
  if (request.ok() && !request->model.empty() && request->model != config_.model_name) {
    request = absl::NotFoundError(absl::StrCat(
        "The model `", request->model, "` does not exist; this server has `", config_.model_name, "`"));
  }
  if (!request.ok()) {
    Reply(route, start, request.status(), "", res);
    return;
  }
  // Prompt ids: texts tokenized (stopping past what fits), ids checked for the room max_tokens needs.
  const int64_t room = gate.limits().max_seq_len - request->max_tokens;
  std::vector<std::optional<ScoreRequest>> engine_requests;
  for (openai::Prompt& p : request->prompts) {
    if (p.is_text) {
      absl::StatusOr<std::vector<int32_t>> ids = gate.TokenizeAndWait(
          kCompletionsMethod, p.text, request->add_bos.has_value(), request->add_bos.value_or(false), room);
      if (!ids.ok()) {
        Reply(route, start, ids.status(), "", res);
        return;
      }
      if (ids->empty()) {
        Reply(route, start, absl::InvalidArgumentError("a prompt text gave no tokens"), "", res);
        return;
      }
      p.ids = *std::move(ids);
    }
    if (static_cast<int64_t>(p.ids.size()) > room) {
      Reply(
          route, start,
          absl::OutOfRangeError(absl::StrCat(
              "a prompt of ", p.ids.size(), " tokens with max_tokens ", request->max_tokens, " needs ",
              p.ids.size() + request->max_tokens, " positions; max_seq_len is ", gate.limits().max_seq_len)),
          "", res);
      return;
    }
    // Checked here too: a prompt that needs no scoring still has its ids decoded for the response.
    for (size_t i = 0; i < p.ids.size(); ++i) {
      if (p.ids[i] >= gate.limits().vocab_size) {
        Reply(
            route, start,
            absl::InvalidArgumentError(absl::StrCat("token id ", p.ids[i], " at position ", i,
                                                    " is out of range [0, ", gate.limits().vocab_size, ")")),
            "", res);
        return;
      }
    }
    engine_requests.push_back(openai::EngineRequestFor(*request, p.ids));
  }
  std::vector<MemoryBudget::Charge> charges;  // released once the response is built
  absl::StatusOr<std::vector<ScoreResult>> results = ScoreAllQueued(gate, engine_requests, &charges);
  if (!results.ok()) {
    Reply(route, start, results.status(), "", res);
    return;
  }
  const openai::TokenStrings strings(gate.tokenizer());
  std::vector<Json> choices;
  for (size_t i = 0; i < request->prompts.size(); ++i) {
    const openai::Prompt& p = request->prompts[i];
    choices.push_back(openai::BuildChoice(*request, static_cast<int>(i), p, p.ids,
                                          engine_requests[i].has_value() ? &(*results)[i] : nullptr,
                                          strings));
  }
  const std::string id = absl::StrFormat("cmpl-%x%08x", absl::ToUnixNanos(start), next_id_.fetch_add(1));
  Reply(route, start, absl::OkStatus(),
        Dump(openai::BuildCompletionResponse(*request, config_.model_name, id, absl::ToUnixSeconds(start),
                                             std::move(choices))),
        res);
}

void OpenAiHttpServer::Tokenize(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  const ScoreGate& gate = *config_.gate;
  absl::Status status = AdmitTokenizerRoute(req);
  MemoryBudget::Charge parse_charge;
  if (status.ok()) status = ChargeParse(req.body, "OpenAI/tokenize", &parse_charge);
  absl::StatusOr<openai::TokenizeRequest> request =
      status.ok() ? openai::ParseTokenizeRequest(req.body) : absl::StatusOr<openai::TokenizeRequest>(status);
  if (request.ok()) {
    status = gate.RequireTokenizer();
    if (!status.ok()) request = status;
  }
  if (!request.ok()) {
    Reply("/tokenize", start, request.status(), "", res);
    return;
  }
  const Tokenizer& tokenizer = *gate.tokenizer();
  absl::StatusOr<std::vector<int32_t>> ids;
  const int32_t special = openai::SpecialTokenIdOf(tokenizer, request->prompt);
  if (special >= 0) {
    ids = std::vector<int32_t>{special};
    if (request->add_special_tokens && tokenizer.add_bos_by_default() && tokenizer.bos_id() >= 0) {
      ids->insert(ids->begin(), tokenizer.bos_id());
    }
  } else {
    // add_special_tokens true: the tokenizer's default BOS (as Score's text); false: none.
    ids = gate.TokenizeAndWait("OpenAI/tokenize", request->prompt, !request->add_special_tokens, false, -1);
  }
  if (!ids.ok()) {
    Reply("/tokenize", start, ids.status(), "", res);
    return;
  }
  Json out = {{"count", ids->size()},
              {"max_model_len", gate.limits().max_seq_len},
              {"tokens", *ids},
              {"token_strs", nullptr}};
  Reply("/tokenize", start, absl::OkStatus(), Dump(out), res);
}

void OpenAiHttpServer::Detokenize(const HttpRequest& req, HttpResponse& res) {
  const absl::Time start = absl::Now();
  absl::Status status = AdmitTokenizerRoute(req);
  if (status.ok() && config_.gate->tokenizer() == nullptr) {
    status = absl::FailedPreconditionError("the model has no tokenizer (token ids only)");
  }
  MemoryBudget::Charge parse_charge;
  if (status.ok()) status = ChargeParse(req.body, "OpenAI/detokenize", &parse_charge);
  absl::StatusOr<std::vector<int32_t>> ids =
      status.ok() ? openai::ParseDetokenizeRequest(req.body) : absl::StatusOr<std::vector<int32_t>>(status);
  absl::StatusOr<std::string> text = ids.ok() ? config_.gate->tokenizer()->Decode(*ids) : ids.status();
  if (!text.ok()) {
    Reply("/detokenize", start, text.status(), "", res);
    return;
  }
  Reply("/detokenize", start, absl::OkStatus(), Dump(Json{{"prompt", openai::ValidUtf8(*text)}}), res);
}

}  // namespace scored

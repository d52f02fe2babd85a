#include "server/openai_http.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/base/logging.h"
#include "server/grpc_status.h"
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
  if (!c.tls_cert_file.empty()) {
    server->http_ = std::make_unique<httplib::SSLServer>(
        c.tls_cert_file.c_str(), c.tls_key_file.c_str(),
        c.tls_client_ca_file.empty() ? nullptr : c.tls_client_ca_file.c_str());
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  if (!server->http_->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("--openai_listen: cannot set up TLS from --tls_cert ",
                                                   c.tls_cert_file, " and --tls_key ", c.tls_key_file));
  }
  const int threads = c.threads;
  server->http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server->http_->set_payload_max_length(static_cast<size_t>(c.max_body_bytes));
  server->Route();
  return server;
}

OpenAiHttpServer::~OpenAiHttpServer() { Shutdown(); }

absl::Status OpenAiHttpServer::Start() {
  const auto [host, port] = SplitListen(config_.listen);
  port_ = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) {
    port_ = 0;
    return absl::UnavailableError(absl::StrCat("--openai_listen: cannot listen on ", config_.listen,
                                               " (address in use or not local?)"));
  }
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    listener_returned_.store(true);
    // The library ends its accept loop on an accept() error other than EMFILE / EINTR: say so, it is
    // otherwise silent.
    if (!stopping_.load()) {
      SCORED_LOG(ERROR)
          << "--openai_listen " << config_.listen
          << ": the HTTP listener stopped (accept failed); the OpenAI-compatible API is no longer "
             "served";
    }
  });
  // httplib::Server::stop() does nothing before listen_after_bind() has marked the server running (its first
  // statement), and 0.11.4 has no notification for it: wait those few microseconds here, so that a
  // Shutdown() right after Start() cannot miss the stop and wait forever.
  while (!http_->is_running() && !listener_returned_.load()) std::this_thread::yield();
  if (listener_returned_.load()) {
    return absl::UnavailableError(absl::StrCat("--openai_listen: the listener on ", config_.listen,
                                               " stopped at once (accept failed)"));
  }
  return absl::OkStatus();
}

void OpenAiHttpServer::BeginShutdown() {
  if (stopping_.exchange(true)) return;
  if (http_) http_->stop();
}

void OpenAiHttpServer::Shutdown() {
  BeginShutdown();
  // listen_after_bind returns once the pool has finished the connections in progress.
  if (thread_.joinable()) thread_.join();
}

absl::Status OpenAiHttpServer::Admit(const httplib::Request& req) const {
  const bool present = req.has_header("Authorization");
  return config_.gate->Admit(present, present ? req.get_header_value("Authorization") : "");
}

absl::Status OpenAiHttpServer::AdmitTokenizerRoute(const httplib::Request& req) const {
  return config_.tokenizer_auth ? Admit(req) : config_.gate->AdmitWithoutToken();
}

void OpenAiHttpServer::Reply(const char* route, absl::Time start, const absl::Status& status,
                             const std::string& json, httplib::Response& res) const {
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
  absl::StatusOr<int64_t> dom_bytes = openai::JsonDomBytes(body);
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

void OpenAiHttpServer::Route() {
  http_->Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { Completions(req, res); });
  http_->Post("/tokenize",
              [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
  http_->Post("/detokenize",
              [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Status fatal = config_.gate->batcher()->fatal_status();
    if (!fatal.ok() || stopping_.load()) {
      res.status = 503;
      res.set_content(Dump(openai::ErrorBody(
                          503, fatal.ok() ? "the server is shutting down" : std::string(fatal.message()))),
                      "application/json");
      return;
    }
    res.set_content(R"({"status": "ok"})", "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = absl::Now();
    const absl::Status admitted = Admit(req);
    Json list = {{"object", "list"}, {"data", Json::array({ModelObject()})}};
    Reply("/v1/models", start, admitted, Dump(list), res);
  });
  http_->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const absl::Time start = absl::Now();
    absl::Status admitted = Admit(req);
    const std::string wanted = req.matches.size() > 1 ? req.matches[1].str() : "";
    if (admitted.ok() && wanted != config_.model_name) {
      admitted = absl::NotFoundError(absl::StrCat(
          "The model `", wanted, "` does not exist; this server has `", config_.model_name, "`"));
    }
    Reply("/v1/models", start, admitted, admitted.ok() ? Dump(ModelObject()) : "", res);
  });
  // Routes of the OpenAI API that scored does not serve, answered 501 saying what it serves instead (a bare
  // 404 "no such route" sent users searching).
  for (const auto& [route, what] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions",
            "chat completions are not served: scored scores prompts. Apply the model's chat template "
            "yourself "
            "and send the text to /v1/completions with echo, logprobs and max_tokens 0 (or prompt_logprobs)"},
           {"/v1/embeddings", "embeddings are not served: scored scores prompts (/v1/completions)"},
           {"/v1/responses", "the Responses API is not served: scored scores prompts (/v1/completions)"}}) {
    http_->Post(route,
                [this, route = route, what = what](const httplib::Request& req, httplib::Response& res) {
                  const absl::Time start = absl::Now();
                  absl::Status status = Admit(req);
                  if (status.ok()) status = absl::UnimplementedError(what);
                  Reply(route.c_str(), start, status, "", res);
                });
  }
  http_->Get("/tokenizer_info", [this](const httplib::Request& req, httplib::Response& res) {
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
  });
  // Errors the library itself answers (404 unknown route, 413 body too large, 400 unparsable request)
  // get an OpenAI error body too; the routes' own errors already have one.
  http_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const char* what = res.status == 404   ? "no such route"
                           : res.status == 413 ? "the request body is larger than --max_message_bytes"
                           : res.status == 405 ? "method not allowed"
                                               : "bad request";
        res.set_content(Dump(openai::ErrorBody(res.status, what)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(Dump(openai::ErrorBody(500, "internal error")), "application/json");
  });
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

void OpenAiHttpServer::Completions(const httplib::Request& req, httplib::Response& res) {
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
  const int max_logprobs = static_cast<int>(
      gate.limits().smallest_vocab_shard > 0 ? std::min<int64_t>(kMaxTopK, gate.limits().smallest_vocab_shard)
                                             : kMaxTopK);
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

void OpenAiHttpServer::Tokenize(const httplib::Request& req, httplib::Response& res) {
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

void OpenAiHttpServer::Detokenize(const httplib::Request& req, httplib::Response& res) {
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

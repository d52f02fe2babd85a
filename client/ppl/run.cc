#include "client/ppl/run.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/connect/security.h"
#include "client/connect/servers.h"
#include "client/ppl/journal.h"
#include "client/ppl/kld.h"
#include "client/ppl/piecewise_tokenize.h"
#include "client/ppl/plan.h"
#include "client/ppl/progress.h"
#include "client/ppl/reference_run.h"
#include "client/ppl/scorer_client.h"
#include "client/ppl/token_dump.h"
#include "engine/base/logging.h"
#include "engine/base/sha256.h"
#include "engine/base/status_macros.h"
#include "google/protobuf/util/json_util.h"
#ifdef SCORED_PPL_HAVE_TOKENIZER
#include "engine/tokenizer/tokenizer.h"
#endif

namespace scored {
namespace ppl {
namespace {

// Status payload marking a usage error (IsUsageError).
constexpr char kUsageErrorPayload[] = "type.scored/ppl.UsageError";

// Protobuf's JSON mapping writes 64-bit integers as strings (JavaScript numbers lose precision above 2^53);
// a report is read by tools that compare and plot numbers, and no ModelInfo count comes near 2^53, so
// they become JSON numbers here, in `message` and its nested messages.
void Int64FieldsToNumbers(const google::protobuf::Descriptor& message, nlohmann::json* j) {
  if (!j->is_object()) return;
  for (int i = 0; i < message.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& field = *message.field(i);
    auto it = j->find(std::string(field.name()));
    if (it == j->end()) continue;
    using Cpp = google::protobuf::FieldDescriptor;
    if (field.cpp_type() == Cpp::CPPTYPE_MESSAGE && !field.is_repeated()) {
      Int64FieldsToNumbers(*field.message_type(), &*it);
    } else if (field.cpp_type() == Cpp::CPPTYPE_INT64 && it->is_string()) {
      *it = std::stoll(it->get<std::string>());
    } else if (field.cpp_type() == Cpp::CPPTYPE_UINT64 && it->is_string()) {
      *it = std::stoull(it->get<std::string>());
    }
  }
}

nlohmann::json ModelInfoToJson(const scored::v1::ModelInfo& info) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(info, &text, opts).ok()) return nlohmann::json();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return nlohmann::json();
  Int64FieldsToNumbers(*scored::v1::ModelInfo::descriptor(), &j);
  return j;
}

// The report's default label: the last component of the model folder, else a fingerprint prefix.
std::string DefaultLabel(const scored::v1::ModelInfo& info) {
  std::string path = info.model_path();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!name.empty()) return name;
  return info.model_fingerprint().substr(0, 12);
}

// Every id inside the model's vocabulary and every window within the server's limits, checked before
// the first request so a long run never fails half-way on a request the server must refuse.
absl::Status CheckWindows(const Plan& plan, const scored::v1::ModelInfo& info) {
  const int64_t max_len = info.max_seq_len() > 0 ? info.max_seq_len() : INT64_MAX;
  const int64_t max_batch = info.max_batch_tokens() > 0 ? info.max_batch_tokens() : INT64_MAX;
  for (size_t i = 0; i < plan.windows.size(); ++i) {
    const Window& w = plan.windows[i];
    const int64_t n = static_cast<int64_t>(w.tokens.size());
    if (n > max_len || n > max_batch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "window ", i, " has ", n, " tokens but the server accepts at most max_seq_len ", info.max_seq_len(),
          " and max_batch_tokens ", info.max_batch_tokens(),
          " (lower --ctx, or start scored with larger limits; rolling sends ctx + 1 tokens per window)"));
    }
    for (size_t j = 0; j < w.tokens.size(); ++j) {
      if (w.tokens[j] < 0 || w.tokens[j] >= info.vocab_size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "window ", i, " position ", j, " has id ", w.tokens[j], " outside the model's vocabulary [0, ",
            info.vocab_size(), "): the tokenizer does not match the served model"));
      }
    }
  }
  return absl::OkStatus();
}

struct TokenizerSetup {
  TokenizeFn tokenize;
  SpecialTokens special;
  std::string fingerprint;
  std::string source;
};

#ifdef SCORED_PPL_HAVE_TOKENIZER
// The setup's tokenize callback owns the tokenizer. Files that differ from the server's tokenizer are
// logged, not refused (the ids may still agree).
absl::StatusOr<TokenizerSetup> LocalTokenizer(const std::string& dir, const scored::v1::ModelInfo& info) {
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::Load(dir));
  if (tok->bos_id() != info.bos_id() || tok->eos_id() != info.eos_id() ||
      tok->add_bos_by_default() != info.add_bos_by_default()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokenizer in ", dir, " (bos ", tok->bos_id(), ", eos ", tok->eos_id(), ", add_bos ",
                     tok->add_bos_by_default(), ") does not match the server's (bos ", info.bos_id(),
                     ", eos ", info.eos_id(), ", add_bos ", info.add_bos_by_default(), ")"));
  }
  if (tok->vocab_size() > info.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer in ", dir, " has ", tok->vocab_size(),
                                                      " ids but the model only ", info.vocab_size(),
                                                      " embedding rows"));
  }
  std::shared_ptr<const Tokenizer> shared(std::move(tok));
  TokenizerSetup setup;
  setup.special = {shared->bos_id(), shared->eos_id(), shared->add_bos_by_default()};
  setup.fingerprint = shared->fingerprint();
  setup.source = dir;
  setup.tokenize = [shared](const std::string& text) -> absl::StatusOr<TokenStream> {
    TokenStream stream;
    SCORED_ASSIGN_OR_RETURN(stream.ids, shared->Encode(text));
    stream.byte_lengths.reserve(stream.ids.size());
    for (int32_t id : stream.ids) {
      stream.byte_lengths.push_back(static_cast<int32_t>(shared->TokenByteLength(id)));
    }
    return stream;
  };
  if (!info.tokenizer_fingerprint().empty() && setup.fingerprint != info.tokenizer_fingerprint()) {
    SCORED_LOG(WARNING) << "tokenizer files in " << dir << " (" << setup.fingerprint
                        << ") differ from the server's (" << info.tokenizer_fingerprint()
                        << "); ids may differ from server-side tokenization";
  }
  return setup;
}
#endif

// SHA-256 of a file's bytes, read in 1 MiB pieces (WikiText-103's 540 MB train split: ~2 s).
absl::StatusOr<std::string> FileSha256(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  Sha256 hash;
  std::vector<char> buf(size_t{1} << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) hash.Update(buf.data(), n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::InternalError(absl::StrCat("error reading ", path));
  return hash.HexDigest();
}

// The run identity a journal header records: method and parameters, the data file (path, size, SHA-256 of
// its bytes: a copy or a touch keeps the journal usable, any edit refuses it), the model and tokenizer
// fingerprints and the resulting number of windows.
absl::StatusOr<JournalIdentity> RunIdentity(const RunOptions& options, const Plan& plan,
                                            const scored::v1::ModelInfo& info, const TokenizerSetup& setup) {
  struct stat st;
  if (::stat(options.data_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot stat ", options.data_path));
  }
  SCORED_ASSIGN_OR_RETURN(const std::string data_sha256, FileSha256(options.data_path));
  JournalIdentity id;
  id.Add("method", MethodName(options.method.method));
  id.Add("ctx", absl::StrCat(options.method.ctx));
  id.Add("stride", absl::StrCat(options.method.stride));
  id.Add("max_windows", absl::StrCat(options.method.max_windows));
  id.Add("data_path", options.data_path);
  id.Add("data_format", FormatName(options.format));
  id.Add("separator", options.separator);
  id.Add("text_field", options.text_field);
  id.Add("data_size", absl::StrCat(static_cast<int64_t>(st.st_size)));
  id.Add("data_sha256", data_sha256);
  id.Add("model_fingerprint", info.model_fingerprint());
  id.Add("tokenizer_fingerprint", setup.fingerprint);
  id.Add("tokenizer_source", setup.source);
  id.Add("num_windows", absl::StrCat(plan.windows.size()));
  // Only --kld runs add these, so journals of runs without it keep their header.
  if (options.kld) {
    id.Add("kld", "1");
    id.Add("reference_fingerprint", info.reference().model_fingerprint());
  }
  return id;
}

// The run a --save_reference file is bound to (ReferenceHeader::identity), most telling field first: the
// tokenizer, the data file's bytes (not its path: a copy of the file serves), the method and its parameters,
// the windows, and a SHA-256 over every window's length, score_from and ids (so any other tokenization or
// windowing is refused even where the fields above agree).
absl::StatusOr<JournalIdentity> ReferenceIdentity(const RunOptions& options, const Plan& plan,
                                                  const TokenizerSetup& setup) {
  struct stat st;
  if (::stat(options.data_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot stat ", options.data_path));
  }
  SCORED_ASSIGN_OR_RETURN(const std::string data_sha256, FileSha256(options.data_path));
  Sha256 windows;
  for (const Window& w : plan.windows) {
    const int64_t n = static_cast<int64_t>(w.tokens.size());
    windows.Update(&n, sizeof(n));
    windows.Update(&w.score_from, sizeof(w.score_from));
    windows.Update(w.tokens.data(), w.tokens.size() * sizeof(int32_t));
  }
  JournalIdentity id;
  id.Add("tokenizer_fingerprint", setup.fingerprint);
  id.Add("data_size", absl::StrCat(static_cast<int64_t>(st.st_size)));
  id.Add("data_sha256", data_sha256);
  id.Add("data_format", FormatName(options.format));
  id.Add("separator", options.separator);
  id.Add("text_field", options.text_field);
  id.Add("method", MethodName(options.method.method));
  id.Add("ctx", absl::StrCat(options.method.ctx));
  id.Add("stride", absl::StrCat(options.method.stride));
  id.Add("max_windows", absl::StrCat(options.method.max_windows));
  id.Add("num_windows", absl::StrCat(plan.windows.size()));
  id.Add("windows_sha256", windows.HexDigest());
  return id;
}

// What the requests of `pending` (plan window indices, in the order they are sent) ask for: the server's
// reference comparison under --kld, or the stored reference's top-K / candidates.
RequestOptions RunRequests(const RunOptions& options, const StoredReference* stored,
                           const std::vector<int64_t>& pending) {
  RequestOptions o = stored != nullptr ? stored->Requests() : RequestOptions();
  o.want_reference = options.kld && stored == nullptr;
  if (stored != nullptr && !stored->saving()) {
    o.add_candidates = [stored, &pending](int64_t k, scored::v1::ScoreRequest* request) {
      return stored->AddCandidates(pending[static_cast<size_t>(k)], request);
    };
  }
  return o;
}

// One connected server of a multi-server run.
struct ServerConn {
  std::string address;
  std::unique_ptr<ScorerClient> client;
};

// Scores plan windows `pending` over every server at once (WindowPool: each keeps `inflight` outstanding);
// `record(index, score)` runs once per window, serialized. A server whose stream fails with IsServerLost has
// its unanswered windows requeued for the others (a line on `note_out`); the run fails when none is left, or
// at once on any other error.
absl::Status ScoreOverServers(const std::vector<ServerConn>& servers, const std::vector<Window>& windows,
                              const std::vector<int64_t>& pending, int inflight,
                              const RequestOptions& request, std::FILE* note_out,
                              const std::function<void(int64_t, const WindowScore&)>& record) {
  std::vector<Window> batch;
  batch.reserve(pending.size());
  for (int64_t i : pending) batch.push_back(windows[static_cast<size_t>(i)]);
  std::vector<int64_t> answered(servers.size(), 0);  // under the pool's serialization
  WindowPool pool(static_cast<int64_t>(batch.size()), [&](int stream, int64_t k, const WindowScore& score) {
    if (answered[static_cast<size_t>(stream)]++ == 0) {
      std::fprintf(note_out, "\nscored-ppl: server %s answered its first window\n",
                   servers[static_cast<size_t>(stream)].address.c_str());
    }
    record(pending[static_cast<size_t>(k)], score);
  });
  absl::Mutex mu;
  int alive = static_cast<int>(servers.size());
  std::vector<std::thread> threads;
  for (size_t s = 0; s < servers.size(); ++s) {
    threads.emplace_back([&, s] {
      std::vector<int64_t> unanswered;
      const absl::Status status =
          servers[s].client->ScoreShared(&pool, static_cast<int>(s), batch, inflight, request, &unanswered);
      if (status.ok()) return;
      if (!IsServerLost(status)) {
        pool.Fail(
            absl::Status(status.code(), absl::StrCat("server ", servers[s].address, ": ", status.message())));
        return;
      }
      absl::MutexLock lock(&mu);
      --alive;
      if (alive == 0) {
        pool.Fail(absl::UnavailableError(absl::StrCat("every server failed; the last, ", servers[s].address,
                                                      ": ", status.message(),
                                                      " (rerun with the same --journal to resume)")));
        return;
      }
      std::fprintf(note_out,
                   "\nscored-ppl: server %s failed (%s): retrying its %zu unanswered windows on the %d "
                   "server(s) left\n",
                   servers[s].address.c_str(), std::string(status.message()).c_str(), unanswered.size(),
                   alive);
      pool.Requeue(unanswered);
    });
  }
  for (std::thread& t : threads) t.join();
  SCORED_RETURN_IF_ERROR(pool.status());
  if (pool.remaining() != 0) {
    return absl::InternalError(absl::StrCat(pool.remaining(), " windows were never answered"));
  }
  std::string tally;
  for (size_t s = 0; s < servers.size(); ++s) {
    absl::StrAppend(&tally, s == 0 ? "" : ", ", servers[s].address, " ", answered[s]);
  }
  std::fprintf(note_out, "\nscored-ppl: windows per server: %s\n", tally.c_str());
  return absl::OkStatus();
}

// The servers of a run, connected, every one serving the same model.
struct Servers {
  ScorerClientOptions client_options;        // the first server's (a reconnection starts from them)
  std::vector<std::string> addresses;        // RunOptions::server resolved (servers.h)
  std::unique_ptr<ScorerClient> first;       // addresses[0]: tokenization, the one-server retry loop
  std::vector<ServerConn> extra;             // addresses[1..]
  std::vector<scored::v1::ModelInfo> infos;  // one per address

  const scored::v1::ModelInfo& info() const { return infos[0]; }
};

// The channel options every server of the run gets (address: options.server): deadline, token, TLS files.
absl::StatusOr<ScorerClientOptions> ClientOptions(const RunOptions& options) {
  ScorerClientOptions client_options;
  client_options.address = options.server;
  client_options.connect_timeout = options.connect_timeout;
  client_options.bearer_token = options.bearer_token;
  client::SecurityFlags security_flags;
  security_flags.tls_ca = options.tls_ca_path;
  security_flags.tls_cert = options.tls_cert_path;
  security_flags.tls_key = options.tls_key_path;
  SCORED_ASSIGN_OR_RETURN(const client::ClientSecurity security, client::LoadSecurity(security_flags));
  client_options.tls = security.tls;
  client_options.tls_root_certs_pem = security.root_certs_pem;
  client_options.tls_cert_chain_pem = security.cert_chain_pem;
  client_options.tls_private_key_pem = security.private_key_pem;
  return client_options;
}

// Connects the first server, then every other one, and reads each one's ModelInfo, all before anything is
// tokenized: they must serve the same model (CheckSameModel), a compatible one, with a reference under --kld.
absl::StatusOr<Servers> ConnectServers(const RunOptions& options) {
  Servers servers;
  SCORED_ASSIGN_OR_RETURN(servers.client_options, ClientOptions(options));
  SCORED_ASSIGN_OR_RETURN(servers.addresses, client::ResolveServers(options.server));
  servers.client_options.address = servers.addresses[0];
  SCORED_ASSIGN_OR_RETURN(servers.first, ScorerClient::Connect(servers.client_options));
  SCORED_ASSIGN_OR_RETURN(scored::v1::ModelInfo first_info, servers.first->GetModelInfo());
  servers.infos.push_back(std::move(first_info));
  for (size_t s = 1; s < servers.addresses.size(); ++s) {
    ScorerClientOptions o = servers.client_options;
    o.address = servers.addresses[s];
    SCORED_ASSIGN_OR_RETURN(std::unique_ptr<ScorerClient> c, ScorerClient::Connect(o));
    absl::StatusOr<scored::v1::ModelInfo> i = c->GetModelInfo();
    if (!i.ok()) {
      return absl::Status(i.status().code(),
                          absl::StrCat("server ", servers.addresses[s], ": ", i.status().message()));
    }
    servers.infos.push_back(*std::move(i));
    servers.extra.push_back({servers.addresses[s], std::move(c)});
  }
  SCORED_RETURN_IF_ERROR(client::CheckSameModel(servers.addresses, servers.infos));
  const scored::v1::ModelInfo& info = servers.info();
  if (info.vocab_size() <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("server at ", options.server, " reports vocab_size ",
                                                      info.vocab_size(), ": not a compatible scored server"));
  }
  if (options.kld && options.reference_file_path.empty() && !info.has_reference()) {
    absl::Status refused = absl::FailedPreconditionError(
        absl::StrCat("--kld compares the served model with a reference model, but the server at ",
                     options.server, " (model ", info.model_fingerprint(),
                     ") has none: start it with --reference_model R, or run without --kld"));
    refused.SetPayload(kUsageErrorPayload, absl::Cord("kld"));
    return refused;
  }
  return servers;
}

// The run's tokenizer: local files (--tokenizer DIR, checked against the server's) or the Tokenize RPC of
// `server` (the first one), which must outlive the plan.
absl::StatusOr<TokenizerSetup> SetUpTokenizer(const RunOptions& options, const scored::v1::ModelInfo& info,
                                              ScorerClient* server) {
  if (!options.tokenizer_dir.empty()) {
#ifdef SCORED_PPL_HAVE_TOKENIZER
    return LocalTokenizer(options.tokenizer_dir, info);
#else
    return absl::UnimplementedError("this scored-ppl was built without the local tokenizer");
#endif
  }
  if (info.tokenizer_kind().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server at ", options.server,
                     " has no tokenizer (see its log); tokenize locally with --tokenizer DIR"));
  }
  TokenizerSetup setup;
  setup.special = {info.bos_id(), info.eos_id(), info.add_bos_by_default()};
  setup.fingerprint = info.tokenizer_fingerprint();
  setup.source = "server";
  // A document longer than the server's --max_text_bytes goes in pieces (piecewise_tokenize.h).
  PieceOptions pieces;
  if (info.max_text_bytes() > 0) pieces.piece_bytes = info.max_text_bytes();
  pieces.overlap_bytes = std::min(pieces.overlap_bytes, pieces.piece_bytes / 4);
  setup.tokenize = [server, pieces](const std::string& text) {
    return TokenizeInPieces(text, pieces, [server](absl::string_view piece) {
      return server->Tokenize(std::string(piece), true);
    });
  };
  return setup;
}

// The run's windows, each checked against every server's limits and vocabulary.
absl::StatusOr<Plan> PlanWindows(const Dataset& dataset, const RunOptions& options,
                                 const TokenizerSetup& setup, const Servers& servers) {
  SCORED_ASSIGN_OR_RETURN(Plan plan, BuildPlan(dataset, options.method, setup.special, setup.tokenize));
  for (size_t s = 0; s < servers.infos.size(); ++s) {
    absl::Status fits = CheckWindows(plan, servers.infos[s]);
    if (!fits.ok()) {
      return absl::Status(fits.code(), absl::StrCat("server ", servers.addresses[s], ": ", fits.message()));
    }
  }
  return plan;
}

// Where every scored window goes: the journal (when there is one), the run's scores by window index (the
// report aggregates them in that order), the live PPL and the progress line (in completion order).
// Not thread-safe: a multi-server run calls Record serialized (WindowPool).
class WindowSink {
 public:
  // `journal` and `stored` (nullptr: none) are not owned and must outlive the sink.
  WindowSink(const Plan& plan, bool kld, Journal* journal, StoredReference* stored, Progress progress,
             RunCounters* counters)
      : plan_(plan),
        kld_(kld),
        journal_(journal),
        stored_(stored),
        progress_(progress),
        counters_(counters),
        scores_(plan.windows.size()),
        done_(plan.windows.size(), false) {
    if (counters_ != nullptr) counters_->windows_total = static_cast<int64_t>(plan.windows.size());
  }

  // Window `index` as the journal holds it: scored and in the live PPL, neither journaled again nor counted
  // as sent by this run.
  void Resume(int64_t index, WindowScore score, int64_t num_bytes) {
    scores_[static_cast<size_t>(index)] = std::move(score);
    done_[static_cast<size_t>(index)] = true;
    const WindowScore& s = scores_[static_cast<size_t>(index)];
    live_.AddWindow(s.sum_logprob, s.logprobs, num_bytes);
    if (counters_ != nullptr) ++counters_->windows_done;
  }

  // Starts the progress line's clock; the windows resumed so far count as done, not towards the rates.
  void StartScoring() {
    windows_resumed_ = live_.num_windows();
    progress_.StartScoring(windows_resumed_);
  }

  // Window `index` answered by a server: handed to the stored reference (saved, or compared), appended to the
  // journal (after a failure no more are tried; journal_error() says why), kept, added to the live PPL and
  // drawn.
  void Record(int64_t index, const WindowScore& answered) {
    const Window& w = plan_.windows[static_cast<size_t>(index)];
    const int64_t bytes = ScoredBytes(w);
    WindowScore score = answered;
    if (stored_ != nullptr && journal_error_.ok()) journal_error_ = stored_->OnScored(index, &score);
    if (journal_ != nullptr && journal_error_.ok()) {
      journal_error_ =
          journal_->Append({index, score.sum_logprob, score.logprobs, bytes, kld_, score.sum_ref_logprob,
                            score.ref_logprobs, score.kld, score.same_top});
    }
    live_.AddWindow(score.sum_logprob, score.logprobs, bytes);
    scores_[static_cast<size_t>(index)] = std::move(score);
    done_[static_cast<size_t>(index)] = true;
    tokens_done_ += static_cast<int64_t>(w.tokens.size());
    progress_.Update(live_.num_windows(), tokens_done_, live_.Ppl());
    if (counters_ != nullptr) ++counters_->windows_done;
  }

  // Draws the final progress line.
  void FinishProgress() { progress_.Finish(); }

  // The windows not scored yet, in index order.
  std::vector<int64_t> Pending() const {
    std::vector<int64_t> pending;
    for (size_t i = 0; i < done_.size(); ++i) {
      if (!done_[i]) pending.push_back(static_cast<int64_t>(i));
    }
    return pending;
  }
  size_t num_pending() const { return static_cast<size_t>(std::count(done_.begin(), done_.end(), false)); }

  absl::Status journal_error() const { return journal_error_; }
  StoredReference* stored() const { return stored_; }
  const std::vector<WindowScore>& scores() const { return scores_; }
  int64_t windows_resumed() const { return windows_resumed_; }
  int64_t tokens_done() const { return tokens_done_; }  // sent by this run (journaled windows excluded)

 private:
  const Plan& plan_;
  const bool kld_;
  Journal* const journal_;
  StoredReference* const stored_;
  Progress progress_;
  RunCounters* const counters_;
  std::vector<WindowScore> scores_;  // [num_windows]
  std::vector<bool> done_;           // [num_windows]
  Aggregator live_;                  // completion order, for the progress line only
  int64_t windows_resumed_ = 0;
  int64_t tokens_done_ = 0;
  absl::Status journal_error_;
};

// --journal: opens (or creates) the run's journal; nullptr without one.
absl::StatusOr<std::unique_ptr<Journal>> OpenJournal(const RunOptions& options, const Plan& plan,
                                                     const scored::v1::ModelInfo& info,
                                                     const TokenizerSetup& setup) {
  if (options.journal_path.empty()) return std::unique_ptr<Journal>();
  SCORED_ASSIGN_OR_RETURN(JournalIdentity identity, RunIdentity(options, plan, info, setup));
  return Journal::Open(options.journal_path, identity, options.journal_sync_every, options.journal_strict,
                       stderr);
}

// Hands every window `journal` (may be nullptr) already holds to `sink`, each checked against the plan and
// the
// --kld setting, with a line on `note_out` when there were any.
absl::Status ResumeFromJournal(const RunOptions& options, const Plan& plan, const Journal* journal,
                               std::FILE* note_out, WindowSink* sink) {
  if (journal == nullptr) return absl::OkStatus();
  const size_t n = plan.windows.size();
  for (const auto& [index, record] : journal->resumed()) {
    const Window* w = index < static_cast<int64_t>(n) ? &plan.windows[static_cast<size_t>(index)] : nullptr;
    if (record.has_reference != options.kld) {
      // Only this run's header fields are compared: a --kld journal passes a run without --kld there.
      return absl::FailedPreconditionError(
          absl::StrCat("journal ", options.journal_path, " was written by a run ",
                       record.has_reference ? "with" : "without", " --kld and this one is ",
                       options.kld ? "with" : "without",
                       " it (use another --journal file, or delete this one to start over)"));
    }
    if (w == nullptr || static_cast<int64_t>(record.logprobs.size()) != w->num_scored() ||
        record.num_bytes != ScoredBytes(*w)) {
      return absl::DataLossError(absl::StrCat("journal ", options.journal_path, ": record of window ", index,
                                              " does not match the plan; delete the file"));
    }
    WindowScore score;
    score.sum_logprob = record.sum_logprob;
    score.logprobs = record.logprobs;
    score.sum_ref_logprob = record.sum_ref_logprob;
    score.ref_logprobs = record.ref_logprobs;
    score.kld = record.kld;
    score.same_top = record.same_top;
    sink->Resume(index, std::move(score), record.num_bytes);
  }
  if (!journal->resumed().empty()) {
    std::fprintf(note_out, "scored-ppl: resuming from journal %s: %zu of %zu windows already scored\n",
                 options.journal_path.c_str(), journal->resumed().size(), n);
  }
  return absl::OkStatus();
}

// A fresh connection to the run's server after it failed (an old channel would wait out gRPC's own reconnect
// backoff, up to minutes), given `connect_timeout`. nullptr, with the reason in *last_error, while it cannot
// be reached or read; FAILED_PRECONDITION when it came back serving another model, or under --kld another
// reference, than the run started with (`info`).
absl::StatusOr<std::unique_ptr<ScorerClient>> Reconnect(const RunOptions& options,
                                                        ScorerClientOptions client_options,
                                                        absl::Duration connect_timeout,
                                                        const scored::v1::ModelInfo& info,
                                                        absl::Status* last_error) {
  client_options.connect_timeout = connect_timeout;
  absl::StatusOr<std::unique_ptr<ScorerClient>> reconnected = ScorerClient::Connect(client_options);
  if (!reconnected.ok()) {
    *last_error = reconnected.status();
    return std::unique_ptr<ScorerClient>();
  }
  absl::StatusOr<scored::v1::ModelInfo> new_info = (*reconnected)->GetModelInfo();
  if (!new_info.ok()) {
    *last_error = new_info.status();
    return std::unique_ptr<ScorerClient>();
  }
  if (new_info->model_fingerprint() != info.model_fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", options.server, " came back with model ", new_info->model_fingerprint(),
                     " but the run started with ", info.model_fingerprint()));
  }
  if (options.kld && options.reference_file_path.empty() &&
      new_info->reference().model_fingerprint() != info.reference().model_fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", options.server, " came back with reference model '",
                     new_info->reference().model_fingerprint(), "' but the --kld run started with '",
                     info.reference().model_fingerprint(), "'"));
  }
  return reconnected;
}

// Scores the sink's pending windows over `client` (nullptr: none left, after a multi-server run) until none
// is pending. While the server is UNAVAILABLE: waits with exponential backoff, reconnects and re-sends what
// is pending, giving up after options.retry_timeout without a window answered (RunOptions::retry_*).
absl::Status ScoreWithRetries(const RunOptions& options, const Servers& servers,
                              std::unique_ptr<ScorerClient> client, const Plan& plan, std::FILE* note_out,
                              WindowSink* sink) {
  absl::Time failing_since = absl::InfiniteFuture();
  absl::Duration backoff = options.retry_initial;
  absl::Status last_error;  // of the last reconnection attempt
  while (true) {
    const std::vector<int64_t> pending = sink->Pending();
    if (pending.empty()) return absl::OkStatus();
    std::vector<Window> batch;
    batch.reserve(pending.size());
    for (int64_t i : pending) batch.push_back(plan.windows[static_cast<size_t>(i)]);

    absl::Status status = last_error;
    if (client != nullptr) {
      status = client->ScoreWindows(batch, options.inflight, RunRequests(options, sink->stored(), pending),
                                    [&](int64_t k, const WindowScore& score) {
                                      sink->Record(pending[static_cast<size_t>(k)], score);
                                      failing_since = absl::InfiniteFuture();
                                      backoff = options.retry_initial;
                                    });
    }
    SCORED_RETURN_IF_ERROR(sink->journal_error());
    if (status.ok()) continue;  // every pending window answered; the loop re-checks
    if (status.code() != absl::StatusCode::kUnavailable || options.retry_timeout <= absl::ZeroDuration()) {
      return status;
    }
    const absl::Time now = absl::Now();
    if (failing_since == absl::InfiniteFuture()) failing_since = now;
    if (now - failing_since >= options.retry_timeout) {
      return absl::UnavailableError(
          absl::StrCat("gave up after ", absl::FormatDuration(options.retry_timeout), " waiting for server ",
                       options.server, " (", status.message(), "); rerun with the same --journal to resume"));
    }
    std::fprintf(note_out, "\nscored-ppl: waiting for server %s (%s); %zu windows left, retrying in %s\n",
                 options.server.c_str(), std::string(status.message()).c_str(), sink->num_pending(),
                 absl::FormatDuration(backoff).c_str());
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, options.retry_max);
    client.reset();
    SCORED_ASSIGN_OR_RETURN(client,
                            Reconnect(options, servers.client_options, std::max(backoff, absl::Seconds(1)),
                                      servers.info(), &last_error));
  }
}

// Scores every window the sink lacks: over every server at once when there are several (a lost server's
// windows go to the others), else over the one server with retries (ScoreWithRetries).
absl::Status ScoreAll(const RunOptions& options, const Plan& plan, std::FILE* note_out, Servers* servers,
                      WindowSink* sink) {
  std::unique_ptr<ScorerClient> client = std::move(servers->first);
  if (!servers->extra.empty()) {
    std::vector<ServerConn> all;
    all.push_back({servers->addresses[0], std::move(client)});
    for (ServerConn& c : servers->extra) all.push_back(std::move(c));
    const std::vector<int64_t> pending = sink->Pending();
    const absl::Status status = ScoreOverServers(
        all, plan.windows, pending, options.inflight, RunRequests(options, sink->stored(), pending), note_out,
        [sink](int64_t index, const WindowScore& score) { sink->Record(index, score); });
    SCORED_RETURN_IF_ERROR(sink->journal_error());
    SCORED_RETURN_IF_ERROR(status);
  }
  // After several servers nothing is pending, and this returns at once.
  return ScoreWithRetries(options, *servers, std::move(client), plan, note_out, sink);
}

// The report of a scored run: the results aggregated in window-index order (so they do not depend on
// completion order, retries or resumption), what ran, and the timings from `start` (the run's) and
// `score_start` (the first request's). Draws the final progress line.
absl::StatusOr<Report> FinishReport(const RunOptions& options, const Plan& plan, const TokenizerSetup& setup,
                                    const scored::v1::ModelInfo& info, absl::Time start,
                                    absl::Time score_start, WindowSink* sink) {
  const std::vector<WindowScore>& scores = sink->scores();
  Aggregator agg;
  for (size_t i = 0; i < scores.size(); ++i) {
    agg.AddWindow(scores[i].sum_logprob, scores[i].logprobs, ScoredBytes(plan.windows[i]));
  }
  KldAggregator kld_agg;
  const StoredReference* stored = sink->stored();
  if (options.kld) {
    for (const WindowScore& s : scores) {
      SCORED_RETURN_IF_ERROR(
          kld_agg.AddWindow(s.sum_logprob, s.sum_ref_logprob, s.logprobs, s.ref_logprobs, s.kld, s.same_top));
      if (stored != nullptr) {
        SCORED_RETURN_IF_ERROR(kld_agg.AddKldBounds(s.kld_lower, s.kld_upper, s.sum_tail_mass));
      }
    }
    if (stored != nullptr) kld_agg.set_reference_top_k(stored->top_k());
  }
  if (!options.dump_tokens_path.empty()) {
    SCORED_RETURN_IF_ERROR(WriteTokenDump(options.dump_tokens_path, plan, scores, options.kld));
  }
  const absl::Time end = absl::Now();
  sink->FinishProgress();

  int64_t total_sent = 0;
  for (const Window& w : plan.windows) total_sent += static_cast<int64_t>(w.tokens.size());
  Report report;
  FillResults(agg, &report);
  report.num_tokens_sent = total_sent;
  report.num_windows_resumed = sink->windows_resumed();
  report.num_tokens_sent_this_run = sink->tokens_done();
  report.method = options.method;
  report.prefix_id = plan.prefix_id;
  report.add_bos = plan.add_bos;
  report.data_path = options.data_path;
  SCORED_ASSIGN_OR_RETURN(report.data_sha256, FileSha256(options.data_path));
  report.data_format = FormatName(options.format);
  if (options.format == Format::kText) report.separator = options.separator;
  report.num_documents = plan.num_documents;
  report.num_input_tokens = plan.num_input_tokens;
  report.wall_seconds = absl::ToDoubleSeconds(end - start);
  report.score_seconds = absl::ToDoubleSeconds(end - score_start);
  report.tokens_per_second =
      report.score_seconds > 0 ? static_cast<double>(sink->tokens_done()) / report.score_seconds : 0.0;
  report.label = options.label.empty() ? DefaultLabel(info) : options.label;
  report.model_path = info.model_path();
  report.server = options.server;
  report.model_fingerprint = info.model_fingerprint();
  report.tokenizer_fingerprint = setup.fingerprint;
  report.tokenizer_source = setup.source;
  report.model_info = ModelInfoToJson(info);
  if (options.kld) {
    report.kld = true;
    report.kld_stats = kld_agg.Finish();
    report.reference_fingerprint =
        stored != nullptr ? stored->header().model_fingerprint : info.reference().model_fingerprint();
    report.reference_format = stored != nullptr ? stored->header().model_format : info.reference().format();
  }
  if (stored != nullptr) {
    report.reference_file = stored->path();
    report.reference_file_saved = stored->saving();
    report.reference_top_k = stored->top_k();
    report.reference_file_bytes = stored->bytes();
  }
  return report;
}

// The flags of a stored reference that do not go together (a usage error).
absl::Status CheckReferenceOptions(const RunOptions& options) {
  std::string refused;
  if (!options.save_reference_path.empty() && options.kld) {
    refused =
        "--save_reference runs the reference model alone: give it without --kld (and --kld "
        "--reference_file FILE in the run of the quant)";
  } else if (!options.save_reference_path.empty() && !options.reference_file_path.empty()) {
    refused = "give --save_reference (run R) or --reference_file (run Q against it), not both";
  } else if (!options.reference_file_path.empty() && !options.kld) {
    refused = "--reference_file compares with a stored reference: give it with --kld";
  } else if ((!options.save_reference_path.empty() || !options.reference_file_path.empty()) &&
             !options.journal_path.empty()) {
    refused =
        "--journal does not combine with --save_reference (FILE.partial resumes an interrupted save by "
        "itself) or --reference_file";
  }
  if (refused.empty()) return absl::OkStatus();
  absl::Status status = absl::InvalidArgumentError(refused);
  status.SetPayload(kUsageErrorPayload, absl::Cord("reference"));
  return status;
}

// --save_reference / --reference_file: the run's stored reference; nullptr without either.
absl::StatusOr<std::unique_ptr<StoredReference>> OpenStoredReference(const RunOptions& options,
                                                                     const Plan& plan,
                                                                     const scored::v1::ModelInfo& info,
                                                                     const TokenizerSetup& setup,
                                                                     std::FILE* note_out) {
  if (options.save_reference_path.empty() && options.reference_file_path.empty()) {
    return std::unique_ptr<StoredReference>();
  }
  SCORED_ASSIGN_OR_RETURN(const JournalIdentity identity, ReferenceIdentity(options, plan, setup));
  if (!options.save_reference_path.empty()) {
    return StoredReference::ForSave(options.save_reference_path, options.reference_top_k, identity, plan,
                                    info, note_out);
  }
  return StoredReference::ForCompare(options.reference_file_path, identity, plan, info);
}

}  // namespace

bool IsUsageError(const absl::Status& status) { return status.GetPayload(kUsageErrorPayload).has_value(); }

// A default --ctx (and a default --stride with it) shortened to the servers' smallest max_seq_len.
void FitDefaultCtx(const Servers& servers, std::FILE* note_out, RunOptions* options) {
  if (!options->ctx_is_default) return;
  int64_t limit = 0;
  for (const scored::v1::ModelInfo& info : servers.infos) {
    const int64_t l = std::min(info.max_seq_len(), info.max_batch_tokens());
    if (l > 0 && (limit == 0 || l < limit)) limit = l;
  }
  // Rolling windows hold a prefix id and ctx targets.
  const int64_t fits = options->method.method == Method::kRolling ? limit - 1 : limit;
  if (fits < 2 || options->method.ctx <= fits) return;
  std::fprintf(note_out,
               "scored-ppl: --ctx %lld (the default of %s) is longer than the server accepts (max_seq_len "
               "%lld): using --ctx %lld\n",
               static_cast<long long>(options->method.ctx), MethodName(options->method.method).c_str(),
               static_cast<long long>(limit), static_cast<long long>(fits));
  options->method.ctx = fits;
  if (options->stride_is_default && options->method.stride > fits) options->method.stride = fits;
}

absl::StatusOr<Report> RunPpl(const RunOptions& given) {
  const absl::Time start = absl::Now();
  RunOptions options = given;
  SCORED_RETURN_IF_ERROR(ValidateParams(options.method));
  SCORED_RETURN_IF_ERROR(CheckReferenceOptions(options));
  // Local input first: a bad --data fails at once, without a server.
  SCORED_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(options.data_path, options.format, options.separator,
                                                       options.text_field, options.max_data_bytes));
  SCORED_ASSIGN_OR_RETURN(Servers servers, ConnectServers(options));
  FitDefaultCtx(servers, options.progress_out != nullptr ? options.progress_out : stderr, &options);
  SCORED_ASSIGN_OR_RETURN(const TokenizerSetup setup,
                          SetUpTokenizer(options, servers.info(), servers.first.get()));
  SCORED_ASSIGN_OR_RETURN(const Plan plan, PlanWindows(dataset, options, setup, servers));

  std::FILE* note_out = options.progress_out != nullptr ? options.progress_out : stderr;
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<Journal> journal,
                          OpenJournal(options, plan, servers.info(), setup));
  SCORED_ASSIGN_OR_RETURN(std::unique_ptr<StoredReference> stored,
                          OpenStoredReference(options, plan, servers.info(), setup, note_out));
  WindowSink sink(plan, options.kld, journal.get(), stored.get(),
                  Progress(options.progress, static_cast<int64_t>(plan.windows.size()), note_out),
                  options.counters);
  SCORED_RETURN_IF_ERROR(ResumeFromJournal(options, plan, journal.get(), note_out, &sink));
  if (stored != nullptr) {
    for (auto& [index, score] : stored->Resumed()) {
      sink.Resume(index, std::move(score), ScoredBytes(plan.windows[static_cast<size_t>(index)]));
    }
  }
  sink.StartScoring();
  const absl::Time score_start = absl::Now();
  SCORED_RETURN_IF_ERROR(ScoreAll(options, plan, note_out, &servers, &sink));
  if (journal != nullptr) SCORED_RETURN_IF_ERROR(journal->Close());
  if (stored != nullptr) SCORED_RETURN_IF_ERROR(stored->Finish());
  return FinishReport(options, plan, setup, servers.info(), start, score_start, &sink);
}

}  // namespace ppl
}  // namespace scored

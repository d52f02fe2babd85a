#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/log_throttle.h"
#include "engine/base/logging.h"

namespace scored {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::chrono::milliseconds Ms(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// What a refused client may still be sending (the rest of a body) is read and dropped for at most this long
// and this many bytes after the refusal, so that closing with unread data (which makes the kernel send a
// reset) does not destroy the refusal before the client reads it.
constexpr absl::Duration kLingerTime = absl::Seconds(1);
constexpr size_t kLingerBytes = 1 << 20;

std::string StatusLine(int status) {
  const beast::string_view reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return absl::StrCat("HTTP/1.1 ", status, " ", std::string(reason.data(), reason.size()), "\r\n");
}

}  // namespace

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, absl::string_view(name.data(), name.size()))) return true;
  }
  return false;
}

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, absl::string_view(name.data(), name.size()))) return v;
  }
  return "";
}

// A connection as the server's book-keeping sees it.
class Connection {
 public:
  virtual ~Connection() = default;
  // On the connection's own strand: closes it now if it waits for a request (TLS handshake, head or body),
  // else once the response in progress (in a handler or being written) is written.
  virtual void CloseIfWaiting() = 0;
};

class HttpServer::Impl {
 public:
  explicit Impl(Config config)
      : config_(std::move(config)), workers_(static_cast<size_t>(config_.worker_threads)) {}

  absl::Status SetUpTls();
  absl::Status Start();
  void BeginShutdown();
  void Shutdown();
  int port() const { return port_; }
  int open_connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

  const Config& config() const { return config_; }
  bool stopping() const { return stopping_.load(); }
  asio::thread_pool& workers() { return workers_; }
  std::string ErrorBody(int status, const std::string& message) const {
    return config_.error_body(status, message);
  }

  // A connection's state changes, as the eviction at the connection cap needs them. It is idle (may be
  // closed for a new one) from its accept's first head read, and from the moment each keep-alive response
  // is queued (MarkIdleFromNow), not when that write completes: the client may have the reply, and send on
  // other connections, long before the write's completion handler runs. A head's arrival ends it.
  void MarkWaitingForHead(const Connection* c, bool waiting);
  void MarkIdleFromNow(const Connection* c);
  void HandlerStarted();
  void HandlerFinished();
  void Unregister(const Connection* c, const std::string& client);

 private:
  struct Entry {
    std::weak_ptr<Connection> connection;
    bool waiting_for_head = false;
    std::chrono::steady_clock::time_point since;
    bool evicted = false;  // chosen to make room: never chosen twice
  };

  void Accept();
  void OnAccept(tcp::socket socket);
  // Writes a short refusal without waiting for the client (one non-blocking write), then closes.
  void RefuseAtAccept(tcp::socket& socket, int status, const std::string& message) const;

  const Config config_;
  // Book-keeping (declared before the I/O objects: sessions destroyed with io_ unregister here).
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<const Connection*, Entry> connections_;
  std::map<std::string, int> per_client_;
  int open_ = 0;
  int handlers_ = 0;
  std::atomic<bool> stopping_{false};
  std::optional<asio::ssl::context> tls_;
  asio::thread_pool workers_;
  LogThrottle accept_log_{1};
  asio::io_context io_{config_.io_threads};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  asio::strand<asio::io_context::executor_type> accept_strand_{asio::make_strand(io_)};
  tcp::acceptor acceptor_{accept_strand_};
  std::vector<std::thread> io_threads_;
  int port_ = 0;
  bool shut_down_ = false;
};

namespace {

template <typename Stream>
class Session : public Connection, public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <typename... Args>
  Session(HttpServer::Impl* server, std::string client, int client_port, Args&&... stream_args)
      : server_(server),
        client_(std::move(client)),
        client_port_(client_port),
        stream_(std::forward<Args>(stream_args)...) {}
  ~Session() override { server_->Unregister(this, client_); }

  void Start() {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      ReadHead();
    } else {
      state_ = State::kHandshake;
      Lowest().expires_after(Ms(Limits().header_timeout));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHead();
                              });
    }
  }

  void CloseIfWaiting() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->state_ == State::kHandshake || self->state_ == State::kHead || self->state_ == State::kBody) {
        self->Close();
      } else {
        self->close_after_write_ = true;
      }
    });
  }

 private:
  enum class State { kHandshake, kHead, kBody, kHandler, kWrite, kLinger, kClosed };

  const HttpServer::Limits& Limits() const { return server_->config().limits; }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReadHead() {
    if (server_->stopping()) return Close();
    state_ = State::kHead;
    server_->MarkWaitingForHead(this, true);
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(Limits().max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(Limits().max_body_bytes));
    Lowest().expires_after(Ms(Limits().header_timeout));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(beast::error_code ec) {
    server_->MarkWaitingForHead(this, false);
    if (ec) return OnReadError(ec, "request head");
    const auto& head = parser_->get();
    request_ = HttpRequest();
    request_.method = std::string(head.method_string());
    const beast::string_view target = head.target();
    request_.path = std::string(target.substr(0, target.find('?')));
    request_.remote_addr = client_;
    request_.remote_port = client_port_;
    for (const auto& field : head) {
      if (static_cast<int>(request_.headers.size()) == Limits().max_header_fields) {
        return Refuse(431, absl::StrCat("more than ", Limits().max_header_fields, " header fields"));
      }
      request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    if (server_->stopping()) return Refuse(503, "the server is shutting down");
    HttpServer::Dispatch dispatch = server_->config().router(request_);
    if (!dispatch.handler) return Write(std::move(dispatch.refusal), /*close=*/true);
    handler_ = std::move(dispatch.handler);
    if (parser_->is_done()) return RunHandler();
    if (absl::EqualsIgnoreCase(std::string(head[http::field::expect]), "100-continue")) {
      auto reply = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      Lowest().expires_after(Ms(Limits().write_timeout));
      return http::async_write(stream_, *reply,
                               [self = this->shared_from_this(), reply](beast::error_code e, size_t) {
                                 if (e) return self->Close();
                                 self->ReadBody();
                               });
    }
    ReadBody();
  }

  void ReadBody() {
    state_ = State::kBody;
    Lowest().expires_after(Ms(Limits().body_timeout));
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->OnReadError(ec, "request body");
                       self->request_.body = std::move(self->parser_->get().body());
                       self->RunHandler();
                     });
  }

  void OnReadError(beast::error_code ec, const char* what) {
    if (ec == http::error::header_limit) {
      return Refuse(431,
                    absl::StrCat("the request head is larger than ", Limits().max_header_bytes, " bytes"));
    }
    if (ec == http::error::body_limit) {
      return Refuse(413, absl::StrCat("the request body is larger than --max_message_bytes (",
                                      Limits().max_body_bytes, " bytes)"));
    }
    // A timeout, the client's close or reset, or the drain's close: nothing to answer.
    if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == http::error::partial_message || state_ == State::kClosed) {
      return Close();
    }
    Refuse(400, absl::StrCat("malformed ", what, ": ", ec.message()));
  }

  void RunHandler() {
    state_ = State::kHandler;
    keep_alive_ = parser_->keep_alive();
    server_->HandlerStarted();
    asio::post(server_->workers(), [self = this->shared_from_this()] {
      auto response = std::make_shared<HttpResponse>();
      try {
        self->handler_(self->request_, *response);
      } catch (const std::exception& e) {
        SCORED_LOG(ERROR) << self->server_->config().log_name << ": a handler threw: " << e.what();
        *response = HttpResponse();
        response->status = 500;
        response->body = self->server_->ErrorBody(500, "internal error");
      }
      asio::post(self->stream_.get_executor(), [self, response] {
        self->server_->HandlerFinished();
        self->handler_ = nullptr;
        self->Write(std::move(*response),
                    !self->keep_alive_ || self->close_after_write_ || self->server_->stopping());
      });
    });
  }

  void Refuse(int status, const std::string& message) {
    HttpResponse r;
    r.status = status;
    r.body = server_->ErrorBody(status, message);
    Write(std::move(r), /*close=*/true);
  }

  void Write(HttpResponse r, bool close) {
    state_ = State::kWrite;
    if (!close) server_->MarkIdleFromNow(this);
    auto reply = std::make_shared<http::response<http::string_body>>();
    reply->version(11);
    reply->result(static_cast<unsigned>(r.status));
    reply->set(http::field::server, "scored");
    reply->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) reply->set(k, v);
    reply->keep_alive(!close);
    reply->body() = std::move(r.body);
    reply->prepare_payload();
    Lowest().expires_after(Ms(Limits().write_timeout));
    http::async_write(stream_, *reply,
                      [self = this->shared_from_this(), reply, close](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        if (close || self->close_after_write_ || self->server_->stopping()) {
                          return self->Linger();
                        }
                        self->ReadHead();
                      });
  }

  // After a response that closes the connection: stop sending, drop what the client still sends (a refused
  // body) for a moment, then close.
  void Linger() {
    state_ = State::kLinger;
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    Lowest().expires_after(Ms(kLingerTime));
    DrainSome();
  }

  void DrainSome() {
    Lowest().async_read_some(asio::buffer(discard_),
                             [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                               self->drained_ += n;
                               if (ec || self->drained_ >= kLingerBytes) return self->Close();
                               self->DrainSome();
                             });
  }

  void Close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().close();
  }

  HttpServer::Impl* const server_;
  const std::string client_;
  const int client_port_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  HttpServer::Handler handler_;
  bool keep_alive_ = false;
  bool close_after_write_ = false;  // CloseIfWaiting came during a handler or a write
  State state_ = State::kHead;
  std::array<char, 16 << 10> discard_;
  size_t drained_ = 0;
};

}  // namespace

absl::Status HttpServer::Impl::SetUpTls() {
  if (config_.tls_cert_file.empty()) return absl::OkStatus();
  try {
    tls_.emplace(asio::ssl::context::tls_server);
    tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1);
    tls_->use_certificate_chain_file(config_.tls_cert_file);
    tls_->use_private_key_file(config_.tls_key_file, asio::ssl::context::pem);
    if (!config_.tls_client_ca_file.empty()) {
      tls_->load_verify_file(config_.tls_client_ca_file);
      tls_->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    }
  } catch (const boost::system::system_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(config_.log_name, ": cannot set up TLS from --tls_cert ",
                                                   config_.tls_cert_file, " and --tls_key ",
                                                   config_.tls_key_file, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::Start() {
  beast::error_code ec;
  tcp::resolver resolver(io_);
  const auto endpoints =
      resolver.resolve(config_.host, std::to_string(config_.port), tcp::resolver::passive, ec);
  const std::string where =
      absl::StrCat(config_.log_name, ": cannot listen on ", config_.host, ":", config_.port);
  if (ec || endpoints.empty()) return absl::UnavailableError(absl::StrCat(where, " (", ec.message(), ")"));
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat(where, " (", ec.message(), ": address in use or not local?)"));
  port_ = acceptor_.local_endpoint().port();
  work_.emplace(asio::make_work_guard(io_));
  asio::post(accept_strand_, [this] { Accept(); });
  for (int i = 0; i < config_.io_threads; ++i) io_threads_.emplace_back([this] { io_.run(); });
  return absl::OkStatus();
}

void HttpServer::Impl::Accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (stopping_.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors (or another transient failure): say so, wait a moment, go on accepting.
      if (const int64_t skipped = accept_log_.Admit(); skipped >= 0) {
        SCORED_LOG(WARNING) << config_.log_name << ": accept failed: " << ec.message()
                            << (skipped > 0 ? absl::StrCat(" (and ", skipped, " more since the last line)")
                                            : "");
      }
      auto timer = std::make_shared<asio::steady_timer>(accept_strand_, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](beast::error_code) { Accept(); });
      return;
    }
    OnAccept(std::move(socket));
    Accept();
  });
}

void HttpServer::Impl::RefuseAtAccept(tcp::socket& socket, int status, const std::string& message) const {
  const std::string body = config_.error_body(status, message);
  const std::string reply =
      absl::StrCat(StatusLine(status), "Server: scored\r\nContent-Type: application/json\r\n",
                   "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(reply), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

void HttpServer::Impl::OnAccept(tcp::socket socket) {
  beast::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  const std::string client = peer.address().to_string();
  std::shared_ptr<Connection> evict;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto mine = per_client_.find(client);
    if (mine != per_client_.end() && mine->second >= config_.limits.max_connections_per_client) {
      RefuseAtAccept(socket, 429,
                     absl::StrCat("more than ", config_.limits.max_connections_per_client,
                                  " connections from ", client));
      return;
    }
    if (open_ >= config_.limits.max_connections) {
      // Make room: the connection that has waited longest for a request head.
      Entry* oldest = nullptr;
      for (auto& [c, entry] : connections_) {
        if (entry.waiting_for_head && !entry.evicted && (oldest == nullptr || entry.since < oldest->since)) {
          oldest = &entry;
        }
      }
      if (oldest == nullptr || (evict = oldest->connection.lock()) == nullptr) {
        RefuseAtAccept(socket, 503,
                       absl::StrCat("more than ", config_.limits.max_connections, " connections are open"));
        return;
      }
      oldest->evicted = true;
    }
  }
  if (evict != nullptr) evict->CloseIfWaiting();
  auto start = [&](auto session) {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_;
    ++per_client_[client];
    connections_[session.get()] = Entry{session, false, std::chrono::steady_clock::now()};
    return session;
  };
  if (tls_.has_value()) {
    start(std::make_shared<Session<asio::ssl::stream<beast::tcp_stream>>>(this, client, peer.port(),
                                                                          std::move(socket), *tls_))
        ->Start();
  } else {
    start(std::make_shared<Session<beast::tcp_stream>>(this, client, peer.port(), std::move(socket)))
        ->Start();
  }
}

void HttpServer::Impl::MarkWaitingForHead(const Connection* c, bool waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(c);
  if (it == connections_.end()) return;
  it->second.waiting_for_head = waiting;
}

void HttpServer::Impl::MarkIdleFromNow(const Connection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(c);
  if (it == connections_.end()) return;
  it->second.waiting_for_head = true;
  it->second.since = std::chrono::steady_clock::now();
}

void HttpServer::Impl::HandlerStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++handlers_;
}

void HttpServer::Impl::HandlerFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  --handlers_;
  changed_.notify_all();
}

void HttpServer::Impl::Unregister(const Connection* c, const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (connections_.erase(c) == 0) return;
  --open_;
  if (--per_client_[client] == 0) per_client_.erase(client);
  changed_.notify_all();
}

void HttpServer::Impl::BeginShutdown() {
  if (stopping_.exchange(true)) return;
  asio::post(accept_strand_, [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [c, entry] : connections_) {
      if (auto s = entry.connection.lock()) open.push_back(std::move(s));
    }
  }
  for (const auto& s : open) s->CloseIfWaiting();
}

void HttpServer::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  BeginShutdown();
  if (!io_threads_.empty()) {
    std::unique_lock<std::mutex> lock(mu_);
    // Handlers finish when their work does (the engine still runs); their responses then have write_timeout
    // (and the linger) to go out.
    changed_.wait(lock, [this] { return handlers_ == 0; });
    changed_.wait_for(lock, Ms(config_.limits.write_timeout + kLingerTime), [this] { return open_ == 0; });
  }
  work_.reset();
  io_.stop();
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
  workers_.join();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(Config config) {
  if (!config.router || !config.error_body || config.worker_threads < 1 || config.io_threads < 1) {
    return absl::InvalidArgumentError("HttpServer::Config: a required member is missing");
  }
  auto impl = std::make_unique<Impl>(std::move(config));
  absl::Status tls = impl->SetUpTls();
  if (!tls.ok()) return tls;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Shutdown(); }
absl::Status HttpServer::Start() { return impl_->Start(); }
int HttpServer::port() const { return impl_->port(); }
void HttpServer::BeginShutdown() { impl_->BeginShutdown(); }
void HttpServer::Shutdown() { impl_->Shutdown(); }
int HttpServer::open_connections() const { return impl_->open_connections(); }

}  // namespace scored

#include "server/control_service.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "server/control_internal.h"

namespace scored {
namespace {

absl::StatusOr<std::string> ReadTextFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  return text.str();
}

}  // namespace

namespace control_internal {

absl::Status FromGrpcStatus(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

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

void LossWatcher::Start(absl::Mutex* mu, std::function<absl::Status()> lost,
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

void LossWatcher::Stop() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock lock(mu_);
    stop_ = true;
  }
  thread_.join();
}

}  // namespace control_internal

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

}  // namespace scored

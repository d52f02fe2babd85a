#include "server/security.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/status_macros.h"
#include "grpcpp/security/server_credentials.h"

namespace scored {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
// Certificates and keys are small; a multi-megabyte "PEM" is a wrong path, not a certificate bundle.
constexpr std::streamsize kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  std::string text(static_cast<size_t>(kMaxPemBytes) + 1, '\0');
  in.read(&text[0], kMaxPemBytes + 1);
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(text.size()) > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path, "' is larger than ", kMaxPemBytes, " bytes"));
  }
  return text;
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  SCORED_ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(flag, path));
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "' is not a PEM file"));
  }
  return pem;
}

absl::Status ValidateToken(absl::string_view token) {
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: the token must have ", kMinTokenLength,
                                                   "..", kMaxTokenLength, " characters, it has ",
                                                   token.size()));
  }
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "--auth_token_file: the token must be printable ASCII without spaces (one line)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(const TlsFiles& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (tls.cert_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key (mTLS is TLS)");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  SCORED_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem("tls_cert", tls.cert_file));
  SCORED_ASSIGN_OR_RETURN(pair.private_key, ReadPem("tls_key", tls.key_file));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.client_ca_file.empty()) {
    SCORED_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem("tls_client_ca", tls.client_ca_file));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(options);
}

bool IsLoopbackListen(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = absl::AsciiStrToLower(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  const std::vector<std::string> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (const std::string& p : parts) {
    int v = -1;
    if (p.empty() || p.size() > 3 || !absl::SimpleAtoi(p, &v) || v < 0 || v > 255) return false;
  }
  return true;
}

bool ConstantTimeEquals(absl::string_view secret, absl::string_view presented) {
  // Every byte of the secret is visited whatever `presented` holds, and the differences are OR-ed
  // without an early exit, so the time reveals neither a matching prefix nor the mismatch position.
  volatile unsigned char diff = presented.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff = diff | static_cast<unsigned char>(p ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<BearerTokenAuth>> BearerTokenAuth::FromFile(const std::string& path) {
  SCORED_ASSIGN_OR_RETURN(std::string text, ReadSmallFile("auth_token_file", path));
  const std::string token(absl::StripAsciiWhitespace(text));
  return FromToken(token);
}

absl::StatusOr<std::unique_ptr<BearerTokenAuth>> BearerTokenAuth::FromToken(const std::string& token) {
  SCORED_RETURN_IF_ERROR(ValidateToken(token));
  return std::unique_ptr<BearerTokenAuth>(new BearerTokenAuth(token));
}

absl::Status BearerTokenAuth::Check(const grpc::CallbackServerContext& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return CheckHeader(false, absl::string_view());
  return CheckHeader(true, absl::string_view(it->second.data(), it->second.size()));
}

absl::Status BearerTokenAuth::CheckHeader(bool present, absl::string_view value) const {
  if (!present) {
    return absl::UnauthenticatedError(
        "this server requires a bearer token: send the metadata 'authorization: Bearer <token>'");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() || !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("malformed authorization metadata: expected 'Bearer <token>'");
  }
  if (!ConstantTimeEquals(token_, absl::StripAsciiWhitespace(value.substr(kScheme.size())))) {
    return absl::UnauthenticatedError("the bearer token is not valid for this server");
  }
  return absl::OkStatus();
}

}  // namespace scored

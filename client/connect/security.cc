#include "client/connect/security.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, auth_token, "", "bearer token, if the server requires one");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding the bearer token (surrounding whitespace ignored); sent as authorization: Bearer");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signed the server's certificate: connect over TLS (default: plaintext)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate chain for mTLS (with --tls_key; implies TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");

namespace scored {
namespace client {
namespace {

// The whole file, or NOT_FOUND / INTERNAL naming `flag` and `path`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* flag) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::InternalError(absl::StrCat(flag, ": error reading ", path));
  return text;
}

}  // namespace

SecurityFlags SecurityFlagsFromCommandLine() {
  SecurityFlags f;
  f.auth_token = absl::GetFlag(FLAGS_auth_token);
  f.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  f.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  return f;
}

absl::StatusOr<std::string> BearerToken(const std::string& auth_token, const std::string& auth_token_file) {
  if (auth_token_file.empty()) return auth_token;
  if (!auth_token.empty())
    return absl::InvalidArgumentError("give --auth_token or --auth_token_file, not both");
  absl::StatusOr<std::string> text = ReadWholeFile(auth_token_file, "--auth_token_file");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: cannot read ", auth_token_file));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: ", auth_token_file, " is empty"));
  }
  return token;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag) {
  return ReadWholeFile(path, flag);
}

absl::StatusOr<ClientSecurity> LoadSecurity(const SecurityFlags& flags) {
  ClientSecurity s;
  absl::StatusOr<std::string> token = BearerToken(flags.auth_token, flags.auth_token_file);
  if (!token.ok()) return token.status();
  s.bearer_token = *std::move(token);
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together (mTLS client certificate)");
  }
  s.tls = !flags.tls_ca.empty() || !flags.tls_cert.empty();
  if (!flags.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(flags.tls_ca, "--tls_ca");
    if (!ca.ok()) return ca.status();
    s.root_certs_pem = *std::move(ca);
  }
  if (!flags.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(flags.tls_cert, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(flags.tls_key, "--tls_key");
    if (!key.ok()) return key.status();
    s.cert_chain_pem = *std::move(cert);
    s.private_key_pem = *std::move(key);
  }
  return s;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const ClientSecurity& security) {
  if (!security.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = security.root_certs_pem;
  ssl.pem_cert_chain = security.cert_chain_pem;
  ssl.pem_private_key = security.private_key_pem;
  return grpc::SslCredentials(ssl);
}

void AddAuthorization(const std::string& bearer_token, grpc::ClientContext* context) {
  if (!bearer_token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", bearer_token));
}

}  // namespace client
}  // namespace scored

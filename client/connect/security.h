// Connection security shared by the scored clients (scored-ppl, scored-load): the same flags with the same
// meaning in both, the files they name read the same way, the same channel credentials and call metadata.
//
//   --tls_ca PEM         CA bundle that signed the server's certificate: connect over TLS (default:
//   plaintext)
//   --tls_cert PEM       client certificate chain for mTLS (with --tls_key; implies TLS, with the system's
//                        roots when --tls_ca is not given)
//   --tls_key PEM        private key of --tls_cert
//   --auth_token T       bearer token, sent as "authorization: Bearer T" on every call
//   --auth_token_file F  the same, read from F (surrounding whitespace ignored); not with --auth_token
//
// The flags are defined in security.cc (a binary that calls SecurityFlagsFromCommandLine has them);
// LoadSecurity reads the files.
//
// Thread-safety: plain functions; a ClientSecurity is an immutable value once loaded.
#ifndef SCORED_CLIENT_CONNECT_SECURITY_H_
#define SCORED_CLIENT_CONNECT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"

namespace scored {
namespace client {

// What the flags say: token text and file paths, "" = not given.
struct SecurityFlags {
  std::string auth_token;
  std::string auth_token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// The values of the five flags above.
SecurityFlags SecurityFlagsFromCommandLine();

// The files' contents.
struct ClientSecurity {
  std::string bearer_token;    // "" = send no authorization header
  bool tls = false;            // tls_ca or tls_cert given
  std::string root_certs_pem;  // "" with tls = the system's roots
  std::string cert_chain_pem;  // mTLS client certificate and its key (both or neither)
  std::string private_key_pem;
};

// The bearer token of --auth_token / --auth_token_file. INVALID_ARGUMENT when both are given, when the file
// cannot be read or holds only whitespace (each message names the flag).
absl::StatusOr<std::string> BearerToken(const std::string& auth_token, const std::string& auth_token_file);

// The PEM file at `path` for `flag` ("--tls_ca", ...): NOT_FOUND / INTERNAL naming the flag and the path.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag);

// Everything the flags name: BearerToken's errors; INVALID_ARGUMENT when only one of --tls_cert and
// --tls_key is given; ReadPemFile's errors.
absl::StatusOr<ClientSecurity> LoadSecurity(const SecurityFlags& flags);

// Channel credentials: SSL with the PEMs when `tls`, else insecure.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const ClientSecurity& security);

// Adds "authorization: Bearer <token>" to `context` when there is a token.
void AddAuthorization(const std::string& bearer_token, grpc::ClientContext* context);

}  // namespace client
}  // namespace scored

#endif  // SCORED_CLIENT_CONNECT_SECURITY_H_

// Transport security and caller authentication of the gRPC listener (server/README.md, "Security model").
//
//   TLS       --tls_cert/--tls_key (PEM) turn the listener into TLS; --tls_client_ca additionally
//             requires every client to present a certificate signed by that CA (mTLS). Handshake
//             failures never reach the service: the client sees UNAVAILABLE.
//   Token     --auth_token_file holds one bearer token. Every scored.v1.Scorer call must carry the
//             metadata `authorization: Bearer <token>`; otherwise it fails with UNAUTHENTICATED before
//             any work is done (and is counted in scored_requests_total{code="UNAUTHENTICATED"}).
//             grpc.health.v1 and server reflection stay open: probes need no secret, and reflection
//             only describes the public schema.
//
// Why the token is checked inside the service rather than by a grpc::AuthMetadataProcessor or an
// interceptor: with gRPC 1.51 a processor can only be attached to TLS credentials (the insecure
// credentials assert on it), but a token must also work on a plaintext loopback listener; and a
// server interceptor cannot finish a callback-API call with a status. A check at the top of each
// Scorer method covers both transports and records the method's metrics in the same place as every
// other outcome.
//
// Thread-safety: BearerTokenAuth is immutable after creation; Check() is safe from any thread.
#ifndef SCORED_SERVER_SECURITY_H_
#define SCORED_SERVER_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace scored {

struct TlsFiles {
  std::string cert_file;       // PEM certificate chain of the server; empty = plaintext listener
  std::string key_file;        // PEM private key of cert_file
  std::string client_ca_file;  // PEM CA bundle; non-empty = require and verify client certificates
};

// Reads the files and builds the listener's credentials: insecure when `tls.cert_file` is empty,
// else TLS (mTLS with a client CA). Every file is parsed with OpenSSL and the key is matched against the
// chain's first certificate (X509_check_private_key), so that a wrong file fails here, before the model
// loads, and not when the listener starts or at a client's handshake. INVALID_ARGUMENT names the flag,
// the file and what is wrong: missing or unreadable; not PEM (no BEGIN line, bad base64); no certificate
// in it, or a certificate block that is no X.509 certificate; no private key, an encrypted key, or one
// that cannot be parsed; a key that does not match the certificate; a server certificate (any of the
// chain) whose notAfter has passed (refused: every client would fail its handshake); a client CA bundle
// whose every certificate has expired. Only logged as warnings: a certificate not valid yet (the hosts'
// clocks may differ a little) and an expired CA beside valid ones in the bundle. Also INVALID_ARGUMENT: a
// key without a certificate (or the reverse), a client CA without TLS.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(const TlsFiles& tls);

// Whether the host part of "host:port" is a loopback address: localhost, 127.0.0.0/8, [::1].
// Anything else (0.0.0.0, [::], a name, a routable address) is remote.
bool IsLoopbackListen(const std::string& address);

// a == b in time that depends only on a.size() (the secret's length), never on where they differ.
bool ConstantTimeEquals(absl::string_view secret, absl::string_view presented);

class BearerTokenAuth {
 public:
  // The file holds one token; surrounding whitespace (a trailing newline) is ignored. The token must
  // be 16..4096 printable ASCII characters without spaces (a valid HTTP/2 header value).
  // INVALID_ARGUMENT names --auth_token_file and what is wrong (never the token itself).
  static absl::StatusOr<std::unique_ptr<BearerTokenAuth>> FromFile(const std::string& path);
  // Same checks, for a token already in memory.
  static absl::StatusOr<std::unique_ptr<BearerTokenAuth>> FromToken(const std::string& token);

  // OK if the call carries `authorization: Bearer <token>` exactly: the scheme (case-insensitive), one or
  // more spaces, the token, nothing after it; else UNAUTHENTICATED saying whether the header was missing,
  // malformed or wrong. The one check of gRPC, HTTP and the control channel.
  absl::Status Check(const grpc::CallbackServerContext& context) const;
  // The same check on the header value alone; `present` false = no authorization header.
  absl::Status CheckHeader(bool present, absl::string_view value) const;

 private:
  explicit BearerTokenAuth(std::string token) : token_(std::move(token)) {}
  const std::string token_;
};

}  // namespace scored

#endif  // SCORED_SERVER_SECURITY_H_

#include "server/security.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/base/logging.h"
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

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct OpenSslFree {
  void operator()(void* p) const { OPENSSL_free(p); }
};
using UniqueBio = std::unique_ptr<BIO, BioFree>;
using UniqueX509 = std::unique_ptr<X509, X509Free>;
using UniquePkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Every error in this thread's OpenSSL queue, oldest first, as "library: reason" (e.g. "asn1 encoding
// routines: too long"); clears the queue so that no stale error reaches gRPC's own use of OpenSSL on this
// thread.
std::string TakeOpenSslError() {
  std::vector<std::string> parts;
  while (const unsigned long e = ERR_get_error()) {
    const char* lib = ERR_lib_error_string(e);
    const char* reason = ERR_reason_error_string(e);
    std::string part = absl::StrCat(lib != nullptr ? lib : "OpenSSL", ": ", reason != nullptr ? reason : "?");
    if (parts.empty() || parts.back() != part) parts.push_back(std::move(part));
  }
  return parts.empty() ? "unknown error" : absl::StrJoin(parts, "; ");
}

UniqueBio MemoryBio(const std::string& text) {
  return UniqueBio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string TimeText(const ASN1_TIME* t) {
  UniqueBio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string SubjectText(const X509* cert) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

// One PEM block: its label ("CERTIFICATE", "PRIVATE KEY", ...), whether its headers say it is encrypted
// (legacy "Proc-Type: 4,ENCRYPTED"), and its DER bytes.
struct PemBlock {
  std::string label;
  bool encrypted_header = false;
  std::string der;
};

// Splits a PEM file into its blocks. INVALID_ARGUMENT names the flag, the file and the block that is not
// valid PEM (bad base64, no END line).
absl::StatusOr<std::vector<PemBlock>> PemBlocks(const std::string& flag, const std::string& path,
                                                const std::string& pem) {
  UniqueBio bio = MemoryBio(pem);
  if (bio == nullptr) return absl::ResourceExhaustedError("out of memory reading a PEM file");
  std::vector<PemBlock> blocks;
  while (true) {
    char* name = nullptr;
    char* header = nullptr;
    unsigned char* data = nullptr;
    long len = 0;
    if (PEM_read_bio(bio.get(), &name, &header, &data, &len) != 1) {
      const unsigned long e = ERR_peek_last_error();
      if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE && !blocks.empty()) {
        ERR_clear_error();  // the end of the file
        return blocks;
      }
      const std::string why = TakeOpenSslError();
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "': PEM block ",
                                                     blocks.size() + 1, " is not valid PEM (", why, ")"));
    }
    std::unique_ptr<char, OpenSslFree> name_owner(name), header_owner(header);
    std::unique_ptr<unsigned char, OpenSslFree> data_owner(data);
    PemBlock block;
    block.label = name;
    block.encrypted_header = absl::StrContains(header, "ENCRYPTED");
    block.der.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(len));
    blocks.push_back(std::move(block));
  }
}

bool IsCertificateLabel(const std::string& label) {
  return label == "CERTIFICATE" || label == "X509 CERTIFICATE" || label == "TRUSTED CERTIFICATE";
}

// Every certificate of a PEM file, parsed; at least one. INVALID_ARGUMENT names the flag, the file and
// what is wrong: no certificate in it (e.g. a key given for a certificate), or a certificate block whose
// contents are not an X.509 certificate.
absl::StatusOr<std::vector<UniqueX509>> ParseCertificates(const std::string& flag, const std::string& path,
                                                          const std::string& pem) {
  SCORED_ASSIGN_OR_RETURN(std::vector<PemBlock> blocks, PemBlocks(flag, path, pem));
  std::vector<UniqueX509> certs;
  std::vector<std::string> labels;
  for (size_t i = 0; i < blocks.size(); ++i) {
    labels.push_back(absl::StrCat("'", blocks[i].label, "'"));
    if (!IsCertificateLabel(blocks[i].label)) continue;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(blocks[i].der.data());
    UniqueX509 cert(blocks[i].label == "TRUSTED CERTIFICATE"
                        ? d2i_X509_AUX(nullptr, &p, static_cast<long>(blocks[i].der.size()))
                        : d2i_X509(nullptr, &p, static_cast<long>(blocks[i].der.size())));
    if (cert == nullptr) {
      const std::string why = TakeOpenSslError();
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "': PEM block ", i + 1,
                                                     " is not a valid X.509 certificate (", why, ")"));
    }
    certs.push_back(std::move(cert));
  }
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path,
                     "' holds no certificate (its PEM blocks: ", absl::StrJoin(labels, ", "), ")"));
  }
  return certs;
}

// The private key of a PEM file. INVALID_ARGUMENT names --tls_key, the file and what is wrong: no private
// key block, an encrypted key (the server has no passphrase to give), or a key that cannot be parsed.
absl::StatusOr<UniquePkey> ParsePrivateKey(const std::string& path, const std::string& pem) {
  SCORED_ASSIGN_OR_RETURN(std::vector<PemBlock> blocks, PemBlocks("tls_key", path, pem));
  const PemBlock* key_block = nullptr;
  std::vector<std::string> labels;
  for (const PemBlock& b : blocks) {
    labels.push_back(absl::StrCat("'", b.label, "'"));
    if (key_block == nullptr && absl::EndsWith(b.label, "PRIVATE KEY")) key_block = &b;
  }
  if (key_block == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key: '", path, "' holds no private key (its PEM blocks: ", absl::StrJoin(labels, ", "), ")"));
  }
  if (key_block->label == "ENCRYPTED PRIVATE KEY" || key_block->encrypted_header) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key: '", path,
                     "' is encrypted; scored needs an unencrypted key (e.g. openssl pkey -in KEY -out "
                     "PLAIN), readable only by its user"));
  }
  UniqueBio bio = MemoryBio(pem);
  if (bio == nullptr) return absl::ResourceExhaustedError("out of memory reading a PEM file");
  // A passphrase callback that gives none: an encrypted key fails instead of prompting on the terminal.
  auto no_passphrase = [](char*, int, int, void*) -> int { return -1; };
  UniquePkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  if (key == nullptr) {
    const std::string why = TakeOpenSslError();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key: '", path, "' is not a valid private key (", why, ")"));
  }
  return key;
}

// Refuses a certificate whose validity has ended (every client would refuse the handshake, so the server
// could serve no one); only warns about one not valid yet (the hosts' clocks may differ by a little).
absl::Status CheckValidityPeriod(const std::string& flag, const std::string& path, const X509* cert,
                                 size_t index) {
  const std::string what = absl::StrCat("certificate ", index + 1, " (", SubjectText(cert), ")");
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "': ", what, " expired on ",
                                                   TimeText(X509_get0_notAfter(cert))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    SCORED_LOG(WARNING) << "--" << flag << ": '" << path << "': " << what << " is not valid before "
                        << TimeText(X509_get0_notBefore(cert)) << " (is this host's clock right?)";
  }
  return absl::OkStatus();
}

// Parses the server's certificate chain, its key and the client CA bundle (empty = none) and checks them
// against each other, so that a wrong file fails before the model loads rather than at the listener's
// start or at the first handshake.
absl::Status CheckTlsFiles(const TlsFiles& tls, const std::string& cert_pem, const std::string& key_pem,
                           const std::string& client_ca_pem) {
  SCORED_ASSIGN_OR_RETURN(std::vector<UniqueX509> chain,
                          ParseCertificates("tls_cert", tls.cert_file, cert_pem));
  for (size_t i = 0; i < chain.size(); ++i) {
    SCORED_RETURN_IF_ERROR(CheckValidityPeriod("tls_cert", tls.cert_file, chain[i].get(), i));
  }
  SCORED_ASSIGN_OR_RETURN(UniquePkey key, ParsePrivateKey(tls.key_file, key_pem));
  if (X509_check_private_key(chain[0].get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key: '", tls.key_file,
                                                   "' does not match the certificate in --tls_cert '",
                                                   tls.cert_file, "' (", SubjectText(chain[0].get()), ")"));
  }
  if (tls.client_ca_file.empty()) return absl::OkStatus();
  SCORED_ASSIGN_OR_RETURN(std::vector<UniqueX509> cas,
                          ParseCertificates("tls_client_ca", tls.client_ca_file, client_ca_pem));
  // A bundle may hold an expired CA beside current ones; only one where all have expired verifies no one.
  size_t expired = 0;
  for (size_t i = 0; i < cas.size(); ++i) {
    const absl::Status valid = CheckValidityPeriod("tls_client_ca", tls.client_ca_file, cas[i].get(), i);
    if (valid.ok()) continue;
    ++expired;
    if (expired == cas.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(valid.message(), cas.size() > 1 ? " (every CA of the bundle has expired)" : ""));
    }
    SCORED_LOG(WARNING) << valid.message() << " (clients it signed are refused; the bundle has others)";
  }
  return absl::OkStatus();
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
  SCORED_RETURN_IF_ERROR(CheckTlsFiles(tls, pair.cert_chain, pair.private_key, options.pem_root_certs));
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
  // RFC 6750: the scheme, one or more spaces, the token, and nothing after it (no trailing bytes, no
  // whitespace, no second scheme).
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() || !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("malformed authorization metadata: expected 'Bearer <token>'");
  }
  absl::string_view presented = value.substr(kScheme.size());
  while (!presented.empty() && presented.front() == ' ') presented.remove_prefix(1);
  if (!ConstantTimeEquals(token_, presented)) {
    return absl::UnauthenticatedError("the bearer token is not valid for this server");
  }
  return absl::OkStatus();
}

}  // namespace scored

// Test certificates for the TLS e2e tests of the clients: a CA, a server certificate for 127.0.0.1 /
// localhost and a client certificate, all signed by the CA (EC P-256, valid 30 days), made with the openssl
// command line in `dir` (ca.pem, server.pem/.key, client.pem/.key). HaveOpenssl says whether it can run.
#ifndef SCORED_TESTS_CLIENT_TEST_CERTS_H_
#define SCORED_TESTS_CLIENT_TEST_CERTS_H_

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace scored {
namespace testing {

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline bool HaveOpenssl() { return std::system("openssl version > /dev/null 2>&1") == 0; }

// Makes the certificates; false with openssl's output in `log` on failure.
inline bool MakeTestCerts(const std::string& dir, std::string* log) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "'\n", "openssl req -x509 ", ec,
      " -keyout ca.key -out ca.pem -days 30 -subj '/CN=scored client test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req -new ", ec, " -keyout server.key -out server.csr -subj '/CN=localhost'\n",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n",
      "extendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 30 ",
      "-extfile server.ext -out server.pem\n", "openssl req -new ", ec,
      " -keyout client.key -out client.csr -subj '/CN=scored client test'\n",
      "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext\n",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 3 -days 30 ",
      "-extfile client.ext -out client.pem\n");
  WriteTextFile(dir + "/make.sh", script);
  const int rc = std::system(absl::StrCat("bash '", dir, "/make.sh' > '", dir, "/make.log' 2>&1").c_str());
  if (rc != 0) *log = ReadTextFile(dir + "/make.log");
  return rc == 0;
}

}  // namespace testing
}  // namespace scored

#endif  // SCORED_TESTS_CLIENT_TEST_CERTS_H_

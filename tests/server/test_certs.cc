#include "tests/server/test_certs.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace scored::testing {

bool HaveOpenssl() { return std::system("openssl version > /dev/null 2>&1") == 0; }

const TestCerts* TestCerts::Get(const std::string& prefix, const std::string& script, std::string* error) {
  static auto* made = new std::map<std::string, const TestCerts*>();
  if (auto it = made->find(prefix); it != made->end()) return it->second;
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  const TestCerts* certs = nullptr;
  if (mkdtemp(tmpl.data()) != nullptr) {
    const std::string dir = tmpl;
    std::ofstream(dir + "/make.sh") << "set -e; cd '" << dir << "'\n" << script;
    const std::string command = "bash '" + dir + "/make.sh' > '" + dir + "/make.log' 2>&1";
    if (std::system(command.c_str()) == 0) {
      certs = new TestCerts(dir);
    } else if (error != nullptr) {
      std::ifstream log(dir + "/make.log");
      std::stringstream text;
      text << log.rdbuf();
      *error = text.str();
    }
  }
  (*made)[prefix] = certs;
  return certs;
}

}  // namespace scored::testing

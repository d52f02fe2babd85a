#include "client/connect/servers.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace scored {
namespace client {
namespace {

constexpr absl::string_view kDnsScheme = "dns:///";

// Splits "host:port" / "[v6]:port" at the port's colon; false without a non-empty port.
bool SplitHostPort(absl::string_view target, std::string* host, std::string* port) {
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == target.size() || colon == 0) return false;
  *host = std::string(target.substr(0, colon));
  *port = std::string(target.substr(colon + 1));
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  return !host->empty() && port->find_first_not_of("0123456789") == std::string::npos;
}

absl::StatusOr<std::vector<std::string>> ResolveDns(absl::string_view target) {
  std::string host, port;
  if (!SplitHostPort(target, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--server dns:///", target, ": want dns:///NAME:PORT"));
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, " (--server dns:///", target, "): ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    out.push_back(a->ai_family == AF_INET6 ? absl::StrCat("[", text, "]:", port)
                                           : absl::StrCat(text, ":", port));
  }
  freeaddrinfo(found);
  if (out.empty()) return absl::UnavailableError(absl::StrCat(host, " resolved to no address"));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveServers(absl::string_view spec) {
  if (spec.empty()) return absl::InvalidArgumentError("--server is empty");
  std::vector<std::string> targets;
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--server '", spec, "' has an empty entry"));
    }
    const size_t scheme = entry.find("://");
    if (scheme != absl::string_view::npos && !absl::StartsWith(entry, kDnsScheme)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--server entry '", entry, "': give HOST:PORT, without ", entry.substr(0, scheme + 3),
          " (scored's gRPC address, e.g. 127.0.0.1:50051, or dns:///name:port; not the URL of its OpenAI or "
          "metrics endpoint)"));
    }
    if (absl::ConsumePrefix(&entry, kDnsScheme)) {
      absl::StatusOr<std::vector<std::string>> resolved = ResolveDns(entry);
      if (!resolved.ok()) return resolved.status();
      targets.insert(targets.end(), resolved->begin(), resolved->end());
      continue;
    }
    std::string host, port;
    if (!SplitHostPort(entry, &host, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--server entry '", entry, "' is not host:port (or dns:///name:port)"));
    }
    targets.emplace_back(entry);
  }
  std::vector<std::string> unique;
  for (std::string& t : targets) {
    if (std::find(unique.begin(), unique.end(), t) == unique.end()) unique.push_back(std::move(t));
  }
  return unique;
}

absl::Status CheckSameModel(const std::vector<std::string>& servers,
                            const std::vector<scored::v1::ModelInfo>& infos) {
  using Info = scored::v1::ModelInfo;
  struct Field {
    const char* name;
    std::function<std::string(const Info&)> get;
  };
  const std::vector<Field> fields = {
      {"model_fingerprint", [](const Info& i) { return i.model_fingerprint(); }},
      {"tokenizer_fingerprint", [](const Info& i) { return i.tokenizer_fingerprint(); }},
      {"reference.model_fingerprint", [](const Info& i) { return i.reference().model_fingerprint(); }},
      {"compute_dtype", [](const Info& i) { return i.compute_dtype(); }},
      {"format (weights and KV-cache mode)", [](const Info& i) { return i.format(); }},
      {"reference.format", [](const Info& i) { return i.reference().format(); }},
      {"backend", [](const Info& i) { return i.backend(); }},
      {"tp", [](const Info& i) { return absl::StrCat(i.tp()); }},
      {"vocab_size", [](const Info& i) { return absl::StrCat(i.vocab_size()); }},
      {"bos_id / eos_id / add_bos_by_default",
       [](const Info& i) {
         return absl::StrCat(i.bos_id(), " / ", i.eos_id(), " / ", i.add_bos_by_default());
       }},
  };
  for (size_t s = 1; s < infos.size() && s < servers.size(); ++s) {
    for (const Field& f : fields) {
      const std::string first = f.get(infos[0]);
      const std::string other = f.get(infos[s]);
      if (first != other) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", servers[s], " differs from ", servers[0], " in ", f.name, ": '", other, "' vs '",
            first,
            "' (every server of one run must serve the same model, tokenizer, reference, dtype and KV-cache "
            "mode, so that the result equals a one-server run)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace client
}  // namespace scored

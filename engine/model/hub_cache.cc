#include "engine/model/hub_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace scored {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// A repository name part: letters, digits, '-', '_', '.' (the hub's rule), not "." or "..".
bool IsNamePart(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (const char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string HubCacheDir() {
  if (const std::string hub = Env("HF_HUB_CACHE"); !hub.empty()) return hub;
  if (const std::string home = Env("HF_HOME"); !home.empty()) return home + "/hub";
  if (const std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/huggingface/hub";
  return Env("HOME") + "/.cache/huggingface/hub";
}

absl::StatusOr<std::string> ResolveModelPath(const std::string& model) {
  std::error_code ec;
  if (model.empty() || std::filesystem::exists(model, ec)) return model;
  std::string id = model;
  std::string revision = "main";
  if (const size_t at = id.find('@'); at != std::string::npos) {
    revision = id.substr(at + 1);
    id = id.substr(0, at);
  }
  const size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos ||
      !IsNamePart(id.substr(0, slash)) || !IsNamePart(id.substr(slash + 1)) || !IsNamePart(revision)) {
    return model;  // a path that does not exist: the loader says so
  }
  const std::string cache = HubCacheDir();
  const std::string repo = absl::StrCat(cache, "/models--", id.substr(0, slash), "--", id.substr(slash + 1));
  std::string snapshot = revision;
  if (std::ifstream ref(repo + "/refs/" + revision); ref) {
    std::getline(ref, snapshot);
    snapshot = std::string(absl::StripAsciiWhitespace(snapshot));
  }
  const std::string dir = absl::StrCat(repo, "/snapshots/", snapshot);
  if (!snapshot.empty() && std::filesystem::is_directory(dir, ec)) return dir;
  return absl::NotFoundError(absl::StrCat(
      model, ": not a folder, and the hub id ", id, " (revision ", revision,
      ") is not in the local hub cache ", cache,
      " (HF_HUB_CACHE / HF_HOME); scored never downloads: fetch it first, e.g. `huggingface-cli download ",
      id, revision == "main" ? "" : " --revision " + revision, "`, or pass the model's folder"));
}

}  // namespace scored

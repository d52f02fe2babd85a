// Tokenizer fingerprint: SHA-256 over the concatenated bytes of the tokenizer's files in the order
// the loader lists them (see loaders.h), i.e. the value of `cat FILES... | sha256sum`.
#include "engine/base/sha256.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {

absl::StatusOr<std::string> FingerprintFiles(const std::vector<std::string>& paths) {
  Sha256 hash;
  for (const std::string& path : paths) {
    SCORED_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path));
    hash.Update(bytes);
  }
  return hash.HexDigest();
}

}  // namespace tokenizer_internal
}  // namespace scored

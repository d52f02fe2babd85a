// Tokenizer::Load: picks the format from the files present in the folder.
#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/hf_config.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/text_util.h"

namespace scored {

using tokenizer_internal::FileExists;
using tokenizer_internal::JoinPath;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir, Format format) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": tokenizer folder not found"));
  }
  switch (format) {
    case Format::kAuto:
      break;
    case Format::kHfTokenizerJson:
      return tokenizer_internal::LoadHfTokenizerJson(dir);
    case Format::kSentencePiece:
      return tokenizer_internal::LoadSentencePiece(dir);
    case Format::kTiktoken:
      return tokenizer_internal::LoadTiktoken(dir);
    case Format::kVocabMerges:
      return tokenizer_internal::LoadVocabMerges(dir);
  }
  const std::string model_path = JoinPath(dir, "tokenizer.model");
  if (FileExists(JoinPath(dir, "tokenizer.json"))) {
    auto json = tokenizer_internal::LoadHfTokenizerJson(dir);
    // A tokenizer.json using a feature we lack (e.g. a Unigram model) next to a tokenizer.model:
    // fall back to the latter, which the same models ship for the same vocabulary.
    if (json.ok() || json.status().code() != absl::StatusCode::kUnimplemented || !FileExists(model_path)) {
      return json;
    }
    SCORED_LOG(WARNING) << json.status().message() << "; using " << model_path << " instead";
  }
  if (FileExists(model_path)) {
    SCORED_ASSIGN_OR_RETURN(const std::string bytes, tokenizer_internal::ReadFileBytes(model_path));
    return tokenizer_internal::LooksLikeTiktoken(bytes) ? tokenizer_internal::LoadTiktoken(dir)
                                                        : tokenizer_internal::LoadSentencePiece(dir);
  }
  const bool has_vocab = FileExists(JoinPath(dir, "vocab.json"));
  const bool has_merges = FileExists(JoinPath(dir, "merges.txt"));
  if (has_vocab && has_merges) return tokenizer_internal::LoadVocabMerges(dir);
  if (has_vocab != has_merges) {
    return absl::NotFoundError(absl::StrCat(JoinPath(dir, has_vocab ? "merges.txt" : "vocab.json"),
                                            ": file not found (needed with ",
                                            has_vocab ? "vocab.json" : "merges.txt", ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      dir, ": no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  return Load(dir, Format::kAuto);
}

}  // namespace scored

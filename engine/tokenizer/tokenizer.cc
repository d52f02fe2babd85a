// Tokenizer::Load: picks the format from the files present in the folder.
#include "engine/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/hf_config.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/text_util.h"

namespace scored {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir, Format format) {
  using namespace tokenizer_internal;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": tokenizer folder not found"));
  }
  switch (format) {
    case Format::kAuto:
      break;
    case Format::kHfTokenizerJson:
      return LoadHfTokenizerJson(dir);
    case Format::kSentencePiece:
      return LoadSentencePiece(dir);
    case Format::kTiktoken:
      return LoadTiktoken(dir);
    case Format::kVocabMerges:
      return LoadVocabMerges(dir);
  }
  if (FileExists(JoinPath(dir, "tokenizer.json"))) return LoadHfTokenizerJson(dir);
  const std::string model_path = JoinPath(dir, "tokenizer.model");
  if (FileExists(model_path)) {
    SCORED_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(model_path));
    return LooksLikeTiktoken(bytes) ? LoadTiktoken(dir) : LoadSentencePiece(dir);
  }
  const bool has_vocab = FileExists(JoinPath(dir, "vocab.json"));
  const bool has_merges = FileExists(JoinPath(dir, "merges.txt"));
  if (has_vocab && has_merges) return LoadVocabMerges(dir);
  if (has_vocab != has_merges) {
    return absl::NotFoundError(absl::StrCat(JoinPath(dir, has_vocab ? "merges.txt" : "vocab.json"),
                                            ": file not found (needed with ",
                                            has_vocab ? "vocab.json" : "merges.txt", ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      dir, ": no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)"));
}

}  // namespace scored

namespace scored {

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  return Load(dir, Format::kAuto);
}

}  // namespace scored

// SentencePiece `.model` tokenizer (Llama-2, Mistral, stories260K) behind SentencePieceWrapper.
//
// Encode: sentencepiece's default encode (no BOS/EOS), special-token text is NOT matched (raw
// sentencepiece behaviour: "<s>" is tokenized as characters). Decode: runs of ordinary ids are
// decoded by sentencepiece (which drops the dummy-prefix space at the start of each run); control
// tokens (<s>, </s>) are rendered as their piece text between runs.
// BOS/EOS/add_bos: the model's own ids and "add BOS", overridden by tokenizer_config.json /
// special_tokens_map.json where present.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/hf_config.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_wrapper.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace tokenizer_internal {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

class SentencePieceTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    SCORED_RETURN_IF_ERROR(ValidateUtf8(text));
    std::vector<int> ids;
    const std::string error = sp_.Encode(std::string(text), &ids);
    if (!error.empty()) return absl::InternalError(absl::StrCat("sentencepiece encode: ", error));
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&]() -> absl::Status {
      if (run.empty()) return absl::OkStatus();
      std::string piece_text;
      const std::string error = sp_.Decode(run, &piece_text);
      if (!error.empty()) return absl::InternalError(absl::StrCat("sentencepiece decode: ", error));
      out.append(piece_text);
      run.clear();
      return absl::OkStatus();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", id, " at position ", i, " is out of range [0, ", vocab_size_, ")"));
      }
      if (sp_.IsControl(id)) {
        SCORED_RETURN_IF_ERROR(flush());
        out.append(sp_.IdToPiece(id));
      } else {
        run.push_back(id);
      }
    }
    SCORED_RETURN_IF_ERROR(flush());
    return out;
  }

  int64_t TokenByteLength(int32_t id) const override {
    return id < 0 || id >= vocab_size_ ? 0 : byte_length_[id];
  }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool add_bos_by_default() const override { return add_bos_; }
  std::string kind() const override { return "sentencepiece"; }
  std::string fingerprint() const override { return fingerprint_; }

  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir) {
    const std::string path = JoinPath(dir, "tokenizer.model");
    SCORED_ASSIGN_OR_RETURN(const std::string bytes, ReadFileBytes(path));
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
    const std::string error = t->sp_.LoadFromSerializedProto(bytes);
    if (!error.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a valid SentencePiece model: ", error));
    }
    t->vocab_size_ = t->sp_.piece_size();
    t->byte_length_.resize(t->vocab_size_);
    for (int id = 0; id < t->vocab_size_; ++id) {
      if (t->sp_.IsControl(id) || t->sp_.IsUnknown(id) || t->sp_.IsUnused(id)) {
        t->byte_length_[id] = 0;
      } else if (t->sp_.IsByte(id)) {
        t->byte_length_[id] = 1;
      } else {
        const std::string piece = t->sp_.IdToPiece(id);
        int64_t n = static_cast<int64_t>(piece.size());
        for (size_t p = piece.find(kMetaspace); p != std::string::npos;
             p = piece.find(kMetaspace, p + kMetaspace.size())) {
          n -= static_cast<int64_t>(kMetaspace.size()) - 1;  // '▁' is a 1-byte space
        }
        t->byte_length_[id] = n;
      }
    }
    t->bos_id_ = t->sp_.bos_id();
    t->eos_id_ = t->sp_.eos_id();
    t->add_bos_ = t->bos_id_ >= 0;
    SCORED_ASSIGN_OR_RETURN(const HfTokenizerConfig config, ReadHfTokenizerConfig(dir));
    auto resolve = [&](const std::optional<std::string>& name, const char* what,
                       int32_t* id) -> absl::Status {
      if (!name) return absl::OkStatus();
      const int found = t->sp_.PieceToId(*name);
      if (t->sp_.IdToPiece(found) != *name) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": ", what, " '", *name, "' (tokenizer config) is not a piece of ", path));
      }
      *id = found;
      return absl::OkStatus();
    };
    SCORED_RETURN_IF_ERROR(resolve(config.bos_token, "bos_token", &t->bos_id_));
    SCORED_RETURN_IF_ERROR(resolve(config.eos_token, "eos_token", &t->eos_id_));
    t->add_bos_ = config.add_bos_token.value_or(t->add_bos_);
    if (t->add_bos_ && t->bos_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": BOS is to be added by default but no BOS token is defined"));
    }
    std::vector<std::string> files = {path};
    files.insert(files.end(), config.files_read.begin(), config.files_read.end());
    SCORED_ASSIGN_OR_RETURN(t->fingerprint_, FingerprintFiles(files));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

 private:
  SentencePieceTokenizer() = default;

  SentencePieceWrapper sp_;
  int64_t vocab_size_ = 0;
  std::vector<int64_t> byte_length_;  // [vocab_size]
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = true;
  std::string fingerprint_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& dir) {
  return SentencePieceTokenizer::Load(dir);
}

}  // namespace tokenizer_internal
}  // namespace scored

// SentencePiece `.model` tokenizer (Llama-2, Mistral, stories260K), native (SentencePieceBpe; no
// libsentencepiece at run time).
//
// Encode: the library's default encode (no BOS/EOS), special-token text is NOT matched ("<s>" is
// tokenized as characters). The normalized text is cut into words at the start of each run of
// '▁' when that is exact for the vocabulary (SentencePieceBpe::words_split_exact) and words are
// cached for the duration of one call. Decode: runs of ordinary ids are decoded as the library
// does (dropping the dummy-prefix space at the start of each run); control tokens (<s>, </s>) are
// rendered as their piece text between runs.
// BOS/EOS/add_bos: the model's own ids and "add BOS", overridden by tokenizer_config.json /
// special_tokens_map.json where present.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/hf_config.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_bpe.h"
#include "engine/tokenizer/sentencepiece_proto.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {
namespace tokenizer_internal {
namespace {

// SentencePieceBpe keeps int32 byte offsets; normalizing at most triples the size (' ' -> '▁').
constexpr size_t kMaxTextBytes = size_t{1} << 29;

class SentencePieceTokenizer : public Tokenizer {
 public:
  using Tokenizer::Encode;
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeLimits& limits) const override {
    SCORED_RETURN_IF_ERROR(ValidateUtf8(text));
    if (text.size() > kMaxTextBytes) {
      return absl::InvalidArgumentError(absl::StrCat("text of ", text.size(),
                                                     " bytes is longer than the SentencePiece limit of ",
                                                     kMaxTextBytes, " bytes"));
    }
    EncodeGuard guard(limits, max_bytes_per_token_);
    SCORED_RETURN_IF_ERROR(guard.Poll(0));
    std::string normalized;
    model_.Normalize(text, &normalized);
    SCORED_RETURN_IF_ERROR(guard.Poll(0));
    std::vector<int32_t> ids;
    // A limit bounds the ids kept; reserving for the whole text would cost its full size up front.
    const size_t expected = normalized.size() / 3 + 8;
    ids.reserve(limits.max_tokens >= 0
                    ? std::min<size_t>(expected, static_cast<size_t>(limits.max_tokens) + 1)
                    : expected);
    SentencePieceBpe::Scratch scratch;
    scratch.stop = guard.stop();
    if (!model_.words_split_exact()) {
      SCORED_RETURN_IF_ERROR(guard.BeforeWord(0, normalized.size()));
      model_.EncodeNormalized(normalized, &scratch, &ids);
      if (scratch.stopped) return guard.Stopped(ids.size());
      SCORED_RETURN_IF_ERROR(guard.Word(ids.size()));
      return ids;
    }
    // Word -> [offset, count) in cache_ids.
    absl::flat_hash_map<std::string_view, std::pair<int32_t, int32_t>> cache;
    std::vector<int32_t> cache_ids;
    auto encode_word = [&](std::string_view word) {
      const auto it = cache.find(word);
      if (it != cache.end()) {
        const auto [offset, count] = it->second;
        ids.insert(ids.end(), cache_ids.begin() + offset, cache_ids.begin() + offset + count);
        return guard.Word(ids.size());
      }
      SCORED_RETURN_IF_ERROR(guard.BeforeWord(ids.size(), word.size()));
      const size_t before = ids.size();
      model_.EncodeNormalized(word, &scratch, &ids);
      if (scratch.stopped) return guard.Stopped(ids.size());
      const int32_t offset = static_cast<int32_t>(cache_ids.size());
      cache_ids.insert(cache_ids.end(), ids.begin() + before, ids.end());
      cache.emplace(word, std::make_pair(offset, static_cast<int32_t>(ids.size() - before)));
      return guard.Word(ids.size());
    };
    const std::string_view s = normalized;
    const std::string_view space = model_.space_symbol();
    size_t word_start = 0;
    for (size_t p = s.find(space, 1); p != std::string_view::npos; p = s.find(space, p + space.size())) {
      if (p >= space.size() && s.compare(p - space.size(), space.size(), space) == 0) {
        continue;  // inside a run of spaces: not a word start
      }
      SCORED_RETURN_IF_ERROR(encode_word(s.substr(word_start, p - word_start)));
      word_start = p;
    }
    SCORED_RETURN_IF_ERROR(encode_word(s.substr(word_start)));
    return ids;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string out;
    size_t run_start = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " at position ", i, " is out of range [0, ", vocab_size_, ")"));
      }
      if (model_.type(id) == SentencePieceProto::kControl) {
        model_.DecodeRun(ids.subspan(run_start, i - run_start), &out);
        out.append(model_.piece(id));
        run_start = i + 1;
      }
    }
    model_.DecodeRun(ids.subspan(run_start), &out);
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
    auto proto = ParseSentencePieceProto(bytes);
    if (!proto.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a valid SentencePiece model: ", proto.status().message()));
    }
    auto model = SentencePieceBpe::Create(*std::move(proto));
    if (!model.ok()) {
      return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
    }
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer(*std::move(model)));
    const SentencePieceBpe& m = t->model_;
    t->vocab_size_ = m.size();
    t->byte_length_.resize(t->vocab_size_);
    for (int32_t id = 0; id < t->vocab_size_; ++id) {
      const int32_t type = m.type(id);
      if (type == SentencePieceProto::kControl || type == SentencePieceProto::kUnknown ||
          type == SentencePieceProto::kUnused) {
        t->byte_length_[id] = 0;
      } else if (type == SentencePieceProto::kByte) {
        t->byte_length_[id] = 1;
      } else {
        const std::string& piece = m.piece(id);
        int64_t n = static_cast<int64_t>(piece.size());
        for (size_t p = piece.find(kMetaspace); p != std::string::npos;
             p = piece.find(kMetaspace, p + kMetaspace.size())) {
          n -= static_cast<int64_t>(kMetaspace.size()) - 1;  // '▁' is a 1-byte space
        }
        t->byte_length_[id] = n;
      }
    }
    // An id stands for one vocabulary piece, one character (<= 4 bytes) or, with byte fallback, one byte.
    t->max_bytes_per_token_ = 4;
    for (int32_t id = 0; id < t->vocab_size_; ++id) {
      t->max_bytes_per_token_ = std::max(t->max_bytes_per_token_, m.piece(id).size());
    }
    t->bos_id_ = m.bos_id();
    t->eos_id_ = m.eos_id();
    t->add_bos_ = t->bos_id_ >= 0;
    SCORED_ASSIGN_OR_RETURN(const HfTokenizerConfig config, ReadHfTokenizerConfig(dir));
    auto resolve = [&](const std::optional<std::string>& name, const char* what,
                       int32_t* id) -> absl::Status {
      if (!name) return absl::OkStatus();
      const int32_t found = m.PieceToId(*name);
      if (m.piece(found) != *name) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": ", what, " '", *name, "' (tokenizer config) is not a piece of ", path));
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
  explicit SentencePieceTokenizer(SentencePieceBpe model) : model_(std::move(model)) {}

  SentencePieceBpe model_;
  int64_t vocab_size_ = 0;
  std::vector<int64_t> byte_length_;  // [vocab_size]
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = true;
  size_t max_bytes_per_token_ = 4;  // EncodeGuard::BeforeWord
  std::string fingerprint_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& dir) {
  return SentencePieceTokenizer::Load(dir);
}

}  // namespace tokenizer_internal
}  // namespace scored

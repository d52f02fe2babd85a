#include "engine/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// The decoder's input for an added token, as HF's decode gives the decoder the content: for a byte-level
// vocabulary (stored as bytes) the bytes its characters stand for when every character is in the byte-level
// alphabet (what the ByteLevel decoder makes of it), else the content.
std::string AddedTokenInput(const AddedToken& a, bool chars) {
  std::string out;
  if (chars || !ByteLevelToBytes(a.content, &out)) out = a.content;
  return out;
}

}  // namespace

struct BpeTokenizer::EncodeState {
  EncodeState(const EncodeLimits& limits, size_t max_bytes_per_token) : guard(limits, max_bytes_per_token) {
    scratch.stop = guard.stop();
  }
  EncodeGuard guard;
  BpeModel::Scratch scratch;
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> next_pieces;   // the next split stage's output
  std::vector<std::string_view> digit_pieces;  // BpeTokenizerSpec::digits
  std::string prefixed;
  // Byte-level word cache: word -> [offset, count) in cache_ids. Words repeat a lot in text.
  absl::flat_hash_map<std::string, std::pair<int32_t, int32_t>> cache;
  std::vector<int32_t> cache_ids;
  std::string normalized;
  std::string metaspaced;
  std::vector<std::string> words;  // the general pre-tokenizer's pieces
};

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeModel model, BpeTokenizerSpec spec) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(model), std::move(spec)));
  for (const std::string& pattern : t->spec_.split_patterns) {
    SCORED_ASSIGN_OR_RETURN(std::unique_ptr<RegexSplitter> splitter, RegexSplitter::Create(pattern));
    t->splitters_.push_back(std::move(splitter));
  }
  if (t->spec_.general_pipeline) {
    SCORED_ASSIGN_OR_RETURN(t->normalizer_, Normalizer::Create(t->spec_.normalizer));
    SCORED_ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::Create(t->spec_.pre_tokenizer));
  }
  SCORED_ASSIGN_OR_RETURN(t->decoder_, Decoder::Create(t->spec_.decoder, t->spec_.has_decoder));
  t->vocab_size_ = t->model_.size();
  for (const AddedToken& a : t->spec_.added_tokens) {
    if (a.id < 0 || a.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token '", a.content, "' with id ", a.id, " is invalid"));
    }
    t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{a.id} + 1);
  }
  t->added_of_id_.assign(t->vocab_size_, -1);
  t->added_by_first_byte_.resize(256);
  for (size_t i = 0; i < t->spec_.added_tokens.size(); ++i) {
    const AddedToken& a = t->spec_.added_tokens[i];
    t->added_of_id_[a.id] = static_cast<int32_t>(i);
    t->added_by_first_byte_[static_cast<uint8_t>(a.content[0])].push_back(i);
  }
  for (auto& list : t->added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&t](size_t a, size_t b) {
      return t->spec_.added_tokens[a].content.size() > t->spec_.added_tokens[b].content.size();
    });
  }
  // A prefix or suffix marks where a word starts or ends: cutting a segment into words would add them.
  const bool affixes = !t->model_.options().continuing_subword_prefix.empty() ||
                       !t->model_.options().end_of_word_suffix.empty();
  if (t->model_.options().alphabet == BpeModel::Alphabet::kChars && !affixes) {
    t->metaspace_words_exact_ = true;
    for (int64_t id = 0; id < t->model_.size() && t->metaspace_words_exact_; ++id) {
      const std::string& tok = t->model_.token(static_cast<int32_t>(id));
      for (size_t p = tok.find(kMetaspace, 1); p != std::string::npos; p = tok.find(kMetaspace, p + 1)) {
        if (p < kMetaspace.size() || tok.compare(p - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0) {
          t->metaspace_words_exact_ = false;
          break;
        }
      }
    }
  }
  // A word's id stands for a token of the vocabulary, a character (<= 4 bytes) or a fallback byte; a fused
  // run of unknown characters has no bound (it cannot occur when every byte has a fallback token).
  const BpeModel::Options& options = t->model_.options();
  std::vector<bool> has_byte(256, false);
  int bytes_covered = 0;
  for (int64_t id = 0; id < t->model_.size(); ++id) {
    const int byte = t->model_.ByteOfToken(static_cast<int32_t>(id));
    if (byte >= 0 && !has_byte[byte]) {
      has_byte[byte] = true;
      ++bytes_covered;
    }
  }
  const bool unknown_runs =
      options.unk_id >= 0 && options.fuse_unk && !(options.byte_fallback && bytes_covered == 256);
  if (!unknown_runs) {
    t->max_bytes_per_token_ = 4;
    for (int64_t id = 0; id < t->model_.size(); ++id) {
      t->max_bytes_per_token_ =
          std::max(t->max_bytes_per_token_, t->model_.token(static_cast<int32_t>(id)).size());
    }
  }
  const bool chars = t->model_.options().alphabet == BpeModel::Alphabet::kChars;
  for (const AddedToken& a : t->spec_.added_tokens) t->added_text_.push_back(AddedTokenInput(a, chars));
  // A token's bytes as the decoder writes it in the middle of a text.
  t->byte_length_.assign(t->vocab_size_, 0);
  for (int64_t id = 0; id < t->vocab_size_; ++id) {
    const int32_t added = t->added_of_id_[id];
    if (added >= 0 && t->spec_.added_tokens[added].special) continue;
    if (added < 0 && id >= t->model_.size()) continue;
    const std::string& input = added >= 0 ? t->added_text_[added] : t->model_.token(static_cast<int32_t>(id));
    SCORED_ASSIGN_OR_RETURN(const std::string text, t->decoder_->TokenText(input));
    t->byte_length_[id] = static_cast<int64_t>(text.size());
  }
  return t;
}

size_t BpeTokenizer::MatchAddedAt(std::string_view text, size_t pos, size_t* index) const {
  for (const size_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const std::string& c = spec_.added_tokens[i].content;
    if (text.size() - pos >= c.size() && text.compare(pos, c.size(), c) == 0) {
      *index = i;
      return c.size();
    }
  }
  return 0;
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text,
                                                          const EncodeLimits& limits) const {
  SCORED_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  // A limit bounds the ids kept; reserving for the whole text would cost its full size up front.
  const size_t expected = text.size() / 3 + 8;
  ids.reserve(limits.max_tokens >= 0 ? std::min<size_t>(expected, static_cast<size_t>(limits.max_tokens) + 1)
                                     : expected);
  EncodeState state(limits, max_bytes_per_token_);
  SCORED_RETURN_IF_ERROR(state.guard.Poll(0));
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t index = 0;
    const size_t len =
        added_by_first_byte_[static_cast<uint8_t>(text[pos])].empty() ? 0 : MatchAddedAt(text, pos, &index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& added = spec_.added_tokens[index];
    size_t match_start = pos;
    size_t match_end = pos + len;
    if (added.lstrip) {
      while (match_start > segment_start && IsAsciiSpace(text[match_start - 1])) --match_start;
    }
    if (added.rstrip) {
      while (match_end < text.size() && IsAsciiSpace(text[match_end])) ++match_end;
    }
    SCORED_RETURN_IF_ERROR(EncodeSegmentInto(text.substr(segment_start, match_start - segment_start),
                                             segment_start == 0, &state, &ids));
    ids.push_back(added.id);
    SCORED_RETURN_IF_ERROR(state.guard.Word(ids.size()));
    segment_start = pos = match_end;
  }
  SCORED_RETURN_IF_ERROR(EncodeSegmentInto(text.substr(segment_start), segment_start == 0, &state, &ids));
  return ids;
}

absl::Status BpeTokenizer::EncodeWordInto(std::string_view word, EncodeState* state,
                                          std::vector<int32_t>* ids) const {
  SCORED_RETURN_IF_ERROR(state->guard.BeforeWord(ids->size(), word.size()));
  uint32_t bad_char = 0;
  if (!model_.EncodeWord(word, &state->scratch, ids, &bad_char)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("character U+%04X has no token (no byte fallback, no unknown token)", bad_char));
  }
  if (state->scratch.stopped) return state->guard.Stopped(ids->size());
  return state->guard.Word(ids->size());
}

absl::Status BpeTokenizer::EncodeSegmentInto(std::string_view segment, bool at_start, EncodeState* state,
                                             std::vector<int32_t>* ids) const {
  if (segment.empty()) return absl::OkStatus();
  if (spec_.general_pipeline) return EncodeGeneralInto(segment, state, ids);
  if (spec_.nfc) {
    SCORED_ASSIGN_OR_RETURN(state->normalized, NormalizeNfc(segment));
    segment = state->normalized;
    SCORED_RETURN_IF_ERROR(state->guard.Poll(ids->size()));
  }
  if (model_.options().alphabet == BpeModel::Alphabet::kChars) {
    std::string& m = state->metaspaced;
    m.clear();
    m.reserve(segment.size() + 16);
    const bool prepend = spec_.metaspace_prepend && (!spec_.metaspace_prepend_first_only || at_start) &&
                         !(spec_.metaspace_prepend_unless_present &&
                           (segment[0] == ' ' || segment.substr(0, kMetaspace.size()) == kMetaspace));
    if (prepend) m.append(kMetaspace);
    for (const char c : segment) {
      if (c == ' ') {
        m.append(kMetaspace);
      } else {
        m.push_back(c);
      }
    }
    const std::string_view s = m;
    if (!spec_.metaspace_split) {
      if (!metaspace_words_exact_) return EncodeWordInto(s, state, ids);
      size_t word_start = 0;
      for (size_t p = s.find(kMetaspace, 1); p != std::string_view::npos;
           p = s.find(kMetaspace, p + kMetaspace.size())) {
        if (p >= kMetaspace.size() && s.compare(p - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) {
          continue;  // inside a run of '▁': not a word start
        }
        SCORED_RETURN_IF_ERROR(EncodeCachedWordInto(s.substr(word_start, p - word_start), state, ids));
        word_start = p;
      }
      return EncodeCachedWordInto(s.substr(word_start), state, ids);
    }
    size_t word_start = 0;
    for (size_t p = s.find(kMetaspace, 1); p != std::string_view::npos;
         p = s.find(kMetaspace, p + kMetaspace.size())) {
      SCORED_RETURN_IF_ERROR(EncodeWordInto(s.substr(word_start, p - word_start), state, ids));
      word_start = p;
    }
    return EncodeWordInto(s.substr(word_start), state, ids);
  }
  if (spec_.digits == BpeTokenizerSpec::Digits::kNone) return EncodeByteLevelInto(segment, state, ids);
  state->digit_pieces.clear();
  SplitDigits(segment, spec_.digits == BpeTokenizerSpec::Digits::kIndividual, &state->digit_pieces);
  for (const std::string_view piece : state->digit_pieces) {
    SCORED_RETURN_IF_ERROR(EncodeByteLevelInto(piece, state, ids));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodeGeneralInto(std::string_view segment, EncodeState* state,
                                             std::vector<int32_t>* ids) const {
  SCORED_RETURN_IF_ERROR(normalizer_->Apply(segment, &state->normalized));
  SCORED_RETURN_IF_ERROR(pre_tokenizer_->Split(state->normalized, &state->words));
  SCORED_RETURN_IF_ERROR(state->guard.Poll(ids->size()));
  for (const std::string& word : state->words) SCORED_RETURN_IF_ERROR(EncodeCachedWordInto(word, state, ids));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodeByteLevelInto(std::string_view text, EncodeState* state,
                                               std::vector<int32_t>* ids) const {
  if (spec_.add_prefix_space && text[0] != ' ') {
    state->prefixed = " ";
    state->prefixed.append(text);
    text = state->prefixed;
  }
  if (splitters_.empty()) return EncodeWordInto(text, state, ids);
  state->pieces.clear();
  SCORED_RETURN_IF_ERROR(splitters_[0]->Split(text, &state->pieces));
  SCORED_RETURN_IF_ERROR(state->guard.Poll(ids->size()));
  for (size_t k = 1; k < splitters_.size(); ++k) {
    state->next_pieces.clear();
    for (const std::string_view piece : state->pieces) {
      SCORED_RETURN_IF_ERROR(splitters_[k]->Split(piece, &state->next_pieces));
    }
    state->pieces.swap(state->next_pieces);
    SCORED_RETURN_IF_ERROR(state->guard.Poll(ids->size()));
  }
  for (const std::string_view piece : state->pieces) {
    SCORED_RETURN_IF_ERROR(EncodeCachedWordInto(piece, state, ids));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodeCachedWordInto(std::string_view word, EncodeState* state,
                                                std::vector<int32_t>* ids) const {
  const auto it = state->cache.find(absl::string_view(word.data(), word.size()));
  if (it != state->cache.end()) {
    const auto [offset, count] = it->second;
    ids->insert(ids->end(), state->cache_ids.begin() + offset, state->cache_ids.begin() + offset + count);
    return state->guard.Word(ids->size());
  }
  const size_t before = ids->size();
  SCORED_RETURN_IF_ERROR(EncodeWordInto(word, state, ids));
  const int32_t offset = static_cast<int32_t>(state->cache_ids.size());
  state->cache_ids.insert(state->cache_ids.end(), ids->begin() + before, ids->end());
  state->cache.emplace(std::string(word), std::make_pair(offset, static_cast<int32_t>(ids->size() - before)));
  return absl::OkStatus();
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", i, " is out of range [0, ", vocab_size_, ")"));
    }
    if (added_of_id_[id] >= 0) {
      tokens.push_back(added_text_[added_of_id_[id]]);
    } else if (id < model_.size() && !model_.token(id).empty()) {
      tokens.push_back(model_.token(id));
    }  // else: an id the vocabulary skips has no token, as in the library
  }
  return decoder_->Decode(tokens);
}

int64_t BpeTokenizer::TokenByteLength(int32_t id) const {
  return id < 0 || id >= vocab_size_ ? 0 : byte_length_[id];
}

}  // namespace tokenizer_internal
}  // namespace scored

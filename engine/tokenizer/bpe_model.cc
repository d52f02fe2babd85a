#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

// Min-heap order on (rank, pos): the lowest rank first, the leftmost on ties.
bool HeapAfter(const BpeModel::Scratch::Candidate& a, const BpeModel::Scratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

std::string ByteTokenName(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

}  // namespace

absl::Status BpeModel::Init() {
  token_to_id_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].empty()) continue;
    token_to_id_.insert_or_assign(tokens_[id], static_cast<int32_t>(id));
  }
  byte_ids_.fill(-1);
  if (options_.alphabet == Alphabet::kBytes) {
    // A trained byte-level vocabulary may lack bytes it never saw (SmolLM2's lacks 21: control characters
    // and bytes that no UTF-8 text holds); the library and llama.cpp drop such a byte from its word, and so
    // does EncodeWord. More than a quarter missing is no byte-level vocabulary.
    int missing = 0;
    for (int b = 0; b < 256; ++b) {
      byte_ids_[b] = TokenId(std::string(1, static_cast<char>(b)));
      missing += byte_ids_[b] < 0 ? 1 : 0;
    }
    if (missing > kMaxMissingBytes) {
      return absl::InvalidArgumentError(absl::StrCat("byte-level vocabulary has no token for ", missing,
                                                     " of the 256 bytes (at most ", kMaxMissingBytes, ")"));
    }
  } else {
    for (size_t id = 0; id < tokens_.size(); ++id) {
      const std::string& t = tokens_[id];
      if (t.empty()) continue;
      int len = 0;
      const uint32_t cp = DecodeUtf8At(t, 0, &len);
      if (static_cast<size_t>(len) == t.size()) char_ids_.emplace(cp, static_cast<int32_t>(id));
    }
    if (options_.byte_fallback) {
      for (int b = 0; b < 256; ++b) byte_ids_[b] = TokenId(ByteTokenName(b));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeModel> BpeModel::CreateFromMerges(
    std::vector<std::string> tokens, const std::vector<std::pair<std::string, std::string>>& merges,
    const Options& options) {
  BpeModel model;
  model.options_ = options;
  model.tokens_ = std::move(tokens);
  if (absl::Status s = model.Init(); !s.ok()) return s;
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const size_t prefix = options.continuing_subword_prefix.size();
    if (b.size() < prefix) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " ('", a, "' + '", b,
                                                     "'): shorter than the continuing_subword_prefix"));
    }
    const std::string merged = a + b.substr(prefix);
    const int32_t a_id = model.TokenId(a);
    const int32_t b_id = model.TokenId(b);
    const int32_t new_id = model.TokenId(merged);
    if (a_id < 0 || b_id < 0 || new_id < 0) {
      const std::string& missing = a_id < 0 ? a : (b_id < 0 ? b : merged);
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " ('", a, "' + '", b, "'): token '",
                                                     missing, "' is not in the vocabulary"));
    }
    model.merges_.insert_or_assign(PairKey(a_id, b_id), Merge{static_cast<int32_t>(rank), new_id});
  }
  return model;
}

absl::StatusOr<BpeModel> BpeModel::CreateFromRanks(std::vector<std::string> tokens, const Options& options) {
  BpeModel model;
  model.options_ = options;
  model.options_.alphabet = Alphabet::kBytes;
  model.tokens_ = std::move(tokens);
  if (absl::Status s = model.Init(); !s.ok()) return s;
  for (size_t id = 0; id < model.tokens_.size(); ++id) {
    const std::string_view t = model.tokens_[id];
    for (size_t split = 1; split < t.size(); ++split) {
      const int32_t a_id = model.TokenId(t.substr(0, split));
      if (a_id < 0) continue;
      const int32_t b_id = model.TokenId(t.substr(split));
      if (b_id < 0) continue;
      const int32_t rank = static_cast<int32_t>(id);
      model.merges_.emplace(PairKey(a_id, b_id), Merge{rank, rank});
    }
  }
  return model;
}

int32_t BpeModel::TokenId(std::string_view token) const {
  const auto it = token_to_id_.find(absl::string_view(token.data(), token.size()));
  return it == token_to_id_.end() ? -1 : it->second;
}

int BpeModel::ByteOfToken(int32_t id) const {
  if (options_.alphabet != Alphabet::kChars || !options_.byte_fallback) return -1;
  const std::string& t = tokens_[id];
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  const int b = static_cast<int>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16));
  return byte_ids_[b] == id ? b : -1;
}

void BpeModel::AddSymbol(int32_t id, Scratch* scratch) {
  auto& symbols = scratch->symbols;
  const int32_t n = static_cast<int32_t>(symbols.size());
  symbols.push_back({id, n - 1, -1});
  if (n > 0) symbols[n - 1].next = n;
}

bool BpeModel::AddFallbackOrUnknown(std::string_view piece, bool* last_unk, Scratch* scratch) const {
  bool bytes_ok = options_.byte_fallback && options_.alphabet == Alphabet::kChars;
  for (size_t k = 0; bytes_ok && k < piece.size(); ++k)
    bytes_ok = byte_ids_[static_cast<uint8_t>(piece[k])] >= 0;
  if (bytes_ok) {
    for (const char c : piece) AddSymbol(byte_ids_[static_cast<uint8_t>(c)], scratch);
    *last_unk = false;
    return true;
  }
  if (options_.unk_id < 0) return false;
  if (!(options_.fuse_unk && *last_unk)) AddSymbol(options_.unk_id, scratch);
  *last_unk = true;
  return true;
}

bool BpeModel::AddAffixedSymbols(std::string_view word, Scratch* scratch, uint32_t* bad_char) const {
  std::string symbol;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    int len = 1;
    const uint32_t cp =
        options_.alphabet == Alphabet::kChars ? DecodeUtf8At(word, i, &len) : static_cast<uint8_t>(word[i]);
    const bool last = i + static_cast<size_t>(len) == word.size();
    symbol.assign(i == 0 ? "" : options_.continuing_subword_prefix);
    symbol.append(word.substr(i, len));
    if (last) symbol.append(options_.end_of_word_suffix);
    i += static_cast<size_t>(len);
    const int32_t id = TokenId(symbol);
    if (id >= 0) {
      AddSymbol(id, scratch);
      last_unk = false;
    } else if (!AddFallbackOrUnknown(symbol, &last_unk, scratch)) {
      if (options_.alphabet == Alphabet::kBytes) continue;  // dropped, as without affixes
      *bad_char = cp;
      return false;
    }
  }
  return true;
}

void BpeModel::PushCandidate(int32_t pos, Scratch* scratch) const {
  const Scratch::Symbol& left = scratch->symbols[pos];
  if (left.next < 0) return;
  const auto it = merges_.find(PairKey(left.id, scratch->symbols[left.next].id));
  if (it == merges_.end()) return;
  scratch->heap.push_back({it->second.rank, pos, it->second.new_id});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), HeapAfter);
}

bool BpeModel::EncodeWord(std::string_view word, Scratch* scratch, std::vector<int32_t>* ids,
                          uint32_t* bad_char) const {
  if (word.empty()) return true;
  if (options_.ignore_merges) {
    const int32_t whole = TokenId(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return true;
    }
  }
  scratch->symbols.clear();
  if (!options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty()) {
    if (!AddAffixedSymbols(word, scratch, bad_char)) return false;
  } else if (options_.alphabet == Alphabet::kBytes) {
    bool last_unk = false;
    for (const char c : word) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        AddSymbol(id, scratch);
      } else if (options_.unk_id >= 0 && !(options_.fuse_unk && last_unk)) {
        AddSymbol(options_.unk_id, scratch);
      }
      // else: a byte without a token is dropped, as the library does without unk_token
      last_unk = id < 0;
    }
  } else {
    bool last_unk = false;
    size_t i = 0;
    while (i < word.size()) {
      int len = 0;
      const uint32_t cp = DecodeUtf8At(word, i, &len);
      const auto it = char_ids_.find(cp);
      if (it != char_ids_.end()) {
        AddSymbol(it->second, scratch);
        last_unk = false;
      } else if (!AddFallbackOrUnknown(word.substr(i, len), &last_unk, scratch)) {
        *bad_char = cp;
        return false;
      }
      i += len;
    }
  }
  auto& symbols = scratch->symbols;
  if (symbols.empty()) return true;  // every byte of the word dropped
  auto& heap = scratch->heap;
  heap.clear();
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) {
    PushCandidate(pos, scratch);
  }
  int until_poll = Scratch::kPollMerges;
  while (!heap.empty()) {
    if (scratch->stop != nullptr && --until_poll == 0) {
      until_poll = Scratch::kPollMerges;
      if ((*scratch->stop)()) {
        scratch->stopped = true;
        return true;
      }
    }
    std::pop_heap(heap.begin(), heap.end(), HeapAfter);
    const Scratch::Candidate top = heap.back();
    heap.pop_back();
    Scratch::Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or no right neighbour any more
    Scratch::Symbol& right = symbols[left.next];
    const auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id || it->second.rank != top.rank) {
      continue;  // stale candidate: a neighbour changed since it was pushed
    }
    left.id = top.new_id;
    const int32_t after = right.next;
    right.id = -1;
    left.next = after;
    if (after >= 0) symbols[after].prev = top.pos;
    if (left.prev >= 0) PushCandidate(left.prev, scratch);
    PushCandidate(top.pos, scratch);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) ids->push_back(symbols[pos].id);
  return true;
}

}  // namespace tokenizer_internal
}  // namespace scored

#include "engine/tokenizer/sentencepiece_bpe.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

using Proto = SentencePieceProto;

// Heap order of the library's merge agenda: the highest score on top, the leftmost on ties.
bool PairBelow(const SentencePieceBpe::Scratch::Pair& a, const SentencePieceBpe::Scratch::Pair& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" piece (upper-case hex, as the library names them), else -1.
int PieceToByte(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]);
  const int lo = HexDigit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

absl::Status CheckIdentity(const Proto::Normalizer& n, const char* what) {
  if (n.precompiled_charsmap.empty() && n.normalization_rule_tsv.empty()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(what, " '", n.name,
                   "' (a precompiled character map / rule table) is not supported; only "
                   "identity normalization is implemented"));
}

const char* ModelTypeName(int32_t t) {
  switch (t) {
    case Proto::kUnigram:
      return "UNIGRAM";
    case Proto::kWord:
      return "WORD";
    case Proto::kChar:
      return "CHAR";
    default:
      return "unknown";
  }
}

}  // namespace

absl::StatusOr<SentencePieceBpe> SentencePieceBpe::Create(SentencePieceProto proto) {
  if (proto.model_type != Proto::kBpe) {
    return absl::UnimplementedError(absl::StrCat("SentencePiece model_type ", ModelTypeName(proto.model_type),
                                                 " (", proto.model_type, ") is not supported (BPE only)"));
  }
  if (absl::Status s = CheckIdentity(proto.normalizer, "normalizer"); !s.ok()) return s;
  if (absl::Status s = CheckIdentity(proto.denormalizer, "denormalizer"); !s.ok()) return s;
  if (proto.treat_whitespace_as_suffix) {
    return absl::UnimplementedError("SentencePiece treat_whitespace_as_suffix is not supported");
  }
  if (proto.pieces.empty()) return absl::InvalidArgumentError("the model has no pieces");
  if (proto.pieces.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("the model has too many pieces");
  }
  SentencePieceBpe m;
  m.byte_fallback_ = proto.byte_fallback;
  m.unk_surface_ = proto.unk_surface;
  m.normalizer_ = proto.normalizer;
  m.space_ = proto.normalizer.escape_whitespaces ? std::string(kMetaspace) : std::string(" ");
  m.user_by_first_byte_.resize(256);
  m.normal_ids_.reserve(proto.pieces.size());
  for (size_t i = 0; i < proto.pieces.size(); ++i) {
    const Proto::Piece& p = proto.pieces[i];
    const int32_t id = static_cast<int32_t>(i);
    if (p.piece.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", i, " is empty"));
    if (p.type < Proto::kNormal || p.type > Proto::kByte) {
      return absl::InvalidArgumentError(
          absl::StrCat("piece ", i, " ('", p.piece, "') has unknown type ", p.type));
    }
    if (std::isnan(p.score)) {
      return absl::InvalidArgumentError(absl::StrCat("piece ", i, " ('", p.piece, "') has a NaN score"));
    }
    const bool normal = p.type == Proto::kNormal || p.type == Proto::kUserDefined || p.type == Proto::kUnused;
    if (!(normal ? m.normal_ids_ : m.reserved_ids_).emplace(p.piece, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("piece ", i, " ('", p.piece, "') is already defined"));
    }
    if (p.type == Proto::kUserDefined) {
      m.has_user_defined_ = true;
      m.user_by_first_byte_[static_cast<uint8_t>(p.piece[0])].push_back(id);
    }
    if (p.type == Proto::kUnused) m.has_unused_ = true;
    if (p.type == Proto::kUnknown) {
      if (m.unk_id_ >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("piece ", i, " ('", p.piece, "'): the unknown piece is already defined"));
      }
      m.unk_id_ = id;
    }
    if (p.type == Proto::kByte) {
      if (!proto.byte_fallback) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte piece ", i, " ('", p.piece, "') is present although byte_fallback is false"));
      }
      if (PieceToByte(p.piece) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte piece ", i, " ('", p.piece, "') is not named <0xNN>"));
      }
    }
  }
  if (m.unk_id_ < 0) return absl::InvalidArgumentError("the model has no unknown (UNKNOWN) piece");
  m.pieces_ = std::move(proto.pieces);
  for (auto& list : m.user_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&m](int32_t a, int32_t b) {
      return m.pieces_[a].piece.size() > m.pieces_[b].piece.size();
    });
  }
  for (int b = 0; b < 256; ++b) {
    char name[7] = {'<', '0', 'x', "0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15], '>', 0};
    m.byte_ids_[b] = m.PieceToId(name);
  }
  const int32_t bos = m.PieceToId(proto.bos_piece);
  const int32_t eos = m.PieceToId(proto.eos_piece);
  m.bos_id_ = m.pieces_[bos].type == Proto::kControl ? bos : -1;
  m.eos_id_ = m.pieces_[eos].type == Proto::kControl ? eos : -1;
  m.words_split_exact_ = true;
  const std::string_view space = m.space_;
  for (const auto& [piece, id] : m.normal_ids_) {
    const std::string_view t = piece;
    for (size_t p = t.find(space, 1); p != std::string_view::npos; p = t.find(space, p + 1)) {
      if (p < space.size() || t.compare(p - space.size(), space.size(), space) != 0) {
        m.words_split_exact_ = false;
        break;
      }
    }
    if (!m.words_split_exact_) break;
  }
  return m;
}

int32_t SentencePieceBpe::Find(const absl::flat_hash_map<std::string, int32_t>& map, std::string_view s) {
  const auto it = map.find(absl::string_view(s.data(), s.size()));
  return it == map.end() ? -1 : it->second;
}

int32_t SentencePieceBpe::PieceToId(std::string_view piece) const {
  const int32_t reserved = Find(reserved_ids_, piece);
  if (reserved >= 0) return reserved;
  const int32_t normal = Find(normal_ids_, piece);
  return normal >= 0 ? normal : unk_id_;
}

size_t SentencePieceBpe::MatchUserDefined(std::string_view text, size_t pos) const {
  for (const int32_t id : user_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const std::string& p = pieces_[id].piece;
    if (text.size() - pos >= p.size() && text.compare(pos, p.size(), p) == 0) return p.size();
  }
  return 0;
}

void SentencePieceBpe::Normalize(std::string_view text, std::string* out) const {
  // One normalization unit at `pos`: a whole user-defined piece, else one character.
  auto unit = [&](size_t pos) -> std::string_view {
    size_t n = has_user_defined_ ? MatchUserDefined(text, pos) : 0;
    if (n == 0) {
      n = std::min<size_t>(Utf8SequenceLength(static_cast<unsigned char>(text[pos])), text.size() - pos);
    }
    return text.substr(pos, n);
  };
  const bool remove_extra = normalizer_.remove_extra_whitespaces;
  size_t pos = 0;
  if (remove_extra) {
    while (pos < text.size()) {
      const std::string_view u = unit(pos);
      if (u != " ") break;
      pos += u.size();
    }
  }
  if (pos >= text.size()) return;
  const size_t start = out->size();
  out->reserve(start + text.size() + text.size() / 4 + 8);
  if (normalizer_.add_dummy_prefix) out->append(space_);
  bool prev_space = remove_extra;
  while (pos < text.size()) {
    const std::string_view u = unit(pos);
    pos += u.size();
    std::string_view s = u;
    if (prev_space) {
      while (!s.empty() && s[0] == ' ') s.remove_prefix(1);
    }
    if (s.empty()) continue;
    for (const char c : s) {
      if (c == ' ') {
        out->append(space_);
      } else {
        out->push_back(c);
      }
    }
    prev_space = remove_extra && s.back() == ' ';
  }
  if (remove_extra) {
    while (out->size() - start >= space_.size() &&
           std::string_view(*out).substr(out->size() - space_.size()) == space_) {
      out->resize(out->size() - space_.size());
    }
  }
}

void SentencePieceBpe::MaybePush(std::string_view word, int32_t left, int32_t right, Scratch* scratch) const {
  if (left < 0 || right < 0) return;
  const Scratch::Symbol& l = scratch->symbols[left];
  const Scratch::Symbol& r = scratch->symbols[right];
  if (l.freeze || r.freeze) return;
  const int32_t size = l.len + r.len;
  const int32_t id = Find(normal_ids_, word.substr(l.begin, size));
  if (id < 0) return;
  scratch->heap.push_back({pieces_[id].score, left, right, size});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), PairBelow);
  if (has_unused_ && pieces_[id].type == Proto::kUnused) {
    scratch->unused_splits[id] = {l.begin, l.len, r.begin, r.len};
  }
}

void SentencePieceBpe::Emit(std::string_view word, int32_t begin, int32_t len, const Scratch& scratch,
                            std::vector<int32_t>* ids) const {
  const std::string_view s = word.substr(begin, len);
  const int32_t id = PieceToId(s);
  if (has_unused_ && pieces_[id].type == Proto::kUnused) {
    const auto it = scratch.unused_splits.find(id);
    if (it != scratch.unused_splits.end()) {
      const std::array<int32_t, 4> split = it->second;
      Emit(word, split[0], split[1], scratch, ids);
      Emit(word, split[2], split[3], scratch, ids);
      return;
    }
  }
  if (id == unk_id_ && byte_fallback_) {
    for (const char c : s) ids->push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return;
  }
  ids->push_back(id);
}

void SentencePieceBpe::EncodeNormalized(std::string_view word, Scratch* scratch,
                                        std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  auto& symbols = scratch->symbols;
  auto& heap = scratch->heap;
  symbols.clear();
  heap.clear();
  if (has_unused_) scratch->unused_splits.clear();
  for (size_t pos = 0; pos < word.size();) {
    size_t len = has_user_defined_ ? MatchUserDefined(word, pos) : 0;
    const bool freeze = len > 0;
    if (!freeze) {
      len = std::min<size_t>(Utf8SequenceLength(static_cast<unsigned char>(word[pos])), word.size() - pos);
    }
    const int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<int32_t>(pos), static_cast<int32_t>(len), n - 1, -1, freeze});
    if (n > 0) symbols[n - 1].next = n;
    pos += len;
  }
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) {
    MaybePush(word, i - 1, i, scratch);
  }
  int until_poll = Scratch::kPollMerges;
  while (!heap.empty()) {
    if (scratch->stop != nullptr && --until_poll == 0) {
      until_poll = Scratch::kPollMerges;
      if ((*scratch->stop)()) {
        scratch->stopped = true;
        return;
      }
    }
    std::pop_heap(heap.begin(), heap.end(), PairBelow);
    const Scratch::Pair top = heap.back();
    heap.pop_back();
    Scratch::Symbol& l = symbols[top.left];
    Scratch::Symbol& r = symbols[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.size) continue;  // stale
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.len = 0;
    MaybePush(word, l.prev, top.left, scratch);
    MaybePush(word, top.left, l.next, scratch);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    Emit(word, symbols[i].begin, symbols[i].len, *scratch, ids);
  }
}

void SentencePieceBpe::DecodeRun(absl::Span<const int32_t> ids, std::string* out) const {
  const size_t start = out->size();
  const bool strip_first = normalizer_.add_dummy_prefix || normalizer_.remove_extra_whitespaces;
  bool is_bos_ws = true;     // a leading '▁' is still to be dropped
  bool bos_ws_seen = false;  // the previous piece had its leading '▁' dropped
  for (const int32_t id : ids) {
    const Proto::Piece& p = pieces_[id];
    if (p.type == Proto::kByte) {
      out->push_back(static_cast<char>(PieceToByte(p.piece)));
      continue;
    }
    if (bos_ws_seen || out->size() > start) is_bos_ws = false;
    bos_ws_seen = false;
    if (p.type == Proto::kControl) continue;
    if (p.type == Proto::kUnknown) {
      out->append(unk_surface_);
      continue;
    }
    std::string_view s = p.piece;
    if (is_bos_ws && strip_first && s.substr(0, kMetaspace.size()) == kMetaspace) {
      s.remove_prefix(kMetaspace.size());
      // With remove_extra_whitespaces every leading '▁' piece is dropped, not only the first.
      bos_ws_seen = !normalizer_.remove_extra_whitespaces;
    }
    AppendMetaspaceText(s, out);
  }
}

}  // namespace tokenizer_internal
}  // namespace scored

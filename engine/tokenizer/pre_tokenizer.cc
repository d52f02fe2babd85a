#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

// A part of a piece: [start, end) bytes, and whether it is a match of the step's pattern.
struct Span {
  size_t start;
  size_t end;
  bool match;
};

// The library's find_matches for a character predicate: every matching character is a match of its own,
// the text between them one span each.
template <typename Predicate>
void CharMatches(std::string_view text, Predicate is_match, std::vector<Span>* spans) {
  size_t gap = 0;  // start of the current run of non-matching characters
  for (size_t pos = 0; pos < text.size();) {
    int len = 1;
    const uint32_t cp = DecodeUtf8At(text, pos, &len);
    if (is_match(cp)) {
      if (pos > gap) spans->push_back({gap, pos, false});
      spans->push_back({pos, pos + len, true});
      gap = pos + len;
    }
    pos += static_cast<size_t>(len);
  }
  if (gap < text.size()) spans->push_back({gap, text.size(), false});
}

// Matches given as [start, end) offsets, with the text between them.
void SpansOfMatches(size_t size, const std::vector<std::pair<size_t, size_t>>& matches,
                    std::vector<Span>* spans) {
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (start > prev) spans->push_back({prev, start, false});
    spans->push_back({start, end, true});
    prev = end;
  }
  if (prev < size) spans->push_back({prev, size, false});
}

// The Whitespace pre-tokenizer's \w+|[^\w\s]+ kept (not matches), the whitespace between them removed
// (matches, under Removed).
void WhitespaceSpans(std::string_view text, std::vector<Span>* spans) {
  enum Class { kWord, kSpace, kOther };
  size_t start = 0;
  Class run = kSpace;
  for (size_t pos = 0; pos < text.size();) {
    int len = 1;
    const uint32_t cp = DecodeUtf8At(text, pos, &len);
    const Class c = IsRegexWordChar(cp) ? kWord : IsUnicodeWhitespace(cp) ? kSpace : kOther;
    if (pos > start && c != run) {
      spans->push_back({start, pos, run == kSpace});
      start = pos;
    }
    run = c;
    pos += static_cast<size_t>(len);
  }
  if (start < text.size()) spans->push_back({start, text.size(), run == kSpace});
}

// NormalizedString::split's handling of the matches: the [start, end) pieces kept, in order.
std::vector<std::pair<size_t, size_t>> ApplyBehavior(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) out.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::vector<PreTokenizerStep> steps) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  for (const PreTokenizerStep& step : steps) {
    std::unique_ptr<RegexSplitter> regex;
    if (step.kind == PreTokenizerStep::Kind::kSplit && step.pattern_is_regex) {
      SCORED_ASSIGN_OR_RETURN(regex, RegexSplitter::Create(step.pattern));
    } else if (step.kind == PreTokenizerStep::Kind::kSplit && step.pattern.empty()) {
      return absl::InvalidArgumentError("a Split pre-tokenizer with an empty pattern");
    } else if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
      if (step.use_regex) {
        SCORED_ASSIGN_OR_RETURN(regex, RegexSplitter::Create(kGpt2Pattern));
      }
      p->byte_level_ = true;
    }
    p->regexes_.push_back(std::move(regex));
  }
  p->steps_ = std::move(steps);
  return p;
}

absl::Status PreTokenizer::SplitPiece(size_t index, const std::string& piece,
                                      std::vector<std::string>* out) const {
  const PreTokenizerStep& step = steps_[index];
  using Kind = PreTokenizerStep::Kind;
  std::vector<Span> spans;
  SplitBehavior behavior = step.behavior;
  std::string prefixed;
  const std::string* text = &piece;
  switch (step.kind) {
    case Kind::kSplit: {
      std::vector<std::pair<size_t, size_t>> matches;
      if (regexes_[index] != nullptr) {
        SCORED_RETURN_IF_ERROR(regexes_[index]->FindMatches(piece, &matches));
      } else {
        for (size_t p = piece.find(step.pattern); p != std::string::npos;
             p = piece.find(step.pattern, p + step.pattern.size())) {
          matches.emplace_back(p, p + step.pattern.size());
        }
      }
      SpansOfMatches(piece.size(), matches, &spans);
      if (step.invert) {
        for (Span& s : spans) s.match = !s.match;
      }
      break;
    }
    case Kind::kPunctuation:
      CharMatches(piece, IsUnicodePunctuation, &spans);
      break;
    case Kind::kDigits:
      CharMatches(piece, IsUnicodeNumeric, &spans);
      behavior = step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
      break;
    case Kind::kWhitespace:
      WhitespaceSpans(piece, &spans);
      behavior = SplitBehavior::kRemoved;
      break;
    case Kind::kWhitespaceSplit:
      CharMatches(piece, IsUnicodeWhitespace, &spans);
      behavior = SplitBehavior::kRemoved;
      break;
    case Kind::kFixedLength: {
      size_t start = 0;
      size_t chars = 0;
      for (size_t pos = 0; pos < piece.size(); ++chars) {
        if (chars == step.length) {
          out->push_back(piece.substr(start, pos - start));
          start = pos;
          chars = 0;
        }
        pos += static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(piece[pos])));
      }
      if (start < piece.size()) out->push_back(piece.substr(start));
      return absl::OkStatus();
    }
    case Kind::kByteLevel: {
      if (step.add_prefix_space && piece[0] != ' ') {
        prefixed = " " + piece;
        text = &prefixed;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      if (regexes_[index] != nullptr) SCORED_RETURN_IF_ERROR(regexes_[index]->FindMatches(*text, &matches));
      SpansOfMatches(text->size(), matches, &spans);
      for (const Span& s : spans) {
        std::string mapped;
        for (size_t i = s.start; i < s.end; ++i)
          AppendUtf8(ByteToUnicode(static_cast<uint8_t>((*text)[i])), &mapped);
        out->push_back(std::move(mapped));
      }
      return absl::OkStatus();
    }
  }
  for (const auto& [start, end] : ApplyBehavior(spans, behavior)) {
    if (end > start) out->push_back(text->substr(start, end - start));
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::Split(std::string_view text, std::vector<std::string>* pieces) const {
  pieces->clear();
  if (text.empty()) return absl::OkStatus();
  pieces->emplace_back(text);
  std::vector<std::string> next;
  for (size_t i = 0; i < steps_.size(); ++i) {
    next.clear();
    for (const std::string& piece : *pieces) SCORED_RETURN_IF_ERROR(SplitPiece(i, piece, &next));
    pieces->swap(next);
  }
  if (byte_level_) {
    std::string bytes;
    for (std::string& piece : *pieces) {
      // Every character of a piece is byte-level once ByteLevel ran: no later step adds others.
      if (ByteLevelToBytes(piece, &bytes)) piece.swap(bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace scored

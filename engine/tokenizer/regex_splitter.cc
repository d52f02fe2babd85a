#include "engine/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("split regex does not compile at offset ", offset, ": ", Pcre2Message(error)));
  }
  // JIT is an optimisation only: without it (unsupported platform) the interpreter runs.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<RegexSplitter> splitter(new RegexSplitter());
  splitter->code_ = code;
  return splitter;
}

namespace {

// pcre2_match from `pos`; long runs (e.g. of whitespace under a lookahead) can exceed the JIT's default
// stack, then the interpreter, which keeps its backtracking state on the heap, runs the match again.
int MatchFrom(pcre2_code* code, std::string_view text, size_t pos, pcre2_match_data* match) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
  }
  return rc;
}

}  // namespace

absl::Status RegexSplitter::FindMatches(std::string_view text,
                                        std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  if (match == nullptr) return absl::ResourceExhaustedError("cannot allocate PCRE2 match data");
  size_t pos = 0;  // where the next search starts
  while (pos < text.size()) {
    const int rc = MatchFrom(code, text, pos, match.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("split regex: ", Pcre2Message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {  // an empty match: step over one character
      if (start >= text.size()) break;
      pos = start + Utf8SequenceLength(static_cast<unsigned char>(text[start]));
      continue;
    }
    matches->emplace_back(start, end);
    pos = end;
  }
  return absl::OkStatus();
}

absl::Status RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  std::vector<std::pair<size_t, size_t>> matches;
  SCORED_RETURN_IF_ERROR(FindMatches(text, &matches));
  size_t emitted = 0;  // text[0, emitted) is in pieces
  for (const auto& [start, end] : matches) {
    if (start > emitted) pieces->push_back(text.substr(emitted, start - emitted));
    pieces->push_back(text.substr(start, end - start));
    emitted = end;
  }
  if (emitted < text.size()) pieces->push_back(text.substr(emitted));
  return absl::OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace scored

// Tokenizer content: a list of (what, value) facts observed through the Tokenizer interface (see the header),
// hashed for the digest or compared pairwise to name the first difference.
#include "engine/tokenizer/content_digest.h"

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/sha256.h"

namespace scored {
namespace {

// Texts whose encodings exercise the normalizer and the pre-tokenizer beyond single pieces.
constexpr std::string_view kProbeTexts[] = {
    "Hello world! The quick brown fox jumps over the lazy dog.",
    " leading space,  two spaces,\ttab,\nnewline,\n\nblank line,   trailing   ",
    "Numbers: 0 7 42 123 4567 89012 3.14159 1,000,000 2024-01-31",
    "Contractions: don't I'll we're it's you've they'd O'Neil's",
    "Punctuation: (a) [b] {c} \"d\" 'e' <f> a/b\\c #$%&*+-=@^_`|~ ... --",
    "Accents: caf\xC3\xA9 na\xC3\xAFve (NFC) vs cafe\xCC\x81 nai\xCC\x88ve (NFD); \xC3\x85ngstr\xC3\xB6m",
    "CJK and more: \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
    "\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 "
    "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D",
    "Specials: <s></s><unk><pad><|endoftext|><|begin_of_text|><|end_of_text|><|im_start|><|im_end|>",
    "def f(x):\n    return x * 2  # code\n",
};

std::string Ids(const absl::StatusOr<std::vector<int32_t>>& ids) {
  if (!ids.ok()) return absl::StrCat("error ", absl::StatusCodeToString(ids.status().code()));
  return absl::StrCat("[", absl::StrJoin(*ids, ","), "]");
}

std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(absl::string_view(text.data(), text.size())), "\"");
}

struct Fact {
  std::string what;
  std::string value;
};

std::vector<Fact> ContentFacts(const Tokenizer& t) {
  std::vector<Fact> facts;
  facts.push_back({"vocabulary size", absl::StrCat(t.vocab_size())});
  facts.push_back({"BOS id", absl::StrCat(t.bos_id())});
  facts.push_back({"EOS id", absl::StrCat(t.eos_id())});
  facts.push_back({"add-BOS default", t.add_bos_by_default() ? "true" : "false"});
  facts.reserve(facts.size() + 3 * static_cast<size_t>(t.vocab_size()) + std::size(kProbeTexts));
  for (int64_t id = 0; id < t.vocab_size(); ++id) {
    const int32_t one[] = {static_cast<int32_t>(id)};
    absl::StatusOr<std::string> text = t.Decode(one);
    const std::string shown =
        text.ok() ? Quoted(*text) : absl::StrCat("error ", absl::StatusCodeToString(text.status().code()));
    facts.push_back({absl::StrCat("token ", id, ": text"), shown});
    facts.push_back({absl::StrCat("token ", id, ": byte length"), absl::StrCat(t.TokenByteLength(one[0]))});
    if (text.ok()) {
      facts.push_back({absl::StrCat("token ", id, " (text ", shown, "): encoding"), Ids(t.Encode(*text))});
    }
  }
  for (std::string_view probe : kProbeTexts) {
    facts.push_back({absl::StrCat("encoding of ", Quoted(probe)), Ids(t.Encode(probe))});
  }
  return facts;
}

}  // namespace

std::string TokenizerContentDigest(const Tokenizer& tokenizer) {
  Sha256 hash;
  for (const Fact& f : ContentFacts(tokenizer)) {
    // Length-prefixed, so that no two different fact lists hash the same bytes.
    for (const std::string* s : {&f.what, &f.value}) {
      const uint64_t size = s->size();
      hash.Update(&size, sizeof(size));
      hash.Update(*s);
    }
  }
  return hash.HexDigest();
}

absl::Status CompareTokenizerContent(const Tokenizer& model, const Tokenizer& reference) {
  const std::vector<Fact> a = ContentFacts(model);
  const std::vector<Fact> b = ContentFacts(reference);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].what != b[i].what) {
      // Only a token one side cannot decode shifts the lists: say which.
      return absl::InvalidArgumentError(
          absl::StrCat("the tokenizers differ: ", a[i].what, " vs ", b[i].what));
    }
    if (a[i].value != b[i].value) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tokenizers differ: ", a[i].what, " ", a[i].value, " vs ", b[i].value));
    }
  }
  if (a.size() != b.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizers differ: ", a.size(), " vs ", b.size(), " content facts"));
  }
  return absl::OkStatus();
}

}  // namespace scored

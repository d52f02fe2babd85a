// Fuzzes one tokenizer's Encode and Decode with arbitrary bytes. Built once per tokenizer format
// (tests/fuzz/CMakeLists.txt): SCORED_FUZZ_TOKENIZER_DIR (relative to the data folder),
// SCORED_FUZZ_TOKENIZER_FORMAT (a Tokenizer::Format enumerator) and SCORED_FUZZ_ROUND_TRIP (1 where
// Decode(Encode(text)) == text holds for every valid UTF-8 text: byte-level BPE and tiktoken).
//
// Contract checked (engine/tokenizer/tokenizer.h): Encode of valid UTF-8 succeeds with ids in
// [0, vocab_size) that Decode accepts; Encode of invalid UTF-8 is INVALID_ARGUMENT; Decode of the input
// read as int32 ids succeeds exactly when every id is in range (INVALID_ARGUMENT otherwise);
// TokenByteLength is never negative. No crash, hang or sanitizer report on any input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const scored::Tokenizer& Get() {
  static const scored::Tokenizer* tok = [] {
    absl::StatusOr<std::unique_ptr<scored::Tokenizer>> t =
        scored::Tokenizer::Load(scored::fuzz::DataPath(SCORED_FUZZ_TOKENIZER_DIR),
                                scored::Tokenizer::Format::SCORED_FUZZ_TOKENIZER_FORMAT);
    FUZZ_CHECK(t.ok(), t.status().ToString());
    return t->release();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::fuzz::CodeIsOneOf;
  const scored::Tokenizer& tok = Get();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int64_t vocab = tok.vocab_size();

  absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(text);
  const bool valid = scored::fuzz::IsValidUtf8(text);
  if (!ids.ok()) {
    FUZZ_CHECK(!valid, "valid UTF-8 rejected: " + ids.status().ToString());
    FUZZ_CHECK(CodeIsOneOf(ids.status(), absl::StatusCode::kInvalidArgument), ids.status().ToString());
  } else {
    FUZZ_CHECK(valid, "invalid UTF-8 accepted");
    for (int32_t id : *ids) {
      FUZZ_CHECK(id >= 0 && id < vocab, "id out of range: " + std::to_string(id));
      FUZZ_CHECK(tok.TokenByteLength(id) >= 0, std::to_string(id));
    }
    absl::StatusOr<std::string> back = tok.Decode(*ids);
    FUZZ_CHECK(back.ok(), back.status().ToString());
    if (SCORED_FUZZ_ROUND_TRIP) FUZZ_CHECK(*back == text, "Decode(Encode(text)) != text: '" + *back + "'");
  }

  // The same bytes as little-endian int32 ids.
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  bool in_range = true;
  for (int32_t id : raw) in_range = in_range && id >= 0 && id < vocab;
  absl::StatusOr<std::string> decoded = tok.Decode(raw);
  if (in_range) {
    FUZZ_CHECK(decoded.ok(), decoded.status().ToString());
  } else {
    FUZZ_CHECK(CodeIsOneOf(decoded.status(), absl::StatusCode::kInvalidArgument),
               decoded.status().ToString());
  }
  return 0;
}

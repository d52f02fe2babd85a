// Fuzzes the native SentencePiece model reader: the input is a whole `tokenizer.model` file (a serialized
// sentencepiece.ModelProto, read by engine/tokenizer/sentencepiece_proto.cc without a protobuf runtime),
// loaded with Tokenizer::Load(dir, kSentencePiece) from a scratch folder.
//
// Contract checked (engine/tokenizer/tokenizer.h): a malformed or unsupported file is INVALID_ARGUMENT or
// UNIMPLEMENTED naming the problem, never a crash; a loaded tokenizer encodes sample texts to ids in
// [0, vocab_size), decodes them and every single id, and reports BOS/EOS inside the vocabulary (or -1).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr const char* kTexts[] = {"Once upon a time, a little dog", "  two  spaces\tand\nlines ",
                                  "na\xC3\xAFve \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80 <s></s><unk>", ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::fuzz::CodeIsOneOf;
  const std::string& dir = scored::fuzz::ScratchDir();
  FUZZ_CHECK(scored::fuzz::WriteFile(dir + "/tokenizer.model", data, size), dir);
  absl::StatusOr<std::unique_ptr<scored::Tokenizer>> tok =
      scored::Tokenizer::Load(dir, scored::Tokenizer::Format::kSentencePiece);
  if (!tok.ok()) {
    FUZZ_CHECK(
        CodeIsOneOf(tok.status(), absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented),
        tok.status().ToString());
    return 0;
  }
  const int64_t vocab = (*tok)->vocab_size();
  FUZZ_CHECK(vocab > 0, "empty vocabulary accepted");
  FUZZ_CHECK((*tok)->bos_id() >= -1 && (*tok)->bos_id() < vocab, "bos id");
  FUZZ_CHECK((*tok)->eos_id() >= -1 && (*tok)->eos_id() < vocab, "eos id");
  for (const char* text : kTexts) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text);
    if (!ids.ok()) {
      // A vocabulary without the pieces a text needs (and no unknown piece / byte fallback) may refuse it.
      FUZZ_CHECK(
          CodeIsOneOf(ids.status(), absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented),
          ids.status().ToString());
      continue;
    }
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < vocab, std::to_string(id));
    absl::StatusOr<std::string> back = (*tok)->Decode(*ids);
    FUZZ_CHECK(back.ok(), back.status().ToString());
  }
  const int32_t limit = static_cast<int32_t>(vocab < 4096 ? vocab : 4096);
  for (int32_t id = 0; id < limit; ++id) {
    const int32_t one[] = {id};
    absl::StatusOr<std::string> piece = (*tok)->Decode(one);
    FUZZ_CHECK(piece.ok(), piece.status().ToString());
    FUZZ_CHECK((*tok)->TokenByteLength(id) >= 0, std::to_string(id));
  }
  return 0;
}

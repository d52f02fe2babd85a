// Test oracle only: a plain C++ wrapper around libsentencepiece, against which the native
// SentencePiece tokenizer is checked (the library is not linked into scored_tokenizer, nor into
// anything that links the system libprotobuf). <sentencepiece_processor.h> declares its own
// absl::string_view shim that is ambiguous next to the real abseil headers, so it is included by
// sentencepiece_oracle.cc ONLY, and this header (std types only) is what the test sees.
// Errors are returned as a non-empty message string.
//
// Thread-safety: immutable after Load(); Encode/Decode may be called concurrently.
#ifndef SCORED_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_ORACLE_H_
#define SCORED_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_ORACLE_H_

#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace scored {
namespace tokenizer_internal {

class SentencePieceWrapper {
 public:
  SentencePieceWrapper();
  ~SentencePieceWrapper();
  SentencePieceWrapper(const SentencePieceWrapper&) = delete;
  SentencePieceWrapper& operator=(const SentencePieceWrapper&) = delete;

  // Parses a serialized ModelProto (the bytes of a `.model` file). "" on success, else the message.
  std::string LoadFromSerializedProto(const std::string& bytes);

  // Default encode options of the model (no BOS/EOS). "" on success, else the message.
  std::string Encode(const std::string& text, std::vector<int>* ids) const;
  // Decodes ids as sentencepiece does (control tokens render as "", the dummy-prefix space of the
  // first piece is removed). "" on success, else the message.
  std::string Decode(const std::vector<int>& ids, std::string* text) const;

  int piece_size() const;
  std::string IdToPiece(int id) const;
  int PieceToId(const std::string& piece) const;  // unk_id() when absent
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsByte(int id) const;
  bool IsUnused(int id) const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;
  int unk_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_ORACLE_H_

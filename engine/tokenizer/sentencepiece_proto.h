// The fields of a SentencePiece `.model` file (a serialized sentencepiece.ModelProto) that encoding
// and decoding use, read with a small protobuf wire-format reader (no protobuf runtime): varint,
// 64-bit, length-delimited and 32-bit fields; unknown fields are skipped; groups are rejected.
// Field numbers (sentencepiece_model.proto): ModelProto {1 pieces, 2 trainer_spec,
// 3 normalizer_spec, 5 denormalizer_spec}; SentencePiece {1 piece, 2 score (float), 3 type};
// TrainerSpec {3 model_type, 24 treat_whitespace_as_suffix, 35 byte_fallback, 44 unk_surface,
// 45 unk_piece, 46 bos_piece, 47 eos_piece}; NormalizerSpec {1 name, 2 precompiled_charsmap,
// 3 add_dummy_prefix, 4 remove_extra_whitespaces, 5 escape_whitespaces, 6 normalization_rule_tsv}.
// Absent fields take the proto defaults below. The last occurrence of a scalar field wins and
// repeated sub-messages are merged, as protobuf parsing does.
#ifndef SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_H_
#define SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace scored {
namespace tokenizer_internal {

struct SentencePieceProto {
  enum PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  enum ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  struct Piece {
    std::string piece;
    float score = 0.0f;
    int32_t type = kNormal;  // a PieceType value as read (validated by the caller)
  };
  struct Normalizer {
    bool present = false;  // the field occurred in the file
    std::string name;
    std::string precompiled_charsmap;  // bytes; empty = identity
    std::string normalization_rule_tsv;
    bool add_dummy_prefix = true;
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
  };

  std::vector<Piece> pieces;  // [vocab_size], id = index
  int32_t model_type = kUnigram;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  Normalizer normalizer;
  Normalizer denormalizer;
};

// Parses the bytes of a `.model` file. INVALID_ARGUMENT naming the problem (truncated varint or
// field, a known field with the wrong wire type, groups, field number 0) for malformed input.
// Strings are kept as bytes (proto2: not checked for UTF-8 here).
absl::StatusOr<SentencePieceProto> ParseSentencePieceProto(std::string_view bytes);

}  // namespace tokenizer_internal
}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_SENTENCEPIECE_PROTO_H_

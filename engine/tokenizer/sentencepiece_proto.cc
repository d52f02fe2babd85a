#include "engine/tokenizer/sentencepiece_proto.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace scored {
namespace tokenizer_internal {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and value (varint/fixed in `number_value`,
// length-delimited bytes in `bytes`).
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t number_value = 0;
  std::string_view bytes;
};

class WireReader {
 public:
  WireReader(std::string_view data, const char* message) : data_(data), message_(message) {}
  bool done() const { return pos_ >= data_.size(); }

  absl::Status Next(Field* field) {
    uint64_t key = 0;
    SCORED_RETURN_IF_ERROR(ReadVarint(&key));
    field->wire_type = static_cast<uint32_t>(key & 7);
    const uint64_t number = key >> 3;
    if (number == 0 || number > (uint64_t{1} << 29) - 1) {
      return Error(absl::StrCat("invalid field number ", number));
    }
    field->number = static_cast<uint32_t>(number);
    switch (field->wire_type) {
      case kVarint:
        return ReadVarint(&field->number_value);
      case kFixed64:
        return ReadFixed(8, &field->number_value);
      case kFixed32:
        return ReadFixed(4, &field->number_value);
      case kLengthDelimited: {
        uint64_t len = 0;
        SCORED_RETURN_IF_ERROR(ReadVarint(&len));
        if (len > data_.size() - pos_) {
          return Error(absl::StrCat("field ", field->number, " of length ", len, " runs past the end"));
        }
        field->bytes = data_.substr(pos_, static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return absl::OkStatus();
      }
      default:
        return Error(absl::StrCat("field ", field->number, " has unsupported wire type ", field->wire_type));
    }
  }

  absl::Status Expect(const Field& field, uint32_t wire_type) const {
    if (field.wire_type == wire_type) return absl::OkStatus();
    return Error(
        absl::StrCat("field ", field.number, " has wire type ", field.wire_type, ", expected ", wire_type));
  }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", message_, " at byte ", pos_, ": ", what));
  }

 private:
  absl::Status ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return Error("truncated varint");
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *value = v;
        return absl::OkStatus();
      }
    }
    return Error("varint longer than 10 bytes");
  }

  absl::Status ReadFixed(int n, uint64_t* value) {
    if (data_.size() - pos_ < static_cast<size_t>(n)) return Error("truncated fixed-width field");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    *value = v;
    return absl::OkStatus();
  }

  std::string_view data_;
  const char* message_;
  size_t pos_ = 0;
};

absl::Status ReadString(const WireReader& r, const Field& f, std::string* out) {
  SCORED_RETURN_IF_ERROR(r.Expect(f, kLengthDelimited));
  out->assign(f.bytes.data(), f.bytes.size());
  return absl::OkStatus();
}

absl::Status ReadBool(const WireReader& r, const Field& f, bool* out) {
  SCORED_RETURN_IF_ERROR(r.Expect(f, kVarint));
  *out = f.number_value != 0;
  return absl::OkStatus();
}

absl::Status ReadInt32(const WireReader& r, const Field& f, int32_t* out) {
  SCORED_RETURN_IF_ERROR(r.Expect(f, kVarint));
  *out = static_cast<int32_t>(static_cast<uint32_t>(f.number_value));  // protobuf truncation
  return absl::OkStatus();
}

absl::Status ParsePiece(std::string_view bytes, SentencePieceProto::Piece* piece) {
  WireReader r(bytes, "SentencePiece");
  Field f;
  while (!r.done()) {
    SCORED_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case 1:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &piece->piece));
        break;
      case 2: {
        SCORED_RETURN_IF_ERROR(r.Expect(f, kFixed32));
        const uint32_t bits = static_cast<uint32_t>(f.number_value);
        std::memcpy(&piece->score, &bits, sizeof(bits));
        break;
      }
      case 3:
        SCORED_RETURN_IF_ERROR(ReadInt32(r, f, &piece->type));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(std::string_view bytes, SentencePieceProto* proto) {
  WireReader r(bytes, "TrainerSpec");
  Field f;
  while (!r.done()) {
    SCORED_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case 3:
        SCORED_RETURN_IF_ERROR(ReadInt32(r, f, &proto->model_type));
        break;
      case 24:
        SCORED_RETURN_IF_ERROR(ReadBool(r, f, &proto->treat_whitespace_as_suffix));
        break;
      case 35:
        SCORED_RETURN_IF_ERROR(ReadBool(r, f, &proto->byte_fallback));
        break;
      case 44:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &proto->unk_surface));
        break;
      case 45:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &proto->unk_piece));
        break;
      case 46:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &proto->bos_piece));
        break;
      case 47:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &proto->eos_piece));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(std::string_view bytes, SentencePieceProto::Normalizer* n) {
  n->present = true;
  WireReader r(bytes, "NormalizerSpec");
  Field f;
  while (!r.done()) {
    SCORED_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case 1:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &n->name));
        break;
      case 2:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &n->precompiled_charsmap));
        break;
      case 3:
        SCORED_RETURN_IF_ERROR(ReadBool(r, f, &n->add_dummy_prefix));
        break;
      case 4:
        SCORED_RETURN_IF_ERROR(ReadBool(r, f, &n->remove_extra_whitespaces));
        break;
      case 5:
        SCORED_RETURN_IF_ERROR(ReadBool(r, f, &n->escape_whitespaces));
        break;
      case 6:
        SCORED_RETURN_IF_ERROR(ReadString(r, f, &n->normalization_rule_tsv));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SentencePieceProto> ParseSentencePieceProto(std::string_view bytes) {
  SentencePieceProto proto;
  WireReader r(bytes, "ModelProto");
  Field f;
  while (!r.done()) {
    SCORED_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case 1: {
        SCORED_RETURN_IF_ERROR(r.Expect(f, kLengthDelimited));
        proto.pieces.emplace_back();
        absl::Status s = ParsePiece(f.bytes, &proto.pieces.back());
        if (!s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("piece ", proto.pieces.size() - 1, ": ", s.message()));
        }
        break;
      }
      case 2:
        SCORED_RETURN_IF_ERROR(r.Expect(f, kLengthDelimited));
        SCORED_RETURN_IF_ERROR(ParseTrainerSpec(f.bytes, &proto));
        break;
      case 3:
        SCORED_RETURN_IF_ERROR(r.Expect(f, kLengthDelimited));
        SCORED_RETURN_IF_ERROR(ParseNormalizerSpec(f.bytes, &proto.normalizer));
        break;
      case 5:
        SCORED_RETURN_IF_ERROR(r.Expect(f, kLengthDelimited));
        SCORED_RETURN_IF_ERROR(ParseNormalizerSpec(f.bytes, &proto.denormalizer));
        break;
      default:
        break;
    }
  }
  return proto;
}

}  // namespace tokenizer_internal
}  // namespace scored

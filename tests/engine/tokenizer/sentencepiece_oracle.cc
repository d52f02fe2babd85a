// The ONLY file that includes <sentencepiece_processor.h>; it must not include any abseil header
// (see sentencepiece_oracle.h).
#include "tests/engine/tokenizer/sentencepiece_oracle.h"

#include <sentencepiece_processor.h>

namespace scored {
namespace tokenizer_internal {

SentencePieceWrapper::SentencePieceWrapper()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceWrapper::~SentencePieceWrapper() = default;

std::string SentencePieceWrapper::LoadFromSerializedProto(const std::string& bytes) {
  const auto status = sp_->LoadFromSerializedProto(bytes);
  return status.ok() ? std::string() : status.ToString();
}

std::string SentencePieceWrapper::Encode(const std::string& text, std::vector<int>* ids) const {
  const auto status = sp_->Encode(text, ids);
  return status.ok() ? std::string() : status.ToString();
}

std::string SentencePieceWrapper::Decode(const std::vector<int>& ids, std::string* text) const {
  const auto status = sp_->Decode(ids, text);
  return status.ok() ? std::string() : status.ToString();
}

int SentencePieceWrapper::piece_size() const { return sp_->GetPieceSize(); }
std::string SentencePieceWrapper::IdToPiece(int id) const { return sp_->IdToPiece(id); }
int SentencePieceWrapper::PieceToId(const std::string& piece) const { return sp_->PieceToId(piece); }
bool SentencePieceWrapper::IsControl(int id) const { return sp_->IsControl(id); }
bool SentencePieceWrapper::IsUnknown(int id) const { return sp_->IsUnknown(id); }
bool SentencePieceWrapper::IsByte(int id) const { return sp_->IsByte(id); }
bool SentencePieceWrapper::IsUnused(int id) const { return sp_->IsUnused(id); }
int SentencePieceWrapper::bos_id() const { return sp_->bos_id(); }
int SentencePieceWrapper::eos_id() const { return sp_->eos_id(); }
int SentencePieceWrapper::unk_id() const { return sp_->unk_id(); }

}  // namespace tokenizer_internal
}  // namespace scored

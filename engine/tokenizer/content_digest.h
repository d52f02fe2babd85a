// What a tokenizer does, apart from its files' bytes: two tokenizers have the same content when they give
// every id the same text and every text the same ids. Quantization tools rewrite tokenizer_config.json (key
// order, new keys) without changing how anything tokenizes, so `scored --reference_model` compares this, not
// Tokenizer::fingerprint().
//
// The content is observed through the Tokenizer interface, in this order:
//   vocabulary size; BOS id; EOS id; the add-BOS default;
//   per id: its decoded text (Decode({id})), its byte length (TokenByteLength) and the ids of encoding that
//     text again (vocabulary pieces and ids, added/special tokens, and the merges and normalizer as they act
//     on every piece);
//   the ids of a fixed set of probe texts (spaces, newlines, digits, punctuation, contractions, accents in
//     NFC and NFD, CJK, emoji, special-token strings), for the normalizer and pre-tokenizer on longer text.
// Costs one Decode and one Encode per id (well under a second for a 128k vocabulary).
// Thread-safety: stateless; the tokenizers are only read.
#ifndef SCORED_ENGINE_TOKENIZER_CONTENT_DIGEST_H_
#define SCORED_ENGINE_TOKENIZER_CONTENT_DIGEST_H_

#include <string>

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace scored {

// Hex SHA-256 (64 lowercase chars) of the content above: equal for tokenizers that tokenize alike.
std::string TokenizerContentDigest(const Tokenizer& tokenizer);

// OK when `model` and `reference` have the same content; otherwise INVALID_ARGUMENT naming the first
// difference with both values, model's first, e.g. "vocabulary size 32000 vs 32001", "BOS id 1 vs 128000",
// "add-BOS default true vs false", "token 17: text \"ab\" vs \"ac\"".
absl::Status CompareTokenizerContent(const Tokenizer& model, const Tokenizer& reference);

}  // namespace scored

#endif  // SCORED_ENGINE_TOKENIZER_CONTENT_DIGEST_H_

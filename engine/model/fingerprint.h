// Model fingerprint (scorer.proto ModelInfo.model_fingerprint): a cheap identity of a checkpoint folder.
//
// Hex SHA-256 over this byte stream:
//   "scored-model-fingerprint-v1\n"
//   u64le(size of config.json) + the bytes of config.json
//   for each safetensors file the model uses (model.safetensors, or every shard named by
//   model.safetensors.index.json: the checkpoint files of config.json's family, FamilyTraits::checkpoint,
//   those two for every family today and for an unknown or unparsable config), in sorted file-name order:
//     u64le(length of the file name) + file name (no folder)
//     u64le(file size)
//     the 8-byte header length + the JSON header, as stored
//     samples of the data section (D bytes, everything after the header): if D <= 64 * 4096 the whole
//     section; else 64 samples of 4096 bytes at offsets floor(i * (D - 4096) / 63), i = 0..63 (the
//     first sample starts the section, the last ends it)
// Reads at most ~256 KiB per file, so a 100 GB checkpoint is fingerprinted in milliseconds, yet any two
// checkpoints seen in practice differ (configs, headers or sampled data). Not a content hash of every
// byte: two files differing only between samples get the same fingerprint. Thread-safe (no shared state).
#ifndef SCORED_ENGINE_MODEL_FINGERPRINT_H_
#define SCORED_ENGINE_MODEL_FINGERPRINT_H_

#include <string>

#include "absl/status/statusor.h"

namespace scored {

// 64 lowercase hex chars. NOT_FOUND / DATA_LOSS / INVALID_ARGUMENT naming the file on I/O or format
// errors (a truncated header, a missing shard).
absl::StatusOr<std::string> ModelFingerprint(const std::string& model_dir);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_FINGERPRINT_H_

// A stored reference model R for KL divergence when R and the quant Q do not fit on the GPUs together
// (issue 35): `scored-ppl --save_reference FILE` runs R alone and stores, per scored position of every window
// of the run, what KL(P_R || P_Q) needs from R; `scored-ppl --kld --reference_file FILE` then runs Q against
// it (client/ppl/stored_kld.h has the arithmetic).
//
// Format, version 1 (little-endian: the byte order of every host scored builds for):
//   "SCOREDRF" (8 bytes), u32 version = 1, u32 header_bytes, the header: one JSON object
//     {"format": "scored-reference/1",
//      "identity": {name: text, ...}   the run fields a reader's run must match, in order (ReferenceHeader),
//      "model_fingerprint", "model_path", "model_format": R's (ModelInfo), "vocab_size", "top_k": K,
//      "num_windows", "num_positions"}
//   then one block per window of the run, in the order the windows finished (a reader indexes them), each:
//     u32 "WNDW", i64 window index, i32 num_scored n, i32 k (= K), f64 sum_logprob (R's double sum),
//     f32[n] logprob: R's log-probability of the target, f32[n] entropy of R's distribution (nats),
//     f64[n] tail_mass: 1 - the sum of the k stored probabilities, in double from the stored floats, clamped
//       to [0, 1] (exactly 0 when k = vocab_size: nothing is left out),
//     i32[n * k] R's top-k ids and f32[n * k] their log-probabilities, per position descending, ties by the
//       lower id (the Score contract's top_k, so entry 0 is R's argmax),
//     u32 CRC-32 (zlib's) of the block from "WNDW" on;
//   and last, written once every window is stored: u32 "DONE", i64 num_windows, i64 num_positions,
//   u32 CRC-32 of the header JSON.
// Size: 28 + n (16 + 8 K) + 4 bytes per window (ReferenceFileBytes): K = 1024 stores 8,208 bytes per scored
// position, ~2.4 GB for WikiText-2 test's ~290k positions in windows of 2048 (gptq / hf / chunks; exl3's
// overlapping windows score each token ~4 times).
//
// Crash safety and resumption: the writer writes FILE.partial, one write(2) per block and an fdatasync every
// block, and renames it to FILE only after the trailer is synced, so FILE is always complete. A run that
// finds FILE.partial with the same header resumes it: its whole, checksummed blocks are kept (a torn or
// corrupt last block is cut off, said on `note_out`), and only the missing windows are scored.
//
// Errors: INTERNAL naming the path on I/O errors; DATA_LOSS for a file that is truncated, corrupt (a
// checksum, a size, a window out of range or repeated) or lacks its trailer; FAILED_PRECONDITION when a
// FILE.partial belongs to another run or a run does not match the file (ReferenceFile::CheckRun names the
// first differing field and both values); ALREADY_EXISTS when --save_reference FILE exists.
// Thread-safety: ReferenceWriter is not thread-safe; ReferenceFile::Read may be called from any thread.
#ifndef SCORED_CLIENT_PPL_REFERENCE_FILE_H_
#define SCORED_CLIENT_PPL_REFERENCE_FILE_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/ppl/journal.h"

namespace scored {
namespace ppl {

// K of --save_reference: 1024 keeps WikiText-2 test at ~2.4 GB (see above), and is the Score contract's
// largest top_k.
inline constexpr int32_t kDefaultReferenceTopK = 1024;

struct ReferenceHeader {
  // The run a Q run must repeat: tokenizer, data, method and its parameters, the windows and a digest of
  // every window's ids (run.cc's ReferenceIdentity); compared field by field, in order.
  JournalIdentity identity;
  std::string model_fingerprint;  // R's
  std::string model_path;
  std::string model_format;
  int64_t vocab_size = 0;
  int32_t top_k = 0;  // K, in [1, vocab_size]
  int64_t num_windows = 0;
  int64_t num_positions = 0;  // scored positions of all windows
};

// One window's block.
struct ReferenceWindow {
  int64_t window = 0;
  int32_t num_scored = 0;
  int32_t k = 0;
  double sum_logprob = 0.0;
  std::vector<float> logprob;       // [num_scored]
  std::vector<float> entropy;       // [num_scored]
  std::vector<double> tail_mass;    // [num_scored]
  std::vector<int32_t> top_ids;     // [num_scored, k]
  std::vector<float> top_logprobs;  // [num_scored, k]
};

// 1 - sum_i exp(top_logprobs[i]) over one position's k values, in double, clamped to [0, 1]; exactly 0 when
// k == vocab_size.
double TailMass(absl::Span<const float> top_logprobs, int64_t vocab_size);

// Bytes of a file of `num_windows` windows holding `num_positions` scored positions at K = `top_k` (the
// header counted as 1 KiB).
int64_t ReferenceFileBytes(int64_t num_windows, int64_t num_positions, int32_t top_k);

class ReferenceWriter {
 public:
  // Starts `path` (ALREADY_EXISTS if it exists): creates path + ".partial", or resumes it when its header is
  // `header` (FAILED_PRECONDITION naming the first differing field otherwise; delete it to start over).
  static absl::StatusOr<std::unique_ptr<ReferenceWriter>> Open(const std::string& path,
                                                               const ReferenceHeader& header,
                                                               std::FILE* note_out);
  ~ReferenceWriter();
  ReferenceWriter(const ReferenceWriter&) = delete;
  ReferenceWriter& operator=(const ReferenceWriter&) = delete;

  // The windows a resumed FILE.partial already holds, by index.
  const std::map<int64_t, ReferenceWindow>& resumed() const { return resumed_; }

  // Appends one window (its tail_mass is computed here from top_logprobs; the given one is ignored) and
  // syncs it. INVALID_ARGUMENT for sizes that disagree with the header or a window stored already.
  absl::Status Append(const ReferenceWindow& window);
  // Once every window is stored (FAILED_PRECONDITION naming how many are missing otherwise): writes and syncs
  // the trailer and renames FILE.partial to FILE.
  absl::Status Finish();
  int64_t bytes() const { return bytes_; }

 private:
  ReferenceWriter(std::string path, int fd, ReferenceHeader header)
      : path_(std::move(path)), fd_(fd), header_(std::move(header)) {}

  std::string path_;  // FILE (the partial file is path_ + ".partial")
  int fd_ = -1;
  ReferenceHeader header_;
  std::string header_json_;
  int64_t bytes_ = 0;
  std::map<int64_t, ReferenceWindow> resumed_;
  std::vector<bool> stored_;  // [num_windows]
  int64_t positions_ = 0;
};

class ReferenceFile {
 public:
  // Opens a complete file: header, every block's place (each block's checksum is checked when it is read),
  // the trailer.
  static absl::StatusOr<std::unique_ptr<ReferenceFile>> Open(const std::string& path);
  ~ReferenceFile();
  ReferenceFile(const ReferenceFile&) = delete;
  ReferenceFile& operator=(const ReferenceFile&) = delete;

  const ReferenceHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  // OK when `run` (the identity of this run, made like the file's) equals the file's identity; else
  // FAILED_PRECONDITION naming the first differing field, both values and what to do.
  absl::Status CheckRun(const JournalIdentity& run) const;
  // Window `window`'s block, its checksum and sizes checked (DATA_LOSS naming the window otherwise).
  absl::StatusOr<ReferenceWindow> Read(int64_t window) const;

 private:
  ReferenceFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
  ReferenceHeader header_;
  std::vector<std::pair<int64_t, int64_t>> blocks_;  // [num_windows]: (offset, bytes)
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_REFERENCE_FILE_H_

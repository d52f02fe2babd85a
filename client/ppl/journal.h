// Journal of scored-ppl (--journal FILE): every finished window is appended to a line-oriented file so
// that an interrupted run (client killed, machine rebooted) can resume without rescoring, and still
// produce a report identical to an uninterrupted run's.
//
// Format: text, one JSON object per line ("\n"-terminated).
//   line 1   header: {"journal": "scored-ppl/2", <the run identity fields of JournalIdentity>}
//   line 2.. one record per finished window, in completion order:
//            {"w": window index, "s": sum_logprob as "%.17g" text (exact double round trip),
//             "n": num_scored, "b": scored UTF-8 bytes (-1 unknown), "lp": [per-token logprobs, each
//             written as "%.9g" text, the exact round trip of a float]}
//            and, in a --kld run's journal, also the reference comparison of the window:
//             "rs": sum_ref_logprob ("%.17g"), "rl": [reference logprobs], "k": [per-token KLDs] (both
//             "%.9g", exact floats), "t": same-top flags as a text of '0' / '1', one per token
//            (what the report's percentiles and correlation need, per token),
//            and last "c": the first 16 hex digits of the SHA-256 of the line before `,"c":`.
// Records that cannot lie: a record whose checksum does not match, whose sum "s" (or "rs") is not the sum of
// its per-token values (within float rounding: 1e-6 of the sum of magnitudes), or that does not parse, is
// not resumed: Open() names it (window and byte offset) on `note_out` and its window is scored again, or,
// strict (--journal_strict), refuses the journal (DATA_LOSS naming them). Journals of scored-ppl/1 (no
// checksums) are refused, naming the version.
// A crash can leave a torn last line (no "\n", or not parseable): Open() ignores it and truncates the
// file back to the last complete record before appending. Duplicate records for one window (possible
// only if the same window was written twice) keep the first.
//
// Durability: Append() writes the record with one write(2); every `sync_every`-th record (and Close())
// is followed by fdatasync(2). sync_every = 1 (the default) makes every finished window durable
// before the next one is counted (one fdatasync per window: ~0.1-1 ms on SSDs, negligible next to the
// scoring of a window); larger values batch the syncs at the cost of rescoring up to sync_every - 1
// windows after a power loss (a killed process loses nothing either way: the kernel keeps the writes).
//
// Thread-safety: not thread-safe; one thread owns a Journal.
#ifndef SCORED_CLIENT_PPL_JOURNAL_H_
#define SCORED_CLIENT_PPL_JOURNAL_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scored {
namespace ppl {

// Writes all of `data` to `fd`, retrying short writes and EINTR; false with errno set on an error (the
// journal's and the stored reference's writes).
bool WriteFully(int fd, std::string_view data);

// What makes two runs the same: every field must match for a journal to be resumed. Values are text
// (numbers written in decimal) and are compared exactly.
struct JournalIdentity {
  std::vector<std::pair<std::string, std::string>> fields;  // (name, value), in header order
  void Add(const std::string& name, const std::string& value) { fields.emplace_back(name, value); }
};

// One finished window as journaled.
struct JournalRecord {
  int64_t window = 0;
  double sum_logprob = 0.0;
  std::vector<float> logprobs;  // [num_scored]
  int64_t num_bytes = -1;       // -1 = unknown
  // --kld runs: the reference comparison (ScoreResponse fields 12-16), each [num_scored].
  bool has_reference = false;
  double sum_ref_logprob = 0.0;
  std::vector<float> ref_logprobs;
  std::vector<float> kld;
  std::vector<uint8_t> same_top;  // 0 / 1
};

// Formats / parses one record line (without the "\n"). ParseRecordLine: INVALID_ARGUMENT if the line
// is not a complete record, its checksum does not match or its sums are not those of its values.
std::string FormatRecordLine(const JournalRecord& record);
absl::StatusOr<JournalRecord> ParseRecordLine(const std::string& line);

class Journal {
 public:
  // Opens `path`: creates it with the header if it does not exist (or is empty); otherwise checks its
  // header against `identity` (FAILED_PRECONDITION naming the first differing field, both values and
  // the path: use another --journal file or delete this one) and loads its records (bad ones: above,
  // reported on `note_out` when not null). INVALID_ARGUMENT when `path` exists but is not a regular file
  // (a directory, device such as /dev/zero, FIFO or socket). INTERNAL on I/O errors, naming the path.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& path,
                                                       const JournalIdentity& identity, int sync_every = 1,
                                                       bool strict = false, std::FILE* note_out = nullptr);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The records found at Open(), by window index.
  const std::map<int64_t, JournalRecord>& resumed() const { return resumed_; }

  // Appends one record (durable per the sync policy above). INTERNAL naming the path on failure.
  absl::Status Append(const JournalRecord& record);
  // Syncs and closes the file (also done by the destructor, ignoring errors).
  absl::Status Close();

 private:
  Journal(std::string path, int fd, int sync_every)
      : path_(std::move(path)), fd_(fd), sync_every_(sync_every) {}

  std::string path_;
  int fd_ = -1;
  int sync_every_ = 1;
  int64_t unsynced_ = 0;
  std::map<int64_t, JournalRecord> resumed_;
};

}  // namespace ppl
}  // namespace scored

#endif  // SCORED_CLIENT_PPL_JOURNAL_H_

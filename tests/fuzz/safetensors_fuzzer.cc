// Fuzzes the safetensors header parser (SafetensorsFile::Open) with whole files: the input is the file.
//
// Contract checked (engine/model/safetensors.h): any input gives either a file whose every tensor lies
// inside the data section with byte size == element count x dtype size and no two tensors overlapping, or
// INVALID_ARGUMENT / DATA_LOSS naming the file; never a crash, sanitizer report or out-of-bounds read.
// The file is a memfd opened through /proc/self/fd, so nothing touches the disk.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::fuzz::CodeIsOneOf;
  static scored::fuzz::MemFile* file = new scored::fuzz::MemFile();
  FUZZ_CHECK(file->Set(data, size), "writing the memfd");

  absl::StatusOr<std::unique_ptr<scored::SafetensorsFile>> f = scored::SafetensorsFile::Open(file->path());
  if (!f.ok()) {
    FUZZ_CHECK(CodeIsOneOf(f.status(), absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss),
               f.status().ToString());
    FUZZ_CHECK(absl::StrContains(f.status().message(), file->path()), f.status().ToString());
    return 0;
  }

  // An accepted file has the 8-byte length and that many header bytes; the rest is the data section.
  FUZZ_CHECK(size >= 8, "accepted a file shorter than the length field");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_CHECK(header_len <= size - 8, "accepted a header longer than the file");
  const int64_t data_size = static_cast<int64_t>(size - 8 - header_len);

  std::vector<std::pair<const uint8_t*, int64_t>> spans;  // non-empty tensors: [data, data + nbytes)
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  uint32_t checksum = 0;
  for (const auto& [name, t] : (*f)->tensors()) {
    FUZZ_CHECK(t.name == name, name);
    FUZZ_CHECK(t.present(), name);
    FUZZ_CHECK(t.nbytes >= 0, name);
    int64_t count = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, name);
      FUZZ_CHECK(!__builtin_mul_overflow(count, d, &count), name);
    }
    FUZZ_CHECK(count == t.NumElements(), name);
    FUZZ_CHECK(count * scored::DTypeSize(t.dtype) == t.nbytes, name);
    FUZZ_CHECK(t.nbytes <= data_size, name);
    if (t.nbytes == 0) continue;
    spans.emplace_back(t.data, t.nbytes);
    lo = lo == nullptr ? t.data : std::min(lo, t.data);
    hi = hi == nullptr ? t.data + t.nbytes : std::max(hi, t.data + t.nbytes);
    // Every byte of every tensor is readable (an out-of-range view faults here).
    for (int64_t i = 0; i < t.nbytes; ++i) checksum = checksum * 31u + t.data[i];
  }
  if (!spans.empty()) {
    FUZZ_CHECK(hi - lo <= data_size, "tensors spread over more than the data section");
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      FUZZ_CHECK(spans[i - 1].first + spans[i - 1].second <= spans[i].first, "overlapping tensors accepted");
    }
  }
  for (const auto& [key, value] : (*f)->metadata())
    checksum += static_cast<uint32_t>(key.size() + value.size());
  // Keeps the reads above from being optimized away.
  volatile uint32_t sink = checksum;
  (void)sink;
  return 0;
}

// safetensors reader: mmap, zero-copy views, strict header validation.
//
// A file is: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {...}}, then the data section. Validation (every failure is INVALID_ARGUMENT or
// DATA_LOSS naming the file and, where there is one, the tensor; never a crash or out-of-bounds read):
// N fits the file; JSON well formed; known dtype; shape non-negative and its byte size (no overflow) ==
// e - b; 0 <= b <= e <= data section size; tensors do not overlap.
#ifndef SCORED_ENGINE_MODEL_SAFETENSORS_H_
#define SCORED_ENGINE_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/base/stored_weight.h"  // DType, TensorView
#include "engine/model/family.h"        // CheckpointFiles

namespace scored {

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Whether [data, data + nbytes) lies inside this file's mapping.
  bool Maps(const uint8_t* data, int64_t nbytes) const;
  // Drops this process's resident pages of the whole pages [data, data + nbytes) spans, clamped to the
  // mapping (madvise MADV_DONTNEED on a read-only private file mapping): the bytes stay readable and a later
  // read faults them in again from the page cache or the file; RSS stops counting them. Requires Maps(data,
  // nbytes).
  void ReleaseResidentPages(const uint8_t* data, int64_t nbytes) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  int64_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  friend class SafetensorsParser;
};

// All tensors of a model folder: files.single_file (model.safetensors), or the shards named by
// files.index_file (model.safetensors.index.json; every shard listed is opened; a tensor the index names
// must be in that shard). The index wins when both exist. The files are the model family's
// (FamilyTraits::checkpoint, family.h).
class TensorStore {
 public:
  static absl::StatusOr<std::unique_ptr<TensorStore>> Open(
      const std::string& model_dir, const CheckpointFiles& files = kHfSafetensorsCheckpoint);

  // NOT_FOUND naming the tensor and the folder when absent.
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  bool Has(const std::string& name) const;
  std::vector<std::string> Names() const;
  // For a loader that has copied `view` elsewhere (to a GPU): drops the process's resident pages under it
  // (see SafetensorsFile::ReleaseResidentPages; pages shared with a neighbouring tensor are refaulted when
  // that one is read). A no-op for an absent view or one that is not inside this store's mappings (a host
  // copy). Thread-safe.
  void ReleaseResidentPages(const TensorView& view) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
  std::string dir_;
};

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_SAFETENSORS_H_

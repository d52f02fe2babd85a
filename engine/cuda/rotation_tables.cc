#include "engine/cuda/rotation_tables.h"

#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/cuda_check.h"
#include "engine/model/hadamard_factors.h"

namespace scored::cuda {

namespace {

std::vector<const LinearTransform*> Inputs(const LinearWeight& w) {
  std::vector<const LinearTransform*> inputs;
  for (const LinearTransform& t : w.transforms) {
    if (!t.output) inputs.push_back(&t);
  }
  return inputs;
}

// The same matrices (tied: the same stored tensor) in the same directions and order.
bool SameRotations(const std::vector<const LinearTransform*>& a,
                   const std::vector<const LinearTransform*>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->matrix.data != b[i]->matrix.data || a[i]->inverse != b[i]->inverse) return false;
  }
  return true;
}

absl::Status Unimplemented(const std::string& what, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat(what, ": transform_config: ", why,
                                               " is not implemented on the CUDA backend; use --backend=cpu"));
}

}  // namespace

absl::Status RotationTables::Attach(const std::vector<const LinearWeight*>& members, const std::string& what,
                                    bool output_allowed, DeviceLinear* linear) {
  const LinearWeight& first = *members.front();
  for (const LinearWeight* m : members) {
    if (!SameRotations(Inputs(*m), Inputs(first))) {
      return Unimplemented(what, absl::StrCat(first.module, " and ", m->module,
                                              " share one input but differ in their input rotations"));
    }
  }
  for (const LinearTransform* t : Inputs(first)) {
    SCORED_ASSIGN_OR_RETURN(DeviceRotation r, Rotation(*t, first, first.in_features));
    r.width = first.in_features;
    linear->input_rotations_.push_back(r);
  }
  int64_t row = 0;
  for (const LinearWeight* m : members) {
    for (const LinearTransform& t : m->transforms) {
      if (!t.output) continue;
      if (!output_allowed) {
        return Unimplemented(m->module,
                             "an output rotation of a linear whose output has a bias or is added "
                             "into the residual stream");
      }
      SCORED_ASSIGN_OR_RETURN(DeviceRotation r, Rotation(t, *m, m->out_features));
      r.col_offset = row;
      r.width = m->out_features;
      linear->output_rotations_.push_back(r);
    }
    row += m->out_features;
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceRotation> RotationTables::Rotation(const LinearTransform& t, const LinearWeight& w,
                                                        int64_t width) {
  const int64_t n = t.matrix.shape.empty() ? 0 : t.matrix.shape[0];
  if (n <= 0 || width % n != 0) {
    return Unimplemented(w.module, absl::StrCat("a rotation of size ", n, " over ", width,
                                                " columns (a tensor-parallel shard cuts its blocks)"));
  }
  int device = 0;
  SCORED_CUDA_CHECK(cudaGetDevice(&device));
  if (n > kernels::MaxHadamardRotationSize(device)) {
    return Unimplemented(w.module, absl::StrCat("a rotation of size ", n,
                                                " (this device's shared memory "
                                                "holds at most ",
                                                kernels::MaxHadamardRotationSize(device), ")"));
  }
  auto it = tables_.find(t.matrix.data);
  if (it == tables_.end()) {
    SCORED_ASSIGN_OR_RETURN(const HadamardFactors f, FactorHadamard(t.matrix));
    if (f.core_size > kernels::kMaxHadamardCore) {
      return Unimplemented(w.module, absl::StrCat("a rotation whose matrix factors no further than a ",
                                                  f.core_size, "x", f.core_size, " core"));
    }
    // views[0]: forward, views[1]: inverse; they share the signs.
    std::array<kernels::HadamardRotation, 2> views;
    SCORED_ASSIGN_OR_RETURN(DeviceBuffer signs,
                            UploadToDevice(f.signs.data(), f.size, t.matrix.name + " signs"));
    for (int inverse = 0; inverse < 2; ++inverse) {
      const std::vector<uint8_t> bits =
          kernels::PackHadamardCore(f.core, static_cast<int32_t>(f.core_size), inverse == 1);
      SCORED_ASSIGN_OR_RETURN(
          DeviceBuffer core,
          UploadToDevice(bits.data(), static_cast<int64_t>(bits.size()), t.matrix.name + " core"));
      kernels::HadamardRotation& view = views[inverse];
      view.size = static_cast<int32_t>(f.size);
      view.chunk = static_cast<int32_t>(f.chunk);
      view.core_size = static_cast<int32_t>(f.core_size);
      view.signs = signs.as<int8_t>();
      view.core_bits = core.as<uint8_t>();
      view.inverse = inverse == 1;
      buffers_.push_back(std::move(core));
    }
    buffers_.push_back(std::move(signs));
    it = tables_.emplace(t.matrix.data, views).first;
  }
  DeviceRotation r;
  r.view = it->second[t.inverse ? 1 : 0];
  return r;
}

}  // namespace scored::cuda

// MakeDequantParams: host-side validation of a StoredLinear and its device copies. Contract: dequant.h.
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/dequant.h"

namespace scored::kernels {
namespace {

int64_t Elements(const TensorView& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

bool IsFloatDtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

absl::Status Invalid(const StoredLinear& w, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(w.module, ": dequant: ", what));
}

absl::Status CheckShape(const StoredLinear& w, const TensorView& t, const char* name,
                        const std::vector<int64_t>& want) {
  if (t.shape != want) {
    std::string got, expected;
    for (int64_t d : t.shape) absl::StrAppend(&got, got.empty() ? "" : ",", d);
    for (int64_t d : want) absl::StrAppend(&expected, expected.empty() ? "" : ",", d);
    return Invalid(w, absl::StrCat(name, " has shape [", got, "], expected [", expected, "]"));
  }
  return absl::OkStatus();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scale shape for tensor/channel/group strategies; returns the number of groups (scale columns).
absl::StatusOr<int64_t> CheckIntScale(const StoredLinear& w) {
  const TensorView& s = w.weight_scale;
  if (!IsFloatDtype(s.dtype)) return Invalid(w, "weight_scale must be F32/F16/BF16");
  switch (w.strategy) {
    case QuantStrategy::kTensor:
      if (Elements(s) != 1) return Invalid(w, "tensor-strategy weight_scale must hold one value");
      return int64_t{1};
    case QuantStrategy::kChannel: {
      if (Elements(s) != w.out_features || (s.shape.size() == 2 && s.shape[1] != 1)) {
        return Invalid(w, "channel-strategy weight_scale must be [out, 1]");
      }
      return int64_t{1};
    }
    case QuantStrategy::kGroup: {
      if (s.shape.size() != 2 || s.shape[0] != w.out_features)
        return Invalid(w, "group weight_scale must be [out, groups]");
      if (!w.actorder_group) {
        if (w.group_size <= 0) return Invalid(w, "group_size must be positive");
        if (s.shape[1] != CeilDiv(w.in_features, w.group_size)) {
          return Invalid(w, "weight_scale columns != ceil(in / group_size)");
        }
      }
      return s.shape[1];
    }
    case QuantStrategy::kBlock:
      return Invalid(w, "block strategy is only supported for FP8 float-quantized weights");
  }
  return Invalid(w, "unknown strategy");
}

// NVFP4 (E2M1 values, an E4M3 scale per 16, an fp32 global-scale divisor) and MXFP4 (E2M1 values, an E8M0
// scale per 32): values packed two per byte.
absl::Status SetFp4Params(const StoredLinear& w, const DequantDevicePointers& dev, DequantParams* p) {
  const bool nv = w.format == WeightFormat::kNvfp4PackQuantized;
  const int64_t out = w.out_features, in = w.in_features, group = nv ? 16 : 32;
  const char* name = nv ? "nvfp4" : "mxfp4";
  if (in % group != 0) return Invalid(w, absl::StrCat(name, " needs in_features % ", group, " == 0"));
  if (w.weight_packed.dtype != DType::kU8) return Invalid(w, absl::StrCat(name, " weight_packed must be U8"));
  absl::Status s = CheckShape(w, w.weight_packed, "weight_packed", {out, in / 2});
  if (!s.ok()) return s;
  const DType scale_dtype = nv ? DType::kF8E4M3 : DType::kU8;
  if (w.weight_scale.dtype != scale_dtype) {
    return Invalid(w, nv ? "nvfp4 weight_scale must be F8_E4M3" : "mxfp4 weight_scale must be U8 (E8M0)");
  }
  s = CheckShape(w, w.weight_scale, "weight_scale", {out, in / group});
  if (!s.ok()) return s;
  if (nv) {
    if (!w.weight_global_scale.present() || w.weight_global_scale.dtype != DType::kF32 ||
        Elements(w.weight_global_scale) != 1) {
      return Invalid(w, "nvfp4 needs an F32 weight_global_scale of one element");
    }
    std::memcpy(&p->global_scale, w.weight_global_scale.data, sizeof(float));
  }
  if (dev.weight_packed == nullptr || dev.weight_scale == nullptr)
    return Invalid(w, "missing device tensors");
  p->values = dev.weight_packed;
  p->values_dtype = DType::kU8;
  p->values_cols = in / 2;
  p->scale = dev.weight_scale;
  p->scale_dtype = scale_dtype;
  p->scale_cols = in / group;
  p->group_size = group;
  p->strategy = QuantStrategy::kGroup;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DequantParams> MakeDequantParams(const StoredLinear& w, const DequantDevicePointers& dev) {
  DequantParams p;
  p.format = w.format;
  p.strategy = w.strategy;
  p.out_features = w.out_features;
  p.in_features = w.in_features;
  p.num_bits = w.num_bits;
  p.symmetric = w.symmetric;
  p.group_size = w.group_size;
  p.block_rows = w.block_rows;
  p.block_cols = w.block_cols;
  if (w.out_features < 0 || w.in_features < 0) return Invalid(w, "negative shape");
  const int64_t out = w.out_features, in = w.in_features;
  switch (w.format) {
    case WeightFormat::kDense: {
      if (!IsFloatDtype(w.weight.dtype)) return Invalid(w, "dense weight must be F32/F16/BF16");
      absl::Status s = CheckShape(w, w.weight, "weight", {out, in});
      if (!s.ok()) return s;
      if (dev.weight == nullptr) return Invalid(w, "no device copy of weight");
      p.values = dev.weight;
      p.values_dtype = w.weight.dtype;
      p.values_cols = in;
      return p;
    }
    case WeightFormat::kPackQuantized: {
      if (w.num_bits < 2 || w.num_bits > 8) return Invalid(w, "pack-quantized num_bits must be in [2, 8]");
      if (w.weight_packed.dtype != DType::kI32) return Invalid(w, "weight_packed must be I32");
      absl::Status s = CheckShape(w, w.weight_packed, "weight_packed", {out, CeilDiv(in * w.num_bits, 32)});
      if (!s.ok()) return s;
      absl::StatusOr<int64_t> groups = CheckIntScale(w);
      if (!groups.ok()) return groups.status();
      p.scale_cols = *groups;
      if (!w.symmetric) {
        if (w.weight_zero_point.dtype != DType::kI32) return Invalid(w, "weight_zero_point must be I32");
        const int64_t zp_rows = CeilDiv(out * w.num_bits, 32);
        if (Elements(w.weight_zero_point) != zp_rows * *groups) {
          return Invalid(w, "weight_zero_point must be [ceil(out * bits / 32), groups]");
        }
        if (dev.weight_zero_point == nullptr) return Invalid(w, "no device copy of weight_zero_point");
        p.zero_point = dev.weight_zero_point;
        p.zero_point_dtype = DType::kI32;
        p.zero_point_cols = *groups;
      }
      if (dev.weight_packed == nullptr || dev.weight_scale == nullptr)
        return Invalid(w, "missing device tensors");
      p.values = dev.weight_packed;
      p.values_dtype = DType::kI32;
      p.values_cols = w.weight_packed.shape[1];
      p.scale = dev.weight_scale;
      p.scale_dtype = w.weight_scale.dtype;
      break;
    }
    case WeightFormat::kNaiveQuantized: {
      if (w.weight.dtype != DType::kI8) return Invalid(w, "naive-quantized weight must be I8");
      absl::Status s = CheckShape(w, w.weight, "weight", {out, in});
      if (!s.ok()) return s;
      absl::StatusOr<int64_t> groups = CheckIntScale(w);
      if (!groups.ok()) return groups.status();
      p.scale_cols = *groups;
      if (w.weight_zero_point.present()) {
        if (w.weight_zero_point.dtype != DType::kI8 && w.weight_zero_point.dtype != DType::kI32) {
          return Invalid(w, "naive weight_zero_point must be I8/I32");
        }
        if (Elements(w.weight_zero_point) != Elements(w.weight_scale)) {
          return Invalid(w, "naive weight_zero_point must have the scale's shape");
        }
        if (dev.weight_zero_point == nullptr) return Invalid(w, "no device copy of weight_zero_point");
        p.zero_point = dev.weight_zero_point;
        p.zero_point_dtype = w.weight_zero_point.dtype;
        p.zero_point_cols = *groups;
      }
      if (dev.weight == nullptr || dev.weight_scale == nullptr) return Invalid(w, "missing device tensors");
      p.values = dev.weight;
      p.values_dtype = DType::kI8;
      p.values_cols = in;
      p.scale = dev.weight_scale;
      p.scale_dtype = w.weight_scale.dtype;
      break;
    }
    case WeightFormat::kNvfp4PackQuantized:
    case WeightFormat::kMxfp4PackQuantized: {
      absl::Status s = SetFp4Params(w, dev, &p);
      if (!s.ok()) return s;
      break;
    }
    case WeightFormat::kGgmlBlocks:
      return absl::UnimplementedError(absl::StrCat(
          w.module, ": GGUF blocks are not dequantized on the CUDA backend yet; use --backend=cpu"));
    case WeightFormat::kFloatQuantized: {
      if (w.weight.dtype != DType::kF8E4M3) return Invalid(w, "float-quantized weight must be F8_E4M3");
      absl::Status s = CheckShape(w, w.weight, "weight", {out, in});
      if (!s.ok()) return s;
      if (!IsFloatDtype(w.weight_scale.dtype)) return Invalid(w, "weight_scale must be F32/F16/BF16");
      const TensorView& sc = w.weight_scale;
      if (w.strategy == QuantStrategy::kTensor) {
        if (Elements(sc) != 1) return Invalid(w, "tensor-strategy weight_scale must hold one value");
      } else if (w.strategy == QuantStrategy::kChannel) {
        if (Elements(sc) != out) return Invalid(w, "channel-strategy weight_scale must be [out, 1]");
      } else if (w.strategy == QuantStrategy::kBlock) {
        if (w.block_rows <= 0 || w.block_cols <= 0) return Invalid(w, "block shape must be positive");
        s = CheckShape(w, sc, "weight_scale", {CeilDiv(out, w.block_rows), CeilDiv(in, w.block_cols)});
        if (!s.ok()) return s;
        p.scale_cols = sc.shape[1];
      } else {
        return Invalid(w, "float-quantized supports tensor, channel and block strategies");
      }
      if (dev.weight == nullptr || dev.weight_scale == nullptr) return Invalid(w, "missing device tensors");
      p.values = dev.weight;
      p.values_dtype = DType::kF8E4M3;
      p.values_cols = in;
      p.scale = dev.weight_scale;
      p.scale_dtype = sc.dtype;
      break;
    }
  }
  if (w.actorder_group &&
      (w.format == WeightFormat::kPackQuantized || w.format == WeightFormat::kNaiveQuantized)) {
    if (w.strategy != QuantStrategy::kGroup) return Invalid(w, "g_idx needs the group strategy");
    if (w.weight_g_idx.dtype != DType::kI32 || Elements(w.weight_g_idx) != in ||
        w.weight_g_idx.data == nullptr) {
      return Invalid(w, "weight_g_idx must be I32 [in]");
    }
    for (int64_t k = 0; k < in; ++k) {
      int32_t g;
      std::memcpy(&g, w.weight_g_idx.data + k * 4, sizeof(g));
      if (g < 0 || g >= p.scale_cols) {
        return Invalid(w, absl::StrCat("weight_g_idx[", k, "] = ", g, " outside [0, ", p.scale_cols, ")"));
      }
    }
    if (dev.weight_g_idx == nullptr) return Invalid(w, "no device copy of weight_g_idx");
    p.g_idx = static_cast<const int32_t*>(dev.weight_g_idx);
  }
  return p;
}

}  // namespace scored::kernels

// gpt-oss's MXFP4 expert tensors as the existing MXFP4 linears (WeightFormat::kMxfp4PackQuantized), so the
// exact host decoding (LinearWeight::DequantizeRows), the CPU reference and the dequant kernel read them
// unchanged. The loader (weights_loader.cc LoadGptOssExperts) calls this once per MoE layer.
//
// The checkpoint (transformers 5.17 integrations/mxfp4.py `_convert_moe_packed_tensors`, the official
// gpt-oss releases), per MoE layer `<experts>` = "model.layers.L.mlp.experts", E experts, I =
// intermediate_size, H = hidden_size:
//   <experts>.gate_up_proj_blocks  U8 [E, 2I, H/32, 16]   <experts>.gate_up_proj_scales  U8 [E, 2I, H/32]
//   <experts>.down_proj_blocks     U8 [E, H, I/32, 16]    <experts>.down_proj_scales     U8 [E, H, I/32]
// Rows are output features ([out, in]-major); a row's 16-byte blocks are its 32-element groups, each byte two
// FP4 E2M1 values, the low nibble the even element; each group has one E8M0 scale byte s: value =
// e2m1(nibble) * 2^(s - 127). That is bit for bit compressed-tensors' mxfp4-pack-quantized linear
// (weight_packed U8 [out, in/2], weight_scale U8 [out, in/32]) once a [E, rows, G, 16] tensor is read as E
// matrices [rows, G * 16]. gate and up are interleaved by rows: gate = rows 0, 2, 4, ... of an expert's 2I
// rows, up = rows 1, 3, 5, ... (GptOssExperts._apply_gate takes gate_up[..., ::2] and [..., 1::2] of the
// [E, H, 2I] parameter transformers transposes the decoded [E, 2I, H] to).
//
// Thread-safety: pure functions over immutable views.
#ifndef SCORED_ENGINE_MODEL_GPT_OSS_MXFP4_H_
#define SCORED_ENGINE_MODEL_GPT_OSS_MXFP4_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/safetensors.h"
#include "engine/model/toolkit_quant.h"  // TranscodedBuffers
#include "engine/model/weights.h"

namespace scored {

// quantization_config (its JSON text) is gpt-oss's own: quant_method "mxfp4" (transformers' Mxfp4Config; the
// experts' blocks below, every other module dense: modules_to_not_convert).
bool IsGptOssMxfp4Config(std::string_view quantization_config_json);

// The four stored tensors of one layer's experts.
struct GptOssMxfp4Tensors {
  std::string module;         // "<experts>", e.g. "model.layers.0.mlp.experts": names the LinearWeights
  TensorView gate_up_blocks;  // U8 [E, 2I, H/32, 16]
  TensorView gate_up_scales;  // U8 [E, 2I, H/32]
  TensorView down_blocks;     // U8 [E, H, I/32, 16]
  TensorView down_scales;     // U8 [E, H, I/32]
};

// The four tensors `<experts>.{gate_up_proj,down_proj}_{blocks,scales}` of `store`, unchecked (see
// SplitGptOssMxfp4Experts). NOT_FOUND naming the first absent tensor.
absl::StatusOr<GptOssMxfp4Tensors> GetGptOssMxfp4Tensors(const TensorStore& store,
                                                         const std::string& experts_module);

// Expert e's three linears, e in [0, num_experts), each a kMxfp4PackQuantized LinearWeight (4 bits,
// symmetric, strategy kGroup, group_size 32, no transforms, no bias) named "<experts>.<e>.gate_proj",
// ".up_proj", ".down_proj" (MoeWeights' per-expert module names):
//   gate_proj [I, H]: rows 0::2 of expert e's gate_up rows    } weight_packed U8 [I, H/2], weight_scale U8
//   up_proj   [I, H]: rows 1::2                               } [I, H/32], both copied into `buffers`
//   down_proj [H, I]: expert e's slice of down_proj, viewed in place: weight_packed U8 [H, I/2] and
//                     weight_scale U8 [H, I/32] point into the checkpoint's bytes
// DequantizeRows of each then gives exactly transformers' convert_moe_packed_tensors values (float32, and the
// bfloat16 it loads with, widened: every value is exact in both), transposed: gate_proj = gate_up_proj[e, :,
// 0::2]^T, up_proj = gate_up_proj[e, :, 1::2]^T, down_proj = down_proj[e]^T.
//
// Ownership: the gate / up copies are appended to `buffers` (4 per call, one per tensor and half, each
// holding every expert), which must outlive the returned weights (ModelWeights keeps its transcoded_ so);
// down's views and every view's `file` point into `tensors`' storage (the mmapped checkpoint), which must
// too. Only the copies are read for gate / up afterwards: a caller may drop the gate_up tensors' resident
// pages (TensorStore::ReleaseResidentPages). Nothing is appended when an error is returned.
//
// Refused with INVALID_ARGUMENT naming the module or the tensor (its file and name): num_experts < 1,
// intermediate_size or hidden_size not a positive multiple of 32; a tensor absent, of a dtype other than U8,
// of a shape other than the one above (blocks' last dimension 16, scales the blocks' shape without it) or
// whose byte count disagrees with its shape; an E8M0 scale of 255 (the format's NaN code; decoded it would
// make its group infinite or NaN), naming the flat index into that scales tensor, as the loader's
// CheckE8M0Scales does for compressed-tensors' mxfp4.
absl::StatusOr<std::vector<ExpertWeights>> SplitGptOssMxfp4Experts(const GptOssMxfp4Tensors& tensors,
                                                                   int64_t num_experts,
                                                                   int64_t intermediate_size,
                                                                   int64_t hidden_size,
                                                                   TranscodedBuffers* buffers);

}  // namespace scored

#endif  // SCORED_ENGINE_MODEL_GPT_OSS_MXFP4_H_

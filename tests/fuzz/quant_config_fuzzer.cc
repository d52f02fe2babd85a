// Fuzzes compressed-tensors quantization_config parsing (ParseCompressedTensorsConfig) and the per-module
// scheme resolution (ResolveModuleScheme) on the module names of a Llama/Qwen model.
//
// Contract checked (engine/model/compressed_tensors.h): any text gives a config or INVALID_ARGUMENT; every
// resolved scheme of an accepted config is one the loader and DequantizeRows can use without further
// checks: a known format, 2..8 bits, group_size > 0 for group strategies, block sizes > 0 for block,
// actorder only with pack-quantized group strategy; errors are INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/model/compressed_tensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr const char* kModules[] = {
    "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj",
    "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.gate_proj",    "model.layers.0.mlp.up_proj",
    "model.layers.0.mlp.down_proj",    "model.layers.31.mlp.down_proj",   "lm_head",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::ModuleScheme;
  using scored::QuantStrategy;
  using scored::WeightFormat;
  using scored::fuzz::CodeIsOneOf;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<scored::CompressedTensorsConfig> c =
      scored::ParseCompressedTensorsConfig(text, "fuzz/config.json");
  if (!c.ok()) {
    FUZZ_CHECK(CodeIsOneOf(c.status(), absl::StatusCode::kInvalidArgument), c.status().ToString());
    return 0;
  }
  for (const char* module : kModules) {
    absl::StatusOr<ModuleScheme> s = scored::ResolveModuleScheme(*c, module);
    if (!s.ok()) {
      FUZZ_CHECK(CodeIsOneOf(s.status(), absl::StatusCode::kInvalidArgument), s.status().ToString());
      continue;
    }
    if (!s->quantized) continue;
    const std::string what = std::string(module) + " in group " + s->group;
    switch (s->format) {
      case WeightFormat::kDense:
        break;
      case WeightFormat::kPackQuantized:
        FUZZ_CHECK(s->num_bits >= 2 && s->num_bits <= 8, what);
        FUZZ_CHECK(s->strategy != QuantStrategy::kBlock, what);
        FUZZ_CHECK(s->symmetric || s->strategy != QuantStrategy::kTensor, what);
        break;
      case WeightFormat::kNvfp4PackQuantized:
        FUZZ_CHECK(s->num_bits == 4 && s->group_size == 16 && s->symmetric, what);
        break;
      case WeightFormat::kMxfp4PackQuantized:
        FUZZ_CHECK(s->num_bits == 4 && s->group_size == 32 && s->symmetric, what);
        FUZZ_CHECK(!s->w8a8_dynamic_fp8 && !s->w8a8_dynamic_int8, what);  // MXFP4A16 only
        break;
      case WeightFormat::kFloatQuantized:
        FUZZ_CHECK(s->num_bits == 8 && s->symmetric && s->strategy != QuantStrategy::kGroup, what);
        break;
      case WeightFormat::kNaiveQuantized:  // int8, or 2..7-bit ints one per int8 (W4AFP8 / W4A8)
        FUZZ_CHECK(s->num_bits >= 2 && s->num_bits <= 8 && s->strategy != QuantStrategy::kBlock, what);
        break;
      case WeightFormat::kGgmlBlocks:  // GGUF files only: no compressed-tensors config resolves to it
        FUZZ_CHECK(false, what);
        break;
    }
    if (s->strategy == QuantStrategy::kGroup) FUZZ_CHECK(s->group_size > 0, what);
    if (s->strategy == QuantStrategy::kBlock) FUZZ_CHECK(s->block_rows > 0 && s->block_cols > 0, what);
    if (s->actorder_group) {
      FUZZ_CHECK(s->format == WeightFormat::kPackQuantized && s->strategy == QuantStrategy::kGroup, what);
    }
    // Dynamic FP8 activations: FP8 weights (W8A8), or int weights below 8 bits (W4AFP8).
    if (s->w8a8_dynamic_fp8) {
      FUZZ_CHECK(s->format == WeightFormat::kFloatQuantized || ((s->format == WeightFormat::kNaiveQuantized ||
                                                                 s->format == WeightFormat::kPackQuantized) &&
                                                                s->num_bits < 8),
                 what);
    }
    if (s->w8a8_dynamic_fp8) FUZZ_CHECK(s->act_group_size >= 0, what);
    // INT8 activations: int8 weights (int-quantized / naive, W8A8) or int weights below 8 bits (W4A8), never
    // together with FP8 activations.
    if (s->w8a8_dynamic_int8) {
      FUZZ_CHECK((s->format == WeightFormat::kNaiveQuantized ||
                  (s->format == WeightFormat::kPackQuantized && s->num_bits < 8)) &&
                     !s->w8a8_dynamic_fp8,
                 what);
    }
  }
  return 0;
}

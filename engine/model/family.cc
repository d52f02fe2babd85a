// The model family table (contract: family.h).
#include "engine/model/family.h"

#include <iterator>

namespace scored {
namespace {

// One entry per supported architecture. The defaults are the transformers config classes' defaults.
constexpr FamilyTraits kFamilies[] = {
    {
        /*architecture=*/"LlamaForCausalLM",
        /*model_type=*/"llama",
        /*default_max_position_embeddings=*/2048,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
    },
    {
        /*architecture=*/"MistralForCausalLM",
        /*model_type=*/"mistral",
        /*default_max_position_embeddings=*/4096 * 32,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kWindowField,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
    },
    {
        /*architecture=*/"Qwen2ForCausalLM",
        /*model_type=*/"qwen2",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kQkvAlways,
        /*qk_norm=*/false,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
    },
    {
        /*architecture=*/"Qwen3ForCausalLM",
        /*model_type=*/"qwen3",
        /*default_max_position_embeddings=*/32768,
        /*attention_bias=*/AttentionBiasPolicy::kNoneOrRejected,
        /*qk_norm=*/true,
        /*rope_scalings=*/kAllRopeTypes,
        /*tie_word_embeddings_default=*/false,
        /*sliding_window=*/SlidingWindowPolicy::kUseSlidingWindowFlag,
        /*tensor_parallel=*/true,
        /*names=*/kLlamaTensorNames,
        /*checkpoint=*/kHfSafetensorsCheckpoint,
    },
};

}  // namespace

const FamilyTraits* FindFamily(std::string_view architecture) {
  for (const FamilyTraits& f : kFamilies) {
    if (architecture == f.architecture) return &f;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const FamilyTraits& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.architecture;
  }
  return out;
}

FamilyList AllFamilies() { return {std::begin(kFamilies), std::end(kFamilies)}; }

}  // namespace scored

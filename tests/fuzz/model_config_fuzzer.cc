// Fuzzes config.json parsing (ParseModelConfig) and, for every config it accepts, the whole weight loader
// (ModelWeights::Load) on that config next to the real stories260K model.safetensors.
//
// Contract checked (engine/model/config.h, weights.h): any text gives a ModelConfig whose sizes are
// positive, head_dim even, num_attention_heads a multiple of num_key_value_heads, or INVALID_ARGUMENT;
// loading never crashes, whatever the config says (sizes that do not match the tensors, absurd layer
// counts, quantization_config) — it returns an error naming the problem instead.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A folder holding a symlink to the real stories260K weights; config.json is rewritten per input.
const std::string& ModelDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(scored::fuzz::ScratchDir() + "/model");
    FUZZ_CHECK(mkdir(d->c_str(), 0700) == 0, *d);
    const std::string weights = scored::fuzz::DataPath("stories260K-hf/model.safetensors");
    FUZZ_CHECK(symlink(weights.c_str(), (*d + "/model.safetensors").c_str()) == 0, weights);
    return d;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using scored::fuzz::CodeIsOneOf;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<scored::ModelConfig> c = scored::ParseModelConfig(text, "fuzz/config.json");
  if (!c.ok()) {
    FUZZ_CHECK(CodeIsOneOf(c.status(), absl::StatusCode::kInvalidArgument), c.status().ToString());
    return 0;
  }
  FUZZ_CHECK(c->hidden_size > 0 && c->intermediate_size > 0 && c->num_layers > 0, "sizes");
  FUZZ_CHECK(c->num_heads > 0 && c->num_kv_heads > 0 && c->num_heads % c->num_kv_heads == 0, "heads");
  FUZZ_CHECK(c->head_dim > 0 && c->head_dim % 2 == 0, "head_dim");
  FUZZ_CHECK(c->vocab_size > 0 && c->max_position_embeddings > 0, "vocab / positions");
  FUZZ_CHECK(c->rms_norm_eps > 0.0 && c->rope_theta > 0.0, "eps / theta");
  FUZZ_CHECK(c->sliding_window >= 0 && c->sliding_window < c->max_position_embeddings, "sliding_window");
  FUZZ_CHECK(c->has_quantization_config == !c->quantization_config_json.empty(), "quantization_config");

  const std::string& dir = ModelDir();
  FUZZ_CHECK(scored::fuzz::WriteFile(dir + "/config.json", text), dir);
  absl::StatusOr<std::unique_ptr<scored::ModelWeights>> w = scored::ModelWeights::Load(dir);
  if (!w.ok()) {
    FUZZ_CHECK(CodeIsOneOf(w.status(), absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound),
               w.status().ToString());
    return 0;
  }
  FUZZ_CHECK((*w)->layers().size() == static_cast<size_t>(c->num_layers), "layer count");
  return 0;
}

#include "engine/model/config.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kData = SCORED_DATA_DIR;
const std::string kConfigs = kData + "/models-configs";

TEST(ConfigTest, Stories260K) {
  auto c = LoadModelConfig(kData + "/stories260K-hf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->num_layers, 5);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_FALSE(c->has_quantization_config);
  EXPECT_EQ(c->sliding_window, 0);
}

TEST(ConfigTest, Llama2_7B) {
  auto c = LoadModelConfig(kConfigs + "/llama-2-7b-hf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 11008);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_EQ(c->head_dim, 128);  // derived: 4096 / 32
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
}

TEST(ConfigTest, Llama3_8BInstruct) {
  auto c = LoadModelConfig(kConfigs + "/meta-llama-3-8b-instruct");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_id, 128001);
}

TEST(ConfigTest, Llama32_1BInstructLlama3RopeAndEosList) {
  auto c = LoadModelConfig(kConfigs + "/llama-3.2-1b-instruct");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_layers, 16);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, "float16");
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_EQ(c->eos_token_id, 128001);  // first of [128001, 128008, 128009]
}

TEST(ConfigTest, DeepSeekR1DistillLlama8B) {
  auto c = LoadModelConfig(kConfigs + "/deepseek-r1-distill-llama-8b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->num_layers, 32);
}

TEST(ConfigTest, TinyLlamaNewerDtypeKey) {
  auto c = LoadModelConfig(kConfigs + "/tinyllama-1.1b-chat-v1.0");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->torch_dtype, "float32");  // spelled "dtype" in this file
  EXPECT_EQ(c->num_layers, 22);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->intermediate_size, 5632);
}

TEST(ConfigTest, Qwen25HasQkvBias) {
  auto c = LoadModelConfig(kConfigs + "/qwen2.5-0.5b-instruct");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->hidden_size, 896);
  EXPECT_EQ(c->num_heads, 14);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->rope_theta, 1000000.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window: false
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_EQ(c->eos_token_id, 151645);
}

TEST(ConfigTest, CompressedTensorsConfigsKeepQuantizationJson) {
  auto sparse = LoadModelConfig(kConfigs + "/compressed-tensors/llama2.c-stories42M-pruned2.4-compressed");
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_TRUE(sparse->has_quantization_config);
  EXPECT_THAT(sparse->quantization_config_json, HasSubstr("sparse-24-bitmask"));
  EXPECT_EQ(sparse->hidden_size, 512);
  EXPECT_TRUE(sparse->tie_word_embeddings);
}

// Every real config.json-like file in the data folder parses (older compressed-tensors exports name the
// section compression_config).
TEST(ConfigTest, FloatQuantizedTinyLlamaConfigs) {
  for (const char* f : {"fp8-config.json", "fp8-default-config.json", "fp8-default-kv_config.json"}) {
    const std::string path = kConfigs + "/compressed-tensors/TinyLlama-1.1B-Chat-v1.0-fp8/" + f;
    FILE* fp = fopen(path.c_str(), "rb");
    ASSERT_NE(fp, nullptr) << path;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) text.append(buf, n);
    fclose(fp);
    auto c = ParseModelConfig(text, path);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->has_quantization_config) << f;
    EXPECT_THAT(c->quantization_config_json, HasSubstr("float-quantized")) << f;
    EXPECT_EQ(c->torch_dtype, "bfloat16");
    EXPECT_EQ(c->num_layers, 22);
  }
}

constexpr char kBase[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 8,
  "num_key_value_heads": 4, "vocab_size": 512, "hidden_act": "silu" %s })";

std::string With(const std::string& extra) {
  std::string s = kBase;
  const size_t pos = s.find("%s");
  return s.replace(pos, 2, extra.empty() ? "" : ", " + extra);
}

TEST(ConfigTest, MinimalDefaults) {
  auto c = ParseModelConfig(With(""), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_id, -1);
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ConfigTest, RopeVariants) {
  auto lin = ParseModelConfig(With(R"("rope_scaling": {"type": "linear", "factor": 2.0})"), "mem");
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ(lin->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(lin->rope_scaling.factor, 2.0);
  // Newer files: rope_theta (and the scaling) inside rope_parameters.
  auto params = ParseModelConfig(
      With(R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
      "mem");
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->rope_theta, 500000.0);
  EXPECT_EQ(params->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(params->rope_scaling.factor, 8.0);
  auto dflt =
      ParseModelConfig(With(R"("rope_parameters": {"rope_theta": 1e6, "rope_type": "default"})"), "mem");
  ASSERT_TRUE(dflt.ok()) << dflt.status();
  EXPECT_EQ(dflt->rope_theta, 1e6);
  EXPECT_EQ(dflt->rope_scaling.type, RopeType::kDefault);
}

// --max_seq_len against the trained context: 0 is max_position_embeddings; one more is still served (the
// last id is only a target); past that only with --allow_long_context, and the refusal names the RoPE.
TEST(ConfigTest, ServedContextLengthStopsAtTheTrainedContext) {
  auto c = ParseModelConfig(With(R"("rope_scaling": {"type": "linear", "factor": 2.0})"), "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(*ServedContextLength(*c, 0, false), 2048);
  EXPECT_EQ(*ServedContextLength(*c, 100, false), 100);
  EXPECT_EQ(*ServedContextLength(*c, 2049, false), 2049);
  const absl::StatusOr<int64_t> past = ServedContextLength(*c, 2050, false);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* part : {"--max_seq_len 2050", "max_position_embeddings 2048",
                           "rope_scaling linear factor 2", "at most 2049 ids", "--allow_long_context"}) {
    EXPECT_NE(past.status().message().find(part), std::string::npos) << part << " in " << past.status();
  }
  EXPECT_EQ(*ServedContextLength(*c, 16384, true), 16384);
  auto plain = ParseModelConfig(With(""), "mem");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(DescribeRope(*plain), "rope_theta 10000, no rope_scaling");
}

TEST(ConfigTest, Qwen3QkNormAndMistralWindow) {
  std::string q3 = With(R"("head_dim": 16)");
  q3.replace(q3.find("LlamaForCausalLM"), 16, "Qwen3ForCausalLM");
  q3.replace(q3.find("\"llama\""), 7, "\"qwen3\"");
  auto c = ParseModelConfig(q3, "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 16);

  std::string m = With(R"("sliding_window": 4096, "max_position_embeddings": 32768)");
  m.replace(m.find("LlamaForCausalLM"), 16, "MistralForCausalLM");
  m.replace(m.find("\"llama\""), 7, "\"mistral\"");
  auto mc = ParseModelConfig(m, "mem");
  ASSERT_TRUE(mc.ok()) << mc.status();
  EXPECT_EQ(mc->sliding_window, 4096);
  EXPECT_EQ(mc->max_position_embeddings, 32768);
}

struct BadCase {
  const char* name;
  std::string json;
  const char* expect;  // substring of the message
};

TEST(ConfigTest, BadConfigsFailNamingTheProblem) {
  std::string arch = With("");
  arch.replace(arch.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
  const BadCase cases[] = {
      {"malformed", "{\"architectures\": [", "malformed JSON"},
      {"arch", arch, "GPT2LMHeadModel"},
      // Duplicate keys: the later value wins (nlohmann), so these override the base.
      {"act", With(R"("hidden_act": "gelu")"), "gelu"},
      {"rope", With(R"("rope_scaling": {"rope_type": "dynamic", "factor": 4.0})"), "dynamic"},
      {"rope_missing_type", With(R"("rope_scaling": {"factor": 4.0})"), "rope_type"},
      {"llama3_missing", With(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
       "low_freq_factor"},
      {"dtype", With(R"("torch_dtype": "float64")"), "float64"},
      {"gqa", With(R"("num_key_value_heads": 3)"), "num_key_value_heads"},
      {"mlp_bias", With(R"("mlp_bias": true)"), "mlp_bias"},
      {"negative", With(R"("rms_norm_eps": -1)"), "rms_norm_eps"},
      {"type", With(R"("rope_theta": "big")"), "rope_theta"},
      {"bos", With(R"("bos_token_id": "x")"), "bos_token_id"},
      {"quant_type", With(R"("quantization_config": 3)"), "quantization_config"},
  };
  for (const BadCase& bc : cases) {
    auto c = ParseModelConfig(bc.json, "bad.json");
    ASSERT_FALSE(c.ok()) << bc.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(bc.expect)) << bc.name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("bad.json")) << bc.name;
  }
  // Qwen2 with sliding window in use.
  std::string q2 = With(R"("use_sliding_window": true)");
  q2.replace(q2.find("LlamaForCausalLM"), 16, "Qwen2ForCausalLM");
  q2.replace(q2.find("\"llama\""), 7, "\"qwen2\"");
  auto c = ParseModelConfig(q2, "bad.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("use_sliding_window"));
  // Missing file.
  EXPECT_EQ(LoadModelConfig("/nonexistent-dir").status().code(), absl::StatusCode::kNotFound);
}

// Qwen3.5 (Qwen3_5TextConfig): layer_types, or every full_attention_interval-th layer full (default 4);
// partial_rotary_factor 0.25 by default; linear_* dimensions with the class defaults; refusals name the
// field.
TEST(ConfigTest, Qwen35LayerTypesAndDeltaNetFields) {
  const std::string base = R"({"architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 32, "vocab_size": 512)";
  auto c = ParseModelConfig(base + "}", "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->linear_attention_layers,
            (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c->rotary_dim, 8);  // int(32 * 0.25)
  EXPECT_EQ(c->linear_num_key_heads, 16);
  EXPECT_EQ(c->linear_num_value_heads, 32);
  EXPECT_EQ(c->linear_key_head_dim, 128);
  EXPECT_EQ(c->linear_conv_kernel_dim, 4);
  EXPECT_TRUE(c->gemma_norm);
  EXPECT_TRUE(c->attention_output_gate);
  c = ParseModelConfig(base + R"(, "full_attention_interval": 2, "partial_rotary_factor": 0.5})",
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->linear_attention_layers,
            (std::vector<bool>{true, false, true, false, true, false, true, false}));
  EXPECT_EQ(c->rotary_dim, 16);
  c = ParseModelConfig(base + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
      "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true}})",
                       "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->rotary_dim, 8);
  const BadCase bad[] = {
      {"type",
       base + R"(, "num_hidden_layers": 2, "layer_types": ["linear_attention", "sliding_attention"]})",
       "layer_types[1]"},
      {"count", base + R"(, "layer_types": ["full_attention"]})", "layer_types"},
      {"heads", base + R"(, "linear_num_key_heads": 3})", "linear_num_value_heads"},
  };
  for (const BadCase& bc : bad) {
    auto r = ParseModelConfig(bc.json, "bad.json");
    ASSERT_FALSE(r.ok()) << bc.name;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bc.expect)) << bc.name;
  }
}

// attention_bias: true is LlamaAttention's bias on q, k, v and o_proj (bias=config.attention_bias on all
// four); Mistral's attention linears have none (bias=False), so there it is refused, naming what is
// supported.
TEST(ConfigTest, AttentionBiasPutsBiasesOnQkvAndOProj) {
  auto llama = ParseModelConfig(With(R"("attention_bias": true)"), "config.json");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_TRUE(llama->attention_bias);
  EXPECT_TRUE(llama->o_proj_bias);
  auto plain = ParseModelConfig(With(""), "config.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->attention_bias);
  EXPECT_FALSE(plain->o_proj_bias);
  std::string mistral = With(R"("attention_bias": true)");
  mistral.replace(mistral.find("LlamaForCausalLM"), 16, "MistralForCausalLM");
  mistral.replace(mistral.find("\"llama\""), 7, "\"mistral\"");
  auto c = ParseModelConfig(mistral, "bad.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("attention_bias: true for MistralForCausalLM"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("supported: attention_bias true for Llama"));
}

}  // namespace
}  // namespace scored

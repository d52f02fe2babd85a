// Loads every quantized fixture under tests/fixtures (real llm-compressor output) and checks each
// quantized linear's decode against reference_dequant.json, which holds the sha256 of the float32
// weights compressed-tensors itself decompressed (plus sums and the first values of row 0). The hash
// comparison is bit-exact: any difference in any element fails.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/base/sha256.h"
#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

const std::string kFixtures = SCORED_FIXTURES_DIR;

std::vector<std::string> FixtureDirs() {
  std::vector<std::string> out;
  DIR* d = opendir(kFixtures.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name[0] == '.') continue;
    std::ifstream cfg(kFixtures + "/" + name + "/config.json");
    // Dense (unquantized) fixtures, the bf16 mixture-of-experts ones, have nothing to decode here.
    if (cfg.good() && nlohmann::json::parse(cfg).contains("quantization_config")) out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The decoder linears of a layer: attention, then the dense MLP or (sparse layers) every expert and the
// shared expert. Routers and the shared-expert gate are left out (dense in every fixture).
std::vector<const LinearWeight*> DecoderLinears(const LayerWeights& L) {
  std::vector<const LinearWeight*> out = {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj};
  if (!L.sparse) {
    out.insert(out.end(), {&L.gate_proj, &L.up_proj, &L.down_proj});
    return out;
  }
  for (const ExpertWeights& e : L.moe.experts)
    out.insert(out.end(), {&e.gate_proj, &e.up_proj, &e.down_proj});
  const ExpertWeights& sh = L.moe.shared_expert;
  if (!sh.gate_proj.module.empty()) out.insert(out.end(), {&sh.gate_proj, &sh.up_proj, &sh.down_proj});
  return out;
}

const LinearWeight* FindLinear(const ModelWeights& m, const std::string& module) {
  if (module == "lm_head") return &m.lm_head();
  for (const LayerWeights& L : m.layers()) {
    for (const LinearWeight* w : DecoderLinears(L)) {
      if (w->module == module) return w;
    }
  }
  return nullptr;
}

// The linears that hold the stored module `module`: itself, or for a fused module (Phi-3's qkv_proj /
// gate_up_proj) the loader's row views "<module>[q]", "[k]", ... in row order. Empty when none does.
std::vector<const LinearWeight*> StoredModuleParts(const ModelWeights& m, const std::string& module) {
  if (const LinearWeight* lw = FindLinear(m, module)) return {lw};
  std::vector<const LinearWeight*> parts;
  for (const LayerWeights& L : m.layers()) {
    for (const LinearWeight* w : DecoderLinears(L)) {
      if (absl::StartsWith(w->module, module + "[")) parts.push_back(w);
    }
  }
  return parts;
}

class FixturesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixturesTest, LoadsAndDecodesBitExactly) {
  const std::string dir = kFixtures + "/" + GetParam();
  auto m = ModelWeights::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelWeights& w = **m;
  const ModelConfig& c = w.config();
  EXPECT_TRUE(c.has_quantization_config);
  ASSERT_EQ(static_cast<int64_t>(w.layers().size()), c.num_layers);
  EXPECT_EQ(w.embed_tokens().shape, (std::vector<int64_t>{c.vocab_size, c.hidden_size}));
  // A 2:4 sparse fixture without quantization (llama-sparse24) has dense (decompressed) decoder linears.
  std::ifstream sparsity_in(dir + "/config.json");
  const nlohmann::json quantization = nlohmann::json::parse(sparsity_in)["quantization_config"];
  const bool sparsity_only = quantization.value("quant_method", "") == "compressed-tensors" &&
                             !quantization.contains("config_groups");
  for (const LayerWeights& L : w.layers()) {
    if (L.linear_attention) {  // Qwen3.5's Gated DeltaNet layers: no q / k / v / o, every projection
                               // quantized
      const DeltaNetWeights& d = L.delta_net;
      EXPECT_TRUE(L.q_proj.module.empty());
      EXPECT_EQ(d.in_proj_qkv.out_features, 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                                                c.linear_num_value_heads * c.linear_value_head_dim);
      for (const LinearWeight* p : {&d.in_proj_qkv, &d.in_proj_z, &d.in_proj_b, &d.in_proj_a, &d.out_proj}) {
        EXPECT_NE(p->format, WeightFormat::kDense) << p->module;
      }
      EXPECT_TRUE(d.conv1d.present() && d.a_log.present() && d.dt_bias.present() && d.norm.present());
      EXPECT_EQ(L.down_proj.in_features, c.intermediate_size);
      continue;
    }
    if (L.latent_attention) {  // DeepSeek-V3's multi-head latent attention: every projection quantized
      const LatentAttentionWeights& a = L.latent;
      EXPECT_TRUE(L.k_proj.module.empty());
      EXPECT_EQ(a.kv_a_proj.out_features, c.kv_lora_rank + c.qk_rope_head_dim);
      EXPECT_EQ(a.kv_b_proj.in_features, c.kv_lora_rank);
      for (const LinearWeight* p : {&a.q_a_proj, &a.q_b_proj, &a.kv_a_proj, &a.kv_b_proj, &L.o_proj}) {
        EXPECT_NE(p->format, WeightFormat::kDense) << p->module;
      }
      EXPECT_TRUE(a.q_a_layernorm.present() && a.kv_a_layernorm.present());
      continue;
    }
    // Qwen3.5's gated attention: q_proj holds [q_h | gate_h] per head.
    // Gemma 4's full layers have their own head_dim and kv heads (LayerHeadDim / LayerKvHeads).
    const int64_t l = &L - &w.layers()[0];
    EXPECT_EQ(L.q_proj.out_features, c.num_heads * c.LayerHeadDim(l) * (c.attention_output_gate ? 2 : 1));
    EXPECT_EQ(L.k_proj.out_features, c.LayerKvHeads(l) * c.LayerHeadDim(l));
    EXPECT_EQ(L.k_eq_v, c.attention_k_eq_v && c.LayerWindow(l) == 0);
    EXPECT_EQ(L.v_proj.module.empty(), L.k_eq_v);
    EXPECT_EQ(L.layer_scalar.present(), c.model_type == "gemma4_text");
    if (L.sparse) {
      ASSERT_EQ(static_cast<int64_t>(L.moe.experts.size()), c.num_experts);
      EXPECT_EQ(L.moe.experts.back().down_proj.in_features, c.moe_intermediate_size);
      EXPECT_EQ(L.moe.router.format, WeightFormat::kDense)
          << "llm-compressor's MoE recipes ignore the router";
      EXPECT_NE(L.moe.experts[0].gate_proj.format, WeightFormat::kDense) << "experts are quantized";
    } else {
      EXPECT_EQ(L.down_proj.in_features, c.intermediate_size);
    }
    // ModelOpt NVFP4 modules whose weight_scale_2 has no exact divisor are decoded to dense BF16 at load.
    // gpt-oss's original MXFP4 quantizes the experts only (its attention stays dense) and has q/k/v and
    // o_proj biases.
    const bool gpt_oss = c.model_type == "gpt_oss";
    if (!sparsity_only && GetParam() != "llama-modelopt-nvfp4" && !gpt_oss) {
      EXPECT_NE(L.q_proj.format, WeightFormat::kDense) << "decoder linears of a fixture are quantized";
    }
    const bool llama_bias = GetParam() == "llama-attn-bias-w4a16-g128";  // attention_bias: q/k/v and o_proj
    const bool glm = c.model_type == "glm4_moe";  // q/k/v bias and q/k norm as its config says (both here)
    EXPECT_EQ(L.q_proj.bias.present(), c.model_type == "qwen2" || c.model_type == "qwen2_moe" || llama_bias ||
                                           (glm && c.attention_bias) || gpt_oss);
    EXPECT_EQ(L.o_proj.bias.present(), llama_bias || gpt_oss);
    EXPECT_EQ(L.sinks.present(), gpt_oss);
    EXPECT_EQ(L.q_norm.present(), c.model_type == "qwen3" || c.model_type == "qwen3_moe" ||
                                      c.model_type == "gemma3_text" || c.model_type == "gemma3" ||
                                      c.model_type == "qwen3_5_text" || c.model_type == "gemma4_text" ||
                                      (glm && c.qk_norm));
  }
  const ModelSummary& s = w.summary();
  // A fixture that keeps some decoder linears dense (stories260k-nvfp4a16's down_proj, 172 inputs: not a
  // multiple of NVFP4's group of 16) averages their F32 32 bits in.
  std::ifstream config_in(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(config_in);
  bool dense_decoder_linears = false;
  for (const auto& ignored : config["quantization_config"].value("ignore", nlohmann::json::array())) {
    dense_decoder_linears |= ignored.get<std::string>().find("layers.") != std::string::npos;
  }
  if (sparsity_only) {
    EXPECT_EQ(s.bits_per_weight_decoder, 16.0) << "2:4 sparse BF16 weights are resident dense";
  } else {
    EXPECT_GT(s.bits_per_weight_decoder, 3.9);
    EXPECT_LT(s.bits_per_weight_decoder, dense_decoder_linears ? 16.0 : 9.0);
  }
  // llama-sparse24-w4a16's sparsity_config is format "dense" (2:4 zeros in ordinary packed weights).
  if (config["quantization_config"].value("sparsity_config", nlohmann::json::object()).value("format", "") ==
      "sparse-24-bitmask") {
    EXPECT_THAT(s.notes, ::testing::HasSubstr("sparse-24-bitmask"));
  }
  EXPECT_FALSE(s.format.empty());
  EXPECT_THAT(s.ToString(), ::testing::HasSubstr(s.format));

  std::ifstream in(dir + "/reference_dequant.json");
  if (!in.good()) GTEST_SKIP() << GetParam() << " has no reference_dequant.json (load checked only)";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json ref = nlohmann::json::parse(ss.str());
  int checked = 0;
  for (const auto& [module, r] : ref.at("modules").items()) {
    const std::vector<const LinearWeight*> parts = StoredModuleParts(w, module);
    ASSERT_FALSE(parts.empty()) << module;
    std::vector<float> values;
    for (const LinearWeight* lw : parts) {  // a fused module: its views' rows, in order
      ASSERT_EQ(r.at("shape")[1].get<int64_t>(), lw->in_features) << module;
      std::vector<float> rows(static_cast<size_t>(lw->NumElements()));
      ASSERT_TRUE(lw->DequantizeRows(0, lw->out_features, rows.data()).ok());
      values.insert(values.end(), rows.begin(), rows.end());
    }
    ASSERT_EQ(r.at("shape")[0].get<int64_t>() * r.at("shape")[1].get<int64_t>(),
              static_cast<int64_t>(values.size()))
        << module;
    double sum = 0.0, sum_abs = 0.0;
    for (float v : values) {
      sum += v;
      sum_abs += std::fabs(v);
    }
    // Sums are compared loosely (summation order differs from numpy's pairwise sum); the hash is exact.
    EXPECT_NEAR(sum, r.at("sum_f64").get<double>(), 1e-9 * r.at("sum_abs_f64").get<double>()) << module;
    const auto& first = r.at("row0_first8");
    for (size_t k = 0; k < first.size(); ++k) {
      EXPECT_EQ(values[k], first[k].get<float>()) << module << " [0, " << k << "]";
    }
    Sha256 h;
    h.Update(values.data(), values.size() * sizeof(float));
    EXPECT_EQ(h.HexDigest(), r.at("sha256_f32_le").get<std::string>()) << GetParam() << " " << module;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// The activation quantization each decoder linear carries follows config.json's input_activations: dynamic
// per-token int8 (INT8 W8A8, symmetric or not) -> w8a8_dynamic_int8 / act_symmetric; float 8 bits ->
// w8a8_dynamic_fp8; none -> neither. lm_head (ignored) never quantizes its input.
TEST_P(FixturesTest, ActivationQuantizationFollowsConfig) {
  if (std::ifstream cfg(kFixtures + "/" + GetParam() + "/config.json");
      !nlohmann::json::parse(cfg)["quantization_config"].contains("config_groups")) {
    GTEST_SKIP() << GetParam() << ": GPTQ / AWQ, no activation quantization (model_toolkit_quant_test)";
  }
  const std::string dir = kFixtures + "/" + GetParam();
  std::ifstream in(dir + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json groups = nlohmann::json::parse(ss.str())["quantization_config"]["config_groups"];
  if (groups.is_null()) GTEST_SKIP() << GetParam() << " quantizes nothing (sparsity only)";
  ASSERT_EQ(groups.size(), 1u);
  const nlohmann::json act = groups.begin().value().value("input_activations", nlohmann::json());
  const bool dynamic = !act.is_null() && act["dynamic"] == true;
  const bool int8 = !act.is_null() && act["type"] == "int" && act["num_bits"] == 8;
  const bool fp8 = !act.is_null() && act["type"] == "float" && act["num_bits"] == 8;
  const int weight_bits = groups.begin().value()["weights"]["num_bits"].get<int>();
  auto m = ModelWeights::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const LayerWeights& L : (*m)->layers()) {
    for (const LinearWeight* w : DecoderLinears(L)) {
      EXPECT_EQ(w->w8a8_dynamic_int8, int8 && dynamic) << w->module;
      EXPECT_EQ(w->w8a8_dynamic_fp8, fp8 && dynamic) << w->module;
      EXPECT_EQ(w->static_input_int8, int8 && !dynamic) << w->module;
      EXPECT_EQ(w->static_input_fp8, fp8 && !dynamic) << w->module;
      // Static scales are loaded with their module: a zero point exactly when asymmetric.
      EXPECT_EQ(w->input_scale.present(), (int8 || fp8) && !dynamic) << w->module;
      EXPECT_EQ(w->input_zero_point.present(), int8 && !dynamic && !act["symmetric"].get<bool>())
          << w->module;
      if (w->format != WeightFormat::kDense) {
        EXPECT_EQ(w->num_bits, weight_bits) << w->module;
      }
      if (int8) {
        EXPECT_EQ(w->format, WeightFormat::kNaiveQuantized) << w->module;
        EXPECT_EQ(w->act_symmetric, act["symmetric"].get<bool>()) << w->module;
      }
    }
  }
  const LinearWeight& head = (*m)->lm_head();
  EXPECT_FALSE(head.w8a8_dynamic_int8 || head.w8a8_dynamic_fp8 || head.static_input_int8 ||
               head.static_input_fp8);
  if (int8 && weight_bits == 8) {
    EXPECT_THAT((*m)->summary().format, ::testing::StartsWith("int8-w8a8-"));
    EXPECT_EQ(absl::StrContains((*m)->summary().format, "-act-asym"), !act["symmetric"].get<bool>());
  }
  EXPECT_EQ(absl::StrContains((*m)->summary().format, "-act-static"), (int8 || fp8) && !dynamic);
}

INSTANTIATE_TEST_SUITE_P(All, FixturesTest, ::testing::ValuesIn(FixtureDirs()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FixturesTest);

}  // namespace
}  // namespace scored

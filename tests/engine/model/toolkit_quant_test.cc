// GPTQ / AWQ / ModelOpt checkpoints (engine/model/toolkit_quant.h): what each committed fixture is
// transcoded to, and a refusal naming the field for every variant that is not implemented. The decode
// itself is checked bit for bit against the libraries by model_fixtures_test (reference_dequant.json).
#include "engine/model/toolkit_quant.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/st_writer.h"

namespace scored {
namespace {

using ::testing::HasSubstr;
using testing_util::TempDir;

const std::string kFixtures = SCORED_FIXTURES_DIR;

std::string ErrorOf(const std::string& json) {
  absl::StatusOr<ToolkitQuantConfig> c = ParseToolkitQuantConfig(json, "config.json");
  return c.ok() ? std::string("ok") : std::string(c.status().message());
}

TEST(ToolkitQuantTest, RecognizesToolkitMethodsOnly) {
  EXPECT_TRUE(IsToolkitQuantMethod(R"({"quant_method": "gptq", "bits": 4})"));
  EXPECT_TRUE(IsToolkitQuantMethod(R"({"quant_method": "AWQ"})"));
  EXPECT_TRUE(IsToolkitQuantMethod(R"({"quant_method": "modelopt", "quant_algo": "FP8"})"));
  EXPECT_TRUE(IsToolkitQuantMethod(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})"));
  EXPECT_FALSE(IsToolkitQuantMethod(R"({"quant_method": "compressed-tensors"})"));
  EXPECT_FALSE(IsToolkitQuantMethod("not json"));
}

// transformers' native FP8, as DeepSeek-V3's config.json has it (and Qwen3.5-FP8's, with ignored_layers).
TEST(ToolkitQuantTest, ParsesNativeFp8) {
  absl::StatusOr<ToolkitQuantConfig> c = ParseToolkitQuantConfig(
      R"({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
          "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "mlp.gate"]})",
      "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, ToolkitQuantConfig::Method::kNativeFp8Block);
  EXPECT_EQ(c->block_rows, 128);
  EXPECT_EQ(c->block_cols, 128);
  EXPECT_EQ(c->not_converted, (std::vector<std::string>{"lm_head", "mlp.gate"}));
  EXPECT_EQ(c->label, "fp8-block-128x128");
  absl::StatusOr<ToolkitQuantConfig> q = ParseToolkitQuantConfig(
      R"({"quant_method": "fp8", "weight_block_size": [128, 64], "ignored_layers": ["visual"]})", "c");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->block_cols, 64);
  EXPECT_EQ(q->not_converted, (std::vector<std::string>{"visual"}));
}

// ModelOpt's FP8 KV cache in both of its spellings: hf_quant_config.json's and config.json's.
TEST(ToolkitQuantTest, ModelOptFp8KvCache) {
  for (const char* json : {R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8",
                               "kv_cache_quant_algo": "FP8"}})",
                           R"({"quant_method": "modelopt", "quant_algo": "FP8",
                               "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"}})"}) {
    absl::StatusOr<ToolkitQuantConfig> c = ParseToolkitQuantConfig(json, "c");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->kv_cache_fp8) << json;
  }
}

TEST(ToolkitQuantTest, ParsesGptqFormats) {
  absl::StatusOr<ToolkitQuantConfig> v1 = ParseToolkitQuantConfig(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true})", "c");
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_TRUE(v1->zero_point_minus_one) << "no checkpoint_format means AutoGPTQ's v1 'gptq'";
  EXPECT_TRUE(v1->desc_act);
  EXPECT_EQ(v1->group_size, 128);
  absl::StatusOr<ToolkitQuantConfig> v2 =
      ParseToolkitQuantConfig(R"({"quant_method": "gptq", "bits": 8, "format": "gptq_v2"})", "c");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_FALSE(v2->zero_point_minus_one);
  EXPECT_EQ(v2->bits, 8);
  EXPECT_EQ(v2->group_size, -1);
}

TEST(ToolkitQuantTest, RefusesVariantsNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"quant_method": "gptq", "bits": 2})", "field 'bits' is 2"},
      {R"({"quant_method": "gptq", "bits": 3})", "field 'bits' is 3"},
      {R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})", "field 'checkpoint_format'"},
      {R"({"quant_method": "gptq", "bits": 4, "format": "bitblas"})", "field 'format' is 'bitblas'"},
      {R"({"quant_method": "gptq", "bits": 4, "pack_dtype": "int16"})", "field 'pack_dtype'"},
      {R"({"quant_method": "gptq", "bits": 4, "dynamic": {"-:.*down": {}}})", "field 'dynamic'"},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 0})", "field 'group_size'"},
      {R"({"quant_method": "awq", "bits": 4, "version": "gemv"})", "field 'version' is 'gemv'"},
      {R"({"quant_method": "awq", "bits": 4, "version": "GEMV_FAST"})", "field 'version'"},
      {R"({"quant_method": "awq", "bits": 4, "format": "gemv"})", "field 'format' is 'gemv'"},
      {R"({"quant_method": "awq", "w_bit": 8})", "field 'w_bit' is 8"},
      {R"({"quant_method": "awq", "bits": 4, "zero_point": false})", "field 'zero_point'"},
      {R"({"quant_method": "awq", "bits": 4, "backend": "llm-awq"})", "field 'backend'"},
      {R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32})",
       "field 'group_size' is 32"},
      {R"({"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"})", "field 'quant_algo'"},
      {R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"})",
       "field 'kv_cache_quant_algo' is \"NVFP4\""},
      {R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": "NVFP4_AFFINE"})",
       "field 'kv_cache_scheme'"},
      {R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "W4A8_AWQ"}})",
       "field 'quant_algo' is 'W4A8_AWQ'"},
      {R"({"quant_method": "exl2"})", "field 'quant_method' is 'exl2'"},
      {R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})",
       "field 'activation_scheme' is 'static'"},
      {R"({"quant_method": "fp8", "weight_block_size": null})", "field 'weight_block_size' is absent"},
      {R"({"quant_method": "fp8", "weight_block_size": [128]})", "field 'weight_block_size' is [128]"},
      {R"({"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"})",
       "field 'scale_fmt' is 'ue8m0'"},
      {R"({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_convert": ["q_proj"]})",
       "field 'modules_to_convert'"},
  };
  for (const auto& [json, want] : cases) {
    EXPECT_THAT(ErrorOf(json), HasSubstr(want)) << json;
  }
  EXPECT_EQ(ErrorOf(R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}})"), "ok");
  // A kernel choice is no storage format: transformers 5's AwqConfig writes backend "auto" and format "gemm".
  EXPECT_EQ(ErrorOf(R"({"quant_method": "awq", "bits": 4, "format": "gemm", "backend": "marlin"})"), "ok");
}

struct Expected {
  std::string fixture;
  int bits;
  bool symmetric;
  QuantStrategy strategy;
  int64_t group_size;
  bool actorder;
  std::string label;
};

TEST(ToolkitQuantTest, FixturesTranscodeToPackQuantized) {
  const std::vector<Expected> cases = {
      {"llama-gptq-w4-g128", 4, true, QuantStrategy::kGroup, 128, false, "gptq-v1"},
      {"llama-gptq-w4-g128-actorder-asym", 4, false, QuantStrategy::kGroup, 128, true, "gptq-v1"},
      {"llama-gptq-w8-channel-v2", 8, false, QuantStrategy::kChannel, 0, false, "gptq-v2"},
      {"llama-awq-w4-g128", 4, false, QuantStrategy::kGroup, 128, false, "awq-gemm"},
  };
  for (const Expected& e : cases) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(kFixtures + "/" + e.fixture);
    ASSERT_TRUE(m.ok()) << e.fixture << ": " << m.status();
    for (const LayerWeights& L : (*m)->layers()) {
      for (const LinearWeight* w :
           {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) {
        EXPECT_EQ(w->format, WeightFormat::kPackQuantized) << e.fixture << " " << w->module;
        EXPECT_EQ(w->num_bits, e.bits) << e.fixture;
        EXPECT_EQ(w->symmetric, e.symmetric) << e.fixture;
        EXPECT_EQ(w->weight_zero_point.present(), !e.symmetric) << e.fixture;
        EXPECT_EQ(w->strategy, e.strategy) << e.fixture;
        EXPECT_EQ(w->group_size, e.group_size) << e.fixture;
        EXPECT_EQ(w->actorder_group, e.actorder) << e.fixture;
        EXPECT_EQ(w->weight_g_idx.present(), e.actorder) << e.fixture;
        EXPECT_EQ(w->weight_packed.shape,
                  (std::vector<int64_t>{w->out_features, w->in_features * e.bits / 32}));
      }
    }
    EXPECT_EQ((*m)->lm_head().format, WeightFormat::kDense);
    EXPECT_THAT((*m)->summary().notes, HasSubstr(e.label + " checkpoint"));
    EXPECT_NEAR((*m)->summary().bits_per_weight_decoder, e.bits + (e.bits == 4 ? 0.25 : 0.0), 0.35)
        << e.fixture;
  }
}

// ModelOpt NVFP4 (made by ModelOpt itself): a module stays NVFP4 when a compressed-tensors global scale
// (a divisor) decodes every element exactly as ModelOpt's weight_scale_2 (a multiplier) does, else it is
// decoded to dense BF16 at load; both are bit-exact (model_fixtures_test). This fixture has both kinds. Its
// FP4 activations are not emulated (run weight-only, said in the summary).
TEST(ToolkitQuantTest, ModelOptNvfp4KeepsFp4WhereADivisorIsExact) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(kFixtures + "/llama-modelopt-nvfp4");
  ASSERT_TRUE(m.ok()) << m.status();
  int nvfp4 = 0, dense = 0;
  for (const LayerWeights& L : (*m)->layers()) {
    for (const LinearWeight* w :
         {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) {
      EXPECT_TRUE(w->w4a4_run_weight_only) << w->module;
      if (w->format == WeightFormat::kNvfp4PackQuantized) {
        ++nvfp4;
        EXPECT_EQ(w->weight_global_scale.dtype, DType::kF32);
        // Nibble 8 (-0 in compressed-tensors' table) is rewritten to 0: ModelOpt reads code 8 as +0.
        for (int64_t i = 0; i < w->weight_packed.nbytes; ++i) {
          ASSERT_NE(w->weight_packed.data[i] & 0x0f, 0x08) << w->module;
          ASSERT_NE(w->weight_packed.data[i] & 0xf0, 0x80) << w->module;
        }
      } else {
        ++dense;
        EXPECT_EQ(w->format, WeightFormat::kDense) << w->module;
        EXPECT_EQ(w->weight.dtype, DType::kBF16) << w->module;
      }
    }
  }
  std::cout << "llama-modelopt-nvfp4: " << nvfp4 << " linears kept NVFP4, " << dense << " decoded to BF16\n";
  EXPECT_GT(nvfp4, 0);
  EXPECT_THAT((*m)->summary().notes, HasSubstr("modelopt-nvfp4 checkpoint"));
  EXPECT_THAT((*m)->summary().notes, HasSubstr("W4A4"));
}

// Older ModelOpt exports describe the quantization only in hf_quant_config.json: without a
// quantization_config in config.json the loader reads that file and gets the same weights.
TEST(ToolkitQuantTest, ModelOptHfQuantConfigAloneIsRead) {
  TempDir dir;
  const std::string d = dir.path() + "/m";
  std::filesystem::copy(kFixtures + "/llama-trained-modelopt-fp8", d,
                        std::filesystem::copy_options::recursive);
  std::ifstream in(d + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(ss.str());
  config.erase("quantization_config");
  ASSERT_TRUE(testing_util::WriteFile(d + "/config.json", config.dump()));
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(d);
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& w = (*m)->layers()[1].down_proj;
  EXPECT_EQ(w.format, WeightFormat::kFloatQuantized);
  EXPECT_EQ(w.strategy, QuantStrategy::kTensor);
  EXPECT_TRUE(w.static_input_fp8);
  EXPECT_EQ(w.weight_scale.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(w.input_scale.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ((*m)->summary().format, "fp8-w8a8-tensor-act-static");
  EXPECT_THAT((*m)->summary().notes, HasSubstr("modelopt-fp8 checkpoint"));
  // The same file with an algorithm that is not implemented names it.
  ASSERT_TRUE(testing_util::WriteFile(
      d + "/hf_quant_config.json",
      R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "INT4_AWQ"}})"));
  absl::StatusOr<std::unique_ptr<ModelWeights>> refused = ModelWeights::Load(d);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("hf_quant_config.json"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("field 'quant_algo' is 'INT4_AWQ'"));
}

// Byte offset of tensor `name`'s data in a safetensors file.
int64_t DataOffset(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const nlohmann::json h = nlohmann::json::parse(header);
  return 8 + static_cast<int64_t>(n) + h.at(name).at("data_offsets")[0].get<int64_t>();
}

// A copy of a fixture with 4 bytes of one tensor replaced.
void CopyWithPatch(const std::string& fixture, const std::string& dst, const std::string& tensor,
                   uint32_t value) {
  std::filesystem::copy(kFixtures + "/" + fixture, dst, std::filesystem::copy_options::recursive);
  const std::string st = dst + "/model.safetensors";
  const int64_t off = DataOffset(st, tensor);
  std::fstream f(st, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(off);
  f.write(reinterpret_cast<const char*>(&value), 4);
}

TEST(ToolkitQuantTest, V1ZeroPointThatOverflowsIsRefusedNamingTheTensor) {
  TempDir dir;
  const std::string d = dir.path() + "/m";
  // The v1 format stores z - 1; a stored 15 would read as 16, which 4 bits cannot hold.
  CopyWithPatch("llama-gptq-w4-g128-actorder-asym", d, "model.layers.0.self_attn.q_proj.qzeros", 0x7777777fu);
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(d);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.0.self_attn.q_proj.qzeros"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("reads as 16"));
}

TEST(ToolkitQuantTest, GIdxOutOfRangeIsRefused) {
  TempDir dir;
  const std::string d = dir.path() + "/m";
  CopyWithPatch("llama-gptq-w4-g128-actorder-asym", d, "model.layers.1.mlp.down_proj.g_idx", 6u);
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(d);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.1.mlp.down_proj.g_idx'[0] = 6"));
}

TEST(ToolkitQuantTest, UnsupportedConfigInAFolderIsRefusedAtLoad) {
  TempDir dir;
  const std::string d = dir.path() + "/m";
  std::filesystem::copy(kFixtures + "/llama-gptq-w4-g128", d, std::filesystem::copy_options::recursive);
  std::ifstream in(d + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(ss.str());
  config["quantization_config"]["bits"] = 3;
  ASSERT_TRUE(testing_util::WriteFile(d + "/config.json", config.dump()));
  absl::StatusOr<std::unique_ptr<ModelWeights>> m = ModelWeights::Load(d);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("field 'bits' is 3"));
}

}  // namespace
}  // namespace scored

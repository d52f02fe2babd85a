// Activations (engine/cuda/activations.h): the memory estimate that start-up checks use, against the
// formulas it replaced (they must agree for every config, byte for byte), and on a GPU the allocated total
// against the estimate.
#include "engine/cuda/activations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/cuda/device_weights.h"
#include "engine/cuda/row_chunks.h"
#include "engine/kernels/logprob.h"
#include "engine/model/weights.h"
#include "tests/engine/cuda/gpu_fixture.h"

namespace scored::cuda {
namespace {

using ::scored::testing::GpuTest;

// The estimate as it was written before the activation table (kept verbatim as the known answer).
int64_t OldActBytes(ComputeDtype dtype) { return dtype == ComputeDtype::kBf16 ? 2 : 4; }
int64_t OldQkvDim(const ModelConfig& c) { return (c.num_heads + 2 * c.num_kv_heads) * c.head_dim; }
int64_t OldLogitsRows(int64_t max_tokens) { return std::min(max_tokens, kLmHeadChunkTokens); }

int64_t OldActivationBytesPerToken(const ModelConfig& config, ComputeDtype dtype) {
  const int64_t act = OldActBytes(dtype);
  const int64_t q_dim = config.num_heads * config.head_dim;
  const int64_t floats = 4 * 2 * config.hidden_size;  // residual, proj
  const int64_t acts = act * (config.hidden_size + OldQkvDim(config) + q_dim + 3 * config.intermediate_size);
  const int64_t per_row = 4 * 4 + 8 + 1 + 4 + 4 + kernels::kMaxTopK * 8;  // inputs, results
  // Added since: candidate ids and logprobs, the min logprob (ScoreRequest::candidate_ids).
  const int64_t candidates = kernels::kMaxCandidates * 8 + 4;
  const int64_t rope_table = 4 * config.head_dim;  // (cos, sin) of one position
  return floats + acts + per_row + candidates + rope_table;
}

int64_t OldFixedActivationBytes(const ModelConfig& config, const DeviceModel& model, int64_t max_tokens,
                                int tp_size) {
  const int64_t tp_bytes =
      tp_size > 1
          ? OldLogitsRows(max_tokens) * (tp_size * static_cast<int64_t>(sizeof(kernels::LogitPartialStats)) +
                                         4 + tp_size * kernels::kMaxTopK * 8) +
                max_tokens * 2 * 4  // act_amax: [max_tokens] FP8 amax, since INT8 W8A8 [max_tokens, 2] ranges
          : 0;
  const int64_t fp8_bytes = model.max_fp8_in_features > 0 ? max_tokens * (model.max_fp8_in_features + 8) : 0;
  return OldLogitsRows(max_tokens) * config.vocab_size * 4 +
         2 * model.max_scratch_elements * OldActBytes(model.dtype) + tp_bytes + fp8_bytes;
}

ModelConfig Config(int64_t hidden, int64_t inter, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   int64_t vocab) {
  ModelConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  return c;
}

TEST(ActivationEstimateTest, EqualsTheFormulasItReplaced) {
  const ModelConfig configs[] = {
      Config(4096, 14336, 32, 8, 128, 128256),  // Llama 3 8B
      Config(2048, 7168, 16, 4, 128, 64128),    // a tp 2 shard of it (LocalConfig)
      Config(5120, 17408, 40, 8, 128, 151936),  // Qwen3 14B (head_dim * heads != hidden)
      Config(64, 172, 8, 4, 8, 512),            // stories260K
      Config(3, 5, 1, 1, 3, 7),                 // odd sizes
  };
  for (const ModelConfig& config : configs) {
    for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
      EXPECT_EQ(ActivationBytesPerToken(config, dtype), OldActivationBytesPerToken(config, dtype));
      for (int64_t scratch : {int64_t{0}, int64_t{58720256}, int64_t{12345}}) {
        for (int64_t fp8_in : {int64_t{0}, int64_t{14336}, int64_t{16}}) {
          DeviceModel model;
          model.dtype = dtype;
          model.max_scratch_elements = scratch;
          model.max_fp8_in_features = fp8_in;
          for (int tp_size : {1, 2, 4, 8}) {
            for (int64_t max_tokens :
                 {int64_t{1}, int64_t{100}, int64_t{2048}, int64_t{2049}, int64_t{65536}}) {
              EXPECT_EQ(FixedActivationBytes(config, model, max_tokens, tp_size),
                        OldFixedActivationBytes(config, model, max_tokens, tp_size))
                  << "hidden " << config.hidden_size << " scratch " << scratch << " fp8 " << fp8_in << " tp "
                  << tp_size << " max_tokens " << max_tokens;
            }
          }
        }
      }
    }
  }
}

int64_t AllocatedBytes(const Activations& a) {
  int64_t total = 0;
  for (const DeviceBuffer* b : {&a.residual,
                                &a.normed,
                                &a.qkv,
                                &a.attn,
                                &a.proj,
                                &a.gate_up,
                                &a.mlp,
                                &a.scratch,
                                &a.scratch2,
                                &a.act_fp8,
                                &a.act_scale,
                                &a.logits,
                                &a.tokens,
                                &a.positions,
                                &a.rope_table,
                                &a.rope_table_long,
                                &a.rope_table_local,
                                &a.cu_seqlens,
                                &a.targets,
                                &a.logprob,
                                &a.greedy,
                                &a.rank,
                                &a.entropy,
                                &a.top_k_ids,
                                &a.top_k_logprobs,
                                &a.tp_stats,
                                &a.tp_target_logit,
                                &a.act_amax,
                                &a.tp_topk_ids,
                                &a.tp_topk_values,
                                &a.ref_normed,
                                &a.ref_rope_table,
                                &a.ref_rope_table_long,
                                &a.ref_rope_table_local,
                                &a.ref_logits,
                                &a.ref_stats,
                                &a.ref_logprob,
                                &a.kld,
                                &a.ref_greedy,
                                &a.same_top}) {
    total += b->bytes();
  }
  return total;
}

class ActivationsTest : public GpuTest {};

// What AllocateActivations takes is the estimate (plus cu_seqlens' entry past max_tokens, 4 bytes), for a
// quantized model (scratch) at tp 1 and with the tensor-parallel buffers.
TEST_F(ActivationsTest, AllocatedBytesAreTheEstimate) {
  const char* env = std::getenv("SCORED_FIXTURES_DIR");
  const std::string dir =
      std::string(env != nullptr ? env : SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel";
  auto weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const ModelConfig& config = (*weights)->config();
  for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    auto model = UploadModel(**weights, dtype);
    ASSERT_TRUE(model.ok()) << model.status();
    for (int tp_size : {1, 2}) {
      for (int64_t max_tokens : {int64_t{100}, int64_t{3000}}) {
        auto acts = AllocateActivations(config, **model, max_tokens, tp_size);
        ASSERT_TRUE(acts.ok()) << acts.status();
        EXPECT_EQ(AllocatedBytes(*acts), ActivationBytesPerToken(config, dtype) * max_tokens +
                                             FixedActivationBytes(config, **model, max_tokens, tp_size) + 4)
            << "tp " << tp_size << " max_tokens " << max_tokens;
        EXPECT_EQ(acts->dequant_stream.get() != nullptr, (*model)->max_scratch_elements > 0);
        EXPECT_EQ(acts->chunk_ready.size(), tp_size > 1 ? static_cast<size_t>(kMaxTpRowChunks) : 0u);
        EXPECT_EQ(acts->logits_rows, std::min(max_tokens, kLmHeadChunkTokens));
      }
    }
  }
}

// With a reference model (here the dense original of the W4A16 model): the estimate is still exactly what
// is allocated, the reference's own buffers exist, the two logits chunks have half the rows, and nothing else
// of the one-model table shrinks.
TEST_F(ActivationsTest, AReferenceModelAddsItsBuffersToTheEstimate) {
  const char* env = std::getenv("SCORED_FIXTURES_DIR");
  const std::string fixtures = std::string(env != nullptr ? env : SCORED_FIXTURES_DIR);
  auto weights = ModelWeights::Load(fixtures + "/stories260k-w4a16-channel");
  ASSERT_TRUE(weights.ok()) << weights.status();
  const char* data_env = std::getenv("SCORED_DATA_DIR");
  auto ref_weights =
      ModelWeights::Load(std::string(data_env != nullptr ? data_env : SCORED_DATA_DIR) + "/stories260K-hf");
  ASSERT_TRUE(ref_weights.ok()) << ref_weights.status();
  const ModelConfig& config = (*weights)->config();
  const ModelConfig& ref_config = (*ref_weights)->config();
  for (ComputeDtype dtype : {ComputeDtype::kBf16, ComputeDtype::kFp32}) {
    auto model = UploadModel(**weights, dtype);
    ASSERT_TRUE(model.ok()) << model.status();
    auto ref_model = UploadModel(**ref_weights, dtype);
    ASSERT_TRUE(ref_model.ok()) << ref_model.status();
    BaselineModel reference;
    reference.config = &ref_config;
    reference.model = ref_model->get();
    for (int tp_size : {1, 2}) {
      const int64_t max_tokens = 3000;
      auto acts = AllocateActivations(config, **model, max_tokens, tp_size, &reference);
      ASSERT_TRUE(acts.ok()) << acts.status();
      EXPECT_EQ(AllocatedBytes(*acts),
                ActivationBytesPerToken(config, dtype, &reference) * max_tokens +
                    FixedActivationBytes(config, **model, max_tokens, tp_size, &reference) + 4)
          << "tp " << tp_size;
      EXPECT_GT(ActivationBytesPerToken(config, dtype, &reference), ActivationBytesPerToken(config, dtype));
      EXPECT_EQ(acts->kld.bytes(), max_tokens * 8);
      EXPECT_EQ(acts->ref_normed.bytes(),
                max_tokens * ref_config.hidden_size * (dtype == ComputeDtype::kBf16 ? 2 : 4));
      EXPECT_EQ(acts->ref_logits.bytes(), acts->logits.bytes());
      // Two logits chunks of half the rows each.
      EXPECT_EQ(acts->logits_rows, kLmHeadChunkTokens / 2);
      EXPECT_EQ(acts->logits.bytes(), kLmHeadChunkTokens / 2 * config.vocab_size * 4);
    }
  }
}

}  // namespace
}  // namespace scored::cuda

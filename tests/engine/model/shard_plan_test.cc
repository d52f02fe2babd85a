// Tensor-parallel shard views against the full weights, on every fixture format: each rank's
// DequantizeRows must equal the matching slice of the full DequantizeRows bit for bit (memcmp: the view
// decodes the very same stored fields and scales, so there is no tolerance).
#include "engine/model/shard_plan.h"

#include <cctype>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = SCORED_FIXTURES_DIR;
const std::string kData = SCORED_DATA_DIR;

std::vector<float> Full(const LinearWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.out_features * w.in_features));  // [out, in]
  EXPECT_TRUE(w.DequantizeRows(0, w.out_features, out.data()).ok());
  return out;
}

// Expects view's decode == full[rows or columns of slice], bit for bit.
void ExpectSliceEqual(const LinearWeight& full, const std::vector<float>& full_values,
                      const ShardedLinear& s) {
  const LinearWeight& v = s.view;
  std::vector<float> got(static_cast<size_t>(v.out_features * v.in_features));  // [out_local, in_local]
  const absl::Status st = v.DequantizeRows(0, v.out_features, got.data());
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> want(got.size());
  if (s.slice.kind == ShardKind::kRowParallel) {
    ASSERT_EQ(v.out_features, full.out_features);
    ASSERT_EQ(v.in_features, s.slice.size());
    for (int64_t o = 0; o < full.out_features; ++o) {
      std::memcpy(&want[static_cast<size_t>(o * v.in_features)],
                  &full_values[static_cast<size_t>(o * full.in_features + s.slice.begin)],
                  static_cast<size_t>(v.in_features) * sizeof(float));
    }
  } else {
    ASSERT_EQ(v.in_features, full.in_features);
    ASSERT_EQ(v.out_features, s.slice.size());
    std::memcpy(want.data(), &full_values[static_cast<size_t>(s.slice.begin * full.in_features)],
                want.size() * sizeof(float));
  }
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << full.module << " " << ShardKindName(s.slice.kind) << " [" << s.slice.begin << ", " << s.slice.end
      << ")";
}

bool PointsInto(const TensorView& part, const TensorView& whole) {
  return part.data >= whole.data && part.data + part.nbytes <= whole.data + whole.nbytes;
}

struct Outcome {
  int checked = 0;                              // (linear, rank) pairs compared
  std::map<std::string, std::string> failures;  // module suffix -> first error message
};

// Shards every linear of every layer and lm_head for all ranks of tp; compares with the full decode.
Outcome ShardAll(const ModelWeights& m, int tp) {
  Outcome r;
  std::vector<ShardPlan> plans;
  for (int rank = 0; rank < tp; ++rank) {
    auto p = ShardPlan::Create(m.config(), tp, rank);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return r;
    plans.push_back(*p);
  }
  std::vector<std::pair<const LinearWeight*, LinearRole>> linears;
  for (const LayerWeights& l : m.layers()) {
    linears.insert(linears.end(), {{&l.q_proj, LinearRole::kQ},
                                   {&l.k_proj, LinearRole::kK},
                                   {&l.v_proj, LinearRole::kV},
                                   {&l.o_proj, LinearRole::kO},
                                   {&l.gate_proj, LinearRole::kGate},
                                   {&l.up_proj, LinearRole::kUp},
                                   {&l.down_proj, LinearRole::kDown}});
  }
  linears.push_back({&m.lm_head(), LinearRole::kLmHead});
  // The ranks' slices tile each dimension in rank order (kv heads: each replica group shares one slice).
  for (LinearRole role : {LinearRole::kQ, LinearRole::kK, LinearRole::kO, LinearRole::kGate,
                          LinearRole::kDown, LinearRole::kLmHead}) {
    const int64_t step = role == LinearRole::kK ? plans[0].kv_replicas : 1;
    int64_t next = 0;
    for (int rank = 0; rank < tp; rank += static_cast<int>(step)) {
      const LinearSlice& s = plans[static_cast<size_t>(rank)].ForLinear(role);
      EXPECT_EQ(s.begin, next) << "rank " << rank;
      next = s.end;
      for (int rep = 1; rep < step; ++rep) {
        EXPECT_EQ(plans[static_cast<size_t>(rank + rep)].ForLinear(role).begin, s.begin);
      }
    }
    const ModelConfig& c = m.config();
    int64_t dim = c.vocab_size;
    if (role == LinearRole::kQ || role == LinearRole::kO) dim = c.num_heads * c.head_dim;
    if (role == LinearRole::kK) dim = c.num_kv_heads * c.head_dim;
    if (role == LinearRole::kGate || role == LinearRole::kDown) dim = c.intermediate_size;
    EXPECT_EQ(next, dim);
  }
  for (const auto& [w, role] : linears) {
    const std::vector<float> full = Full(*w);
    const std::string suffix = w->module.substr(w->module.rfind('.') + 1);
    for (int rank = 0; rank < tp; ++rank) {
      const LinearSlice& slice = plans[static_cast<size_t>(rank)].ForLinear(role);
      auto s = ShardLinear(*w, slice, rank);
      if (!s.ok()) {
        r.failures.emplace(suffix, std::string(s.status().message()));
        EXPECT_EQ(CheckShardable(*w, slice, rank).code(), s.status().code());
        continue;
      }
      EXPECT_TRUE(CheckShardable(*w, slice, rank).ok());
      ExpectSliceEqual(*w, full, *s);
      ++r.checked;
      if (slice.kind != ShardKind::kRowParallel) {
        // Zero-copy: the values are a view into the mmapped tensor.
        const TensorView& values = w->weight.present() ? s->view.weight : s->view.weight_packed;
        const TensorView& whole = w->weight.present() ? w->weight : w->weight_packed;
        EXPECT_TRUE(PointsInto(values, whole)) << w->module;
      } else {
        EXPECT_EQ(s->view.bias.present(), w->bias.present() && rank == 0);
      }
      if (w->weight_global_scale.present()) {
        EXPECT_EQ(s->view.weight_global_scale.data, w->weight_global_scale.data) << "shared per-tensor scale";
      }
    }
  }
  return r;
}

struct Case {
  std::string dir;
  int tp;
  std::set<std::string> expected_failures;  // module suffixes that may not be split this way
  std::string failure_text;                 // in every failure message
};

class ShardFixtureTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardFixtureTest, RanksDecodeTheirSliceExactly) {
  const Case& c = GetParam();
  auto m = ModelWeights::Load(c.dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const Outcome r = ShardAll(**m, c.tp);
  std::set<std::string> failed;
  for (const auto& [suffix, message] : r.failures) {
    failed.insert(suffix);
    EXPECT_THAT(message, HasSubstr(c.failure_text)) << suffix;
    EXPECT_THAT(message, HasSubstr("_features")) << suffix;
    EXPECT_THAT(message, HasSubstr((*m)->layers()[0].q_proj.module.substr(0, 13))) << suffix;
  }
  EXPECT_EQ(failed, c.expected_failures);
  EXPECT_GT(r.checked, 0);
  const absl::Status v = ValidateTensorParallel(**m, c.tp);
  EXPECT_EQ(v.ok(), c.expected_failures.empty()) << v;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const std::vector<std::string> fixtures = {
      "stories260k-w4a16-channel", "stories260k-w8a16-channel", "stories260k-fp8-dynamic", "llama-w4a16-g128",
      "llama-w4a16-g128-asym",     "llama-w4a16-g128-actorder", "llama-nvfp4a16",          "llama-nvfp4",
      "llama-fp8-w8a16",           "llama-fp8-dynamic",         "llama-fp8-block",         "qwen2-w4a16-g128",
      "qwen3-w4a16-g128",          "llama-trained-fp8-dynamic"};
  for (const std::string& f : fixtures) {
    for (int tp : {2, 4}) {
      Case c{kFixtures + "/" + f, tp, {}, ""};
      // Random models: hidden 256 and intermediate 768 split 4 ways give 64- and 192-column shards, which
      // do not start on 128-column groups (pack-quantized g128) or 128-column blocks (fp8 block: 192).
      const bool g128 = f.find("g128") != std::string::npos && f.find("actorder") == std::string::npos;
      if (tp == 4 && g128) {
        c.expected_failures = {"o_proj", "down_proj"};
        c.failure_text = "group_size 128";
      }
      if (tp == 4 && f == "llama-fp8-block") {
        // gate/up: 192-row shards cross 128-row scale blocks; down: 128-column blocks; o_proj (64-column
        // shards): the 128-column activation scale groups of FP8_BLOCK.
        c.expected_failures = {"gate_proj", "up_proj", "o_proj", "down_proj"};
        c.failure_text = "128-";
      }
      cases.push_back(c);
    }
  }
  cases.push_back({kData + "/stories260K-hf", 2, {}, ""});
  cases.push_back({kData + "/stories260K-hf", 4, {}, ""});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ShardFixtureTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.dir.substr(info.param.dir.rfind('/') + 1);
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name + "_tp" + std::to_string(info.param.tp);
                         });

// Slices no plan produces, to reach the re-packing paths: zero points packed along `out` cut at a row
// that does not start a word, int4/int8 values cut mid-word, actorder groups of an arbitrary column range.
TEST(ShardLinearTest, ArbitrarySlicesRepackExactly) {
  struct Arbitrary {
    std::string fixture;
    LinearSlice slice;
    bool owned;  // the slice needs re-packed buffers
  };
  const std::vector<Arbitrary> cases = {
      {"llama-w4a16-g128-asym", {ShardKind::kColumnParallel, 3, 67}, true},    // zp bit 12 of a word
      {"llama-w4a16-g128-asym", {ShardKind::kColumnParallel, 8, 100}, false},  // zp word aligned: a view
      {"llama-w4a16-g128-asym", {ShardKind::kRowParallel, 128, 256}, true},
      {"stories260k-w4a16-channel", {ShardKind::kRowParallel, 5, 61}, true},
      {"stories260k-w8a16-channel", {ShardKind::kRowParallel, 13, 64}, true},
      {"llama-w4a16-g128-actorder", {ShardKind::kRowParallel, 37, 200}, true},
      {"llama-nvfp4a16", {ShardKind::kRowParallel, 32, 96}, true},
      {"llama-fp8-block", {ShardKind::kRowParallel, 128, 256}, true},
      {"llama-fp8-block", {ShardKind::kColumnParallel, 130, 200}, false},  // inside row block 1
  };
  for (const Arbitrary& a : cases) {
    auto m = ModelWeights::Load(kFixtures + "/" + a.fixture);
    ASSERT_TRUE(m.ok()) << m.status();
    const LinearWeight& w = (*m)->layers()[1].q_proj;
    auto s = ShardLinear(w, a.slice, 0);
    ASSERT_TRUE(s.ok()) << a.fixture << ": " << s.status();
    ExpectSliceEqual(w, Full(w), *s);
    EXPECT_EQ(s->owned_bytes > 0, a.owned) << a.fixture;
  }
}

TEST(ShardLinearTest, ActorderKeepsOnlyTheGroupsItsColumnsUse) {
  auto m = ModelWeights::Load(kFixtures + "/llama-w4a16-g128-actorder");
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& w = (*m)->layers()[0].down_proj;  // in 768: 6 groups
  std::set<int32_t> used;
  for (int64_t k = 0; k < 96; ++k) {
    int32_t g;
    std::memcpy(&g, w.weight_g_idx.data + k * 4, 4);
    used.insert(g);
  }
  auto s = ShardLinear(w, {ShardKind::kRowParallel, 0, 96}, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->view.weight_scale.shape.size(), 2u);
  EXPECT_EQ(s->view.weight_scale.shape[1], static_cast<int64_t>(used.size()));
  EXPECT_EQ(s->view.weight_g_idx.shape, (std::vector<int64_t>{96}));
  ExpectSliceEqual(w, Full(w), *s);
}

TEST(ShardLinearTest, RowParallelPerTokenFp8NeedsGlobalAmax) {
  auto m = ModelWeights::Load(kFixtures + "/stories260k-fp8-dynamic");
  ASSERT_TRUE(m.ok()) << m.status();
  auto plan = ShardPlan::Create((*m)->config(), 2, 1);
  ASSERT_TRUE(plan.ok());
  auto down = ShardLinear((*m)->layers()[0].down_proj, plan->down, 1);
  auto gate = ShardLinear((*m)->layers()[0].gate_proj, plan->gate, 1);
  ASSERT_TRUE(down.ok() && gate.ok());
  EXPECT_TRUE(down->act_amax_all_reduce);
  EXPECT_FALSE(gate->act_amax_all_reduce);
}

// INT8 W8A8: a row-parallel shard needs every token's min and max over all ranks (the same flag), sym and
// asym.
TEST(ShardLinearTest, RowParallelPerTokenInt8NeedsGlobalRange) {
  for (const char* name : {"/llama-trained-int8-w8a8", "/llama-trained-int8-w8a8-g128-asym"}) {
    SCOPED_TRACE(name);
    auto m = ModelWeights::Load(kFixtures + name);
    ASSERT_TRUE(m.ok()) << m.status();
    auto plan = ShardPlan::Create((*m)->config(), 2, 1);
    ASSERT_TRUE(plan.ok());
    auto down = ShardLinear((*m)->layers()[0].down_proj, plan->down, 1);
    auto o = ShardLinear((*m)->layers()[0].o_proj, plan->o, 1);
    auto gate = ShardLinear((*m)->layers()[0].gate_proj, plan->gate, 1);
    ASSERT_TRUE(down.ok() && o.ok() && gate.ok());
    EXPECT_TRUE(down->act_amax_all_reduce);
    EXPECT_TRUE(o->act_amax_all_reduce);
    EXPECT_FALSE(gate->act_amax_all_reduce);
    ExpectSliceEqual((*m)->layers()[0].down_proj, Full((*m)->layers()[0].down_proj), *down);
  }
}

TEST(ShardLinearTest, BadSlices) {
  auto m = ModelWeights::Load(kFixtures + "/llama-w4a16-g128");
  ASSERT_TRUE(m.ok()) << m.status();
  const LinearWeight& o = (*m)->layers()[0].o_proj;
  EXPECT_EQ(ShardLinear(o, {ShardKind::kRowParallel, 0, 300}, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ShardLinear(o, {ShardKind::kColumnParallel, 5, 5}, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  const absl::Status st = ShardLinear(o, {ShardKind::kRowParallel, 64, 128}, 1).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("model.layers.0.self_attn.o_proj"));
  EXPECT_THAT(st.message(), HasSubstr("group_size 128"));

  auto fp8 = ModelWeights::Load(kFixtures + "/llama-fp8-block");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_THAT(
      ShardLinear((*fp8)->layers()[0].q_proj, {ShardKind::kRowParallel, 160, 250}, 0).status().message(),
      HasSubstr("128-column activation scale group"));
}

ModelConfig Config(int64_t heads, int64_t kv_heads, int64_t intermediate, int64_t vocab) {
  ModelConfig c;
  c.hidden_size = heads * 32;
  c.head_dim = 32;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.num_layers = 1;
  return c;
}

TEST(ShardPlanTest, ErrorsNameTheDimension) {
  EXPECT_THAT(ShardPlan::Create(Config(8, 8, 768, 512), 3, 0).status().message(),
              HasSubstr("num_attention_heads 8"));
  EXPECT_THAT(ShardPlan::Create(Config(12, 6, 768, 512), 4, 0).status().message(),
              HasSubstr("num_key_value_heads 6"));
  EXPECT_THAT(ShardPlan::Create(Config(8, 3, 768, 512), 2, 0).status().message(),
              HasSubstr("num_key_value_heads 3"));
  EXPECT_THAT(ShardPlan::Create(Config(8, 2, 172, 512), 8, 0).status().message(),
              HasSubstr("intermediate_size 172"));
  EXPECT_THAT(ShardPlan::Create(Config(8, 2, 768, 9), 8, 0).status().message(), HasSubstr("vocab_size 9"));
  EXPECT_FALSE(ShardPlan::Create(Config(8, 2, 768, 512), 0, 0).ok());
  auto stories = ModelWeights::Load(kData + "/stories260K-hf");
  ASSERT_TRUE(stories.ok()) << stories.status();
  EXPECT_THAT(ValidateTensorParallel(**stories, 8).message(), HasSubstr("intermediate_size 172"));
  EXPECT_TRUE(ValidateTensorParallel(**stories, 4).ok());
  EXPECT_FALSE(ShardPlan::Create(Config(8, 2, 768, 512), 2, 2).ok());
}

TEST(ShardPlanTest, GqaReplicatesKvHeadsAndPadsVocab) {
  // 32 q heads, 4 kv heads, tp 8: each kv head replicated on 2 ranks.
  const ModelConfig c = Config(32, 4, 14336, 128257);
  for (int rank = 0; rank < 8; ++rank) {
    auto p = ShardPlan::Create(c, 8, rank);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->num_heads_local, 4);
    EXPECT_EQ(p->kv_replicas, 2);
    EXPECT_EQ(p->num_kv_heads_local, 1);
    EXPECT_EQ(p->kv_head_begin, rank / 2);
    // The rank's q heads attend to its kv head (GQA group = 8 q heads per kv head).
    EXPECT_EQ(p->q_head_begin / 8, p->kv_head_begin);
    EXPECT_EQ(p->k.begin, p->kv_head_begin * 32);
    EXPECT_EQ(p->o.begin, p->q.begin);
    EXPECT_EQ(p->down.size(), 14336 / 8);
    EXPECT_EQ(p->vocab_per_rank, 16033);
    EXPECT_EQ(p->lm_head.begin, rank * 16033);
    EXPECT_EQ(p->lm_head.end, rank == 7 ? 128257 : (rank + 1) * 16033);
  }
  auto one = ShardPlan::Create(c, 1, 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->q.kind, ShardKind::kReplicated);
  EXPECT_EQ(one->vocab_per_rank, 128257);
}

// Mixture-of-experts: every expert split like the dense MLP, router and shared-expert gate replicated.
TEST(ShardPlanTest, ExpertsSplitLikeTheDenseMlp) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({"architectures": ["Qwen2MoeForCausalLM"],
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "shared_expert_intermediate_size": 50})",
                                                   "mem");
  ASSERT_TRUE(c.ok()) << c.status();
  for (int rank = 0; rank < 2; ++rank) {
    auto p = ShardPlan::Create(*c, 2, rank);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->ForLinear(LinearRole::kRouter).kind, ShardKind::kReplicated);
    EXPECT_EQ(p->ForLinear(LinearRole::kSharedExpertGate).kind, ShardKind::kReplicated);
    const LinearSlice& gate = p->ForLinear(LinearRole::kExpertGate);
    EXPECT_EQ(gate.kind, ShardKind::kColumnParallel);
    EXPECT_EQ(gate.begin, rank * 16);
    EXPECT_EQ(gate.end, rank * 16 + 16);
    const LinearSlice& down = p->ForLinear(LinearRole::kExpertDown);
    EXPECT_EQ(down.kind, ShardKind::kRowParallel);
    EXPECT_EQ(down.begin, gate.begin);
    EXPECT_EQ(p->ForLinear(LinearRole::kSharedUp).begin, rank * 25);
    EXPECT_EQ(p->ForLinear(LinearRole::kSharedDown).size(), 25);
    const ModelConfig local = LocalConfig(*c, *p);
    EXPECT_EQ(local.moe_intermediate_size, 16);
    EXPECT_EQ(local.shared_expert_intermediate_size, 25);
    EXPECT_EQ(local.num_experts, 4);  // every rank holds a slice of every expert
  }
  EXPECT_THAT(ShardPlan::Create(*c, 4, 0).status().message(),
              HasSubstr("shared_expert_intermediate_size 50"));
  ModelConfig odd = *c;
  odd.moe_intermediate_size = 30;
  EXPECT_THAT(ShardPlan::Create(odd, 4, 0).status().message(), HasSubstr("moe_intermediate_size 30"));

  // On real checkpoints: NVFP4 experts of 32 split on 16 (one scale per 16 columns); W4A16 group 32 does
  // not split its down_proj at tp 2 (16 columns, not a multiple of the group), naming the expert.
  auto nvfp4 = ModelWeights::Load(kFixtures + "/qwen2-moe-nvfp4a16");
  ASSERT_TRUE(nvfp4.ok()) << nvfp4.status();
  EXPECT_TRUE(ValidateTensorParallel(**nvfp4, 2).ok());
  auto w4 = ModelWeights::Load(kFixtures + "/qwen3-moe-w4a16-g32");
  ASSERT_TRUE(w4.ok()) << w4.status();
  const absl::Status refused = ValidateTensorParallel(**w4, 2);
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("model.layers.0.mlp.experts.0.down_proj"));
}

TEST(ShardPlanTest, EmbeddingRowsAreAView) {
  auto m = ModelWeights::Load(kData + "/stories260K-hf");
  ASSERT_TRUE(m.ok()) << m.status();
  auto p = ShardPlan::Create((*m)->config(), 4, 3);
  ASSERT_TRUE(p.ok());
  auto e = ShardEmbedding((*m)->embed_tokens(), *p);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(e->data, (*m)->embed_tokens().data + 384 * 64 * 4);
}

}  // namespace
}  // namespace scored

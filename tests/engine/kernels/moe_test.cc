// The mixture-of-experts kernels against the CPU oracle (ref::MoeRoute, ref::MoeRouteSigmoid,
// ref::MoeCombine) and the grouping's contract: routing with exact ties (the lower expert id first) and with
// renormalization; DeepSeek-V3's sigmoid router (correction bias, group limit with exact group ties, +epsilon
// renormalization, scaling) at the GLM-4.5 / MiniMax-M2 / DeepSeek-V3 shapes; every slot grouped by expert in
// slot order, the weighted combine in ascending expert id with a gated or an ungated shared expert.
#include <algorithm>
#include <cmath>
#include <random>

#include "engine/kernels/moe_combine.h"
#include "engine/kernels/moe_dispatch.h"
#include "engine/kernels/moe_route.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

class MoeKernelsTest : public testing::GpuTest {};

constexpr int64_t kTokens = 37, kExperts = 60, kTopK = 4, kStride = 64, kHidden = 48;

std::vector<float> Logits() {
  std::vector<float> l = testing::RandomNormal(kTokens * kStride, 5, 2.0f);
  for (int64_t t = 0; t < kTokens; t += 3) {  // exact ties among the likely winners
    float* row = l.data() + t * kStride;
    row[7] = row[11] = row[40] = 6.0f;
  }
  return l;
}

TEST_F(MoeKernelsTest, RouteMatchesOracle) {
  const std::vector<float> l = Logits();
  std::vector<float> dense(kTokens * kExperts);
  for (int64_t t = 0; t < kTokens; ++t)
    std::copy_n(l.data() + t * kStride, kExperts, dense.data() + t * kExperts);
  for (bool renormalize : {false, true}) {
    std::vector<int32_t> want_ids(kTokens * kTopK);
    std::vector<float> want_w(kTokens * kTopK);
    ref::MoeRoute(dense.data(), kTokens, kExperts, kTopK, renormalize, want_ids.data(), want_w.data());
    DeviceArray<float> d_l(l);
    DeviceArray<int32_t> d_ids(kTokens * kTopK);
    DeviceArray<float> d_w(kTokens * kTopK);
    ASSERT_TRUE(
        MoeRoute(d_l.get(), kStride, kTokens, kExperts, kTopK, renormalize, d_ids.get(), d_w.get(), stream_)
            .ok());
    Sync();
    const std::vector<int32_t> ids = d_ids.Download();
    const std::vector<float> w = d_w.Download();
    EXPECT_EQ(ids, want_ids) << "renormalize " << renormalize;
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], want_w[i], 2e-7f * want_w[i]) << i;
    EXPECT_EQ(ids[0 * kTopK], 7);  // the tie at 6.0: ids 7, 11, 40 in that order
    EXPECT_EQ(ids[0 * kTopK + 1], 11);
    EXPECT_EQ(ids[0 * kTopK + 2], 40);
  }
}

TEST_F(MoeKernelsTest, GroupCombineMatchesOracle) {
  std::mt19937 rng(9);
  std::vector<int32_t> ids(kTokens * kTopK);
  for (int64_t t = 0; t < kTokens; ++t) {  // k distinct experts per token, some experts unused
    std::vector<int32_t> all(kExperts);
    for (int32_t e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.begin() + 20, rng);
    std::copy_n(all.begin(), kTopK, ids.begin() + t * kTopK);
  }
  const std::vector<float> weights = testing::RandomFloats(kTokens * kTopK, 10, 0.0f, 1.0f);
  // expert_out[t, j]: a deterministic function of (token, expert), as an expert's output would be
  std::vector<float> expert_out(kTokens * kTopK * kHidden);
  for (int64_t s = 0; s < kTokens * kTopK; ++s) {
    for (int64_t i = 0; i < kHidden; ++i) {
      expert_out[s * kHidden + i] = std::sin(0.1f * static_cast<float>((s / kTopK) * 131 + ids[s] * 7 + i));
    }
  }
  const std::vector<float> shared = testing::RandomNormal(kTokens * kHidden, 11);
  const std::vector<float> gate = testing::RandomNormal(kTokens * 2, 12);  // column 1 of a [t, 2] matrix
  std::vector<float> gate_col(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) gate_col[t] = gate[t * 2 + 1];
  std::vector<float> want(kTokens * kHidden);
  ref::MoeCombine(expert_out.data(), ids.data(), weights.data(), kTokens, kTopK, kHidden, shared.data(),
                  gate_col.data(), want.data());
  const std::vector<float> residual = testing::RandomNormal(kTokens * kHidden, 13);
  for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];

  DeviceArray<int32_t> d_ids(ids), d_counts(kExperts), d_slots(kTokens * kTopK);
  DeviceArray<int32_t> group_ws(MoeGroupByExpertWorkspaceBytes(kTokens * kTopK, kExperts) / 4);
  ASSERT_TRUE(MoeGroupByExpert(d_ids.get(), kTokens * kTopK, kExperts, d_counts.get(), d_slots.get(), nullptr,
                               group_ws.get(), static_cast<int64_t>(group_ws.size()) * 4, stream_)
                  .ok());
  Sync();
  const std::vector<int32_t> counts = d_counts.Download(), slots = d_slots.Download();
  int64_t offset = 0;
  DeviceArray<float> d_w(weights), d_acc(std::vector<float>(kTokens * kHidden, 0.0f));
  for (int32_t e = 0; e < kExperts; ++e) {
    std::vector<int32_t> expect;
    for (int64_t s = 0; s < kTokens * kTopK; ++s) {
      if (ids[s] == e) expect.push_back(static_cast<int32_t>(s));
    }
    ASSERT_EQ(counts[e], static_cast<int32_t>(expect.size())) << e;
    ASSERT_TRUE(std::equal(expect.begin(), expect.end(), slots.begin() + offset)) << e;
    if (counts[e] > 0) {  // this expert's output rows in its slots' order, accumulated
      std::vector<float> y(counts[e] * kHidden);
      for (int32_t r = 0; r < counts[e]; ++r) {
        std::copy_n(expert_out.data() + expect[r] * kHidden, kHidden, y.data() + r * kHidden);
      }
      DeviceArray<float> d_y(y);
      ASSERT_TRUE(MoeAccumulate(d_y.get(), d_slots.get() + offset, counts[e], kTopK, d_w.get(), kHidden,
                                d_acc.get(), stream_)
                      .ok());
      Sync();
    }
    offset += counts[e];
  }
  EXPECT_EQ(offset, kTokens * kTopK);
  DeviceArray<float> d_shared(shared), d_gate(gate), d_residual(residual);
  ASSERT_TRUE(
      MoeFinish(d_acc.get(), d_shared.get(), d_gate.get() + 1, 2, kTokens, kHidden, d_residual.get(), stream_)
          .ok());
  Sync();
  const std::vector<float> got = d_residual.Download();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6f * (1.0f + std::fabs(want[i]))) << i;
}

// ref::MoeRouteSigmoid's cases: MiniMax-M2 (no groups, a plain renormalization), GLM-4.5 (one group, 1e-20,
// 2.5x), DeepSeek-V3 (256 experts in 8 groups, 4 kept, top 8), a group limit over 60 experts, and 512 experts
// (the widest lane). Exact ties among experts and among groups on every third token. Ids bitwise; weights to
// 4 ulp (the device's double exp and the host's may round one sigmoid to neighbouring fp32 values).
TEST_F(MoeKernelsTest, RouteSigmoidMatchesOracle) {
  struct Case {
    int64_t experts, top_k, groups, topk_groups;
    bool bias, renormalize;
    float epsilon, scale;
  };
  const Case cases[] = {
      {4, 2, 1, 1, true, true, 0.0f, 1.0f},         {8, 2, 1, 1, true, true, 1e-20f, 2.5f},
      {256, 8, 8, 4, true, true, 1e-20f, 2.5f},     {60, 4, 6, 2, true, false, 0.0f, 1.0f},
      {512, 8, 16, 4, false, true, 1e-20f, 2.827f}, {64, 6, 8, 3, true, true, 1e-20f, 1.0f},
  };
  constexpr int64_t kT = 41;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.experts << " experts, " << c.groups << " groups");
    const int64_t stride = c.experts + 4;
    std::vector<float> l = testing::RandomNormal(kT * stride, 21, 2.0f);
    for (int64_t t = 0; t < kT;
         t += 3) {  // exact ties: experts 1, 2 (and 5), or groups 0 and 1 and their experts
      float* row = l.data() + t * stride;
      row[1] = row[2] = 5.0f;
      if (c.experts > 5) row[5] = 5.0f;
      if (c.groups > 1) {
        const int64_t g = c.experts / c.groups;
        for (int64_t i = 0; i < g; ++i) row[i] = row[g + i];  // groups 0 and 1 equal
      }
    }
    std::vector<float> bias = testing::RandomNormal(c.experts, 22, 0.05f);
    bias[2] = bias[1];  // the ties above stay exact ties of the choice
    if (c.experts > 5) bias[5] = bias[1];
    if (c.groups > 1) {
      const int64_t g = c.experts / c.groups;
      for (int64_t i = 0; i < g; ++i) bias[i] = bias[g + i];
    }
    std::vector<float> dense(kT * c.experts);
    for (int64_t t = 0; t < kT; ++t)
      std::copy_n(l.data() + t * stride, c.experts, dense.data() + t * c.experts);
    ref::SigmoidRouting r;
    r.correction_bias = c.bias ? bias.data() : nullptr;
    r.num_groups = c.groups;
    r.topk_groups = c.topk_groups;
    r.renormalize = c.renormalize;
    r.renorm_epsilon = c.epsilon;
    r.scaling_factor = c.scale;
    std::vector<int32_t> want_ids(kT * c.top_k);
    std::vector<float> want_w(kT * c.top_k);
    ref::MoeRouteSigmoid(dense.data(), kT, c.experts, c.top_k, r, want_ids.data(), want_w.data());
    DeviceArray<float> d_l(l), d_bias(bias);
    DeviceArray<int32_t> d_ids(kT * c.top_k);
    DeviceArray<float> d_w(kT * c.top_k);
    SigmoidRouting routing;
    routing.correction_bias = c.bias ? d_bias.get() : nullptr;
    routing.num_groups = c.groups;
    routing.topk_groups = c.topk_groups;
    routing.renormalize = c.renormalize;
    routing.renorm_epsilon = c.epsilon;
    routing.scaling_factor = c.scale;
    ASSERT_TRUE(
        MoeRouteSigmoid(d_l.get(), stride, kT, c.experts, c.top_k, routing, d_ids.get(), d_w.get(), stream_)
            .ok());
    Sync();
    EXPECT_EQ(d_ids.Download(), want_ids);
    const std::vector<float> w = d_w.Download();
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], want_w[i], 4.8e-7f * std::fabs(want_w[i])) << i;
  }
  // Shapes the router cannot take are refused.
  SigmoidRouting bad;
  bad.num_groups = 3;
  DeviceArray<float> d_l(std::vector<float>(8, 0.0f));
  DeviceArray<int32_t> d_ids(2);
  DeviceArray<float> d_w(2);
  EXPECT_FALSE(MoeRouteSigmoid(d_l.get(), 8, 1, 8, 2, bad, d_ids.get(), d_w.get(), stream_).ok());
  bad.num_groups = 4;
  bad.topk_groups = 1;
  EXPECT_FALSE(MoeRouteSigmoid(d_l.get(), 8, 1, 8, 3, bad, d_ids.get(), d_w.get(), stream_).ok());
}

// DeepSeek-V3's ungated shared experts: MoeFinish and MoeCombineGroupedFinish with a shared output and no
// gate add it unscaled after the routed sum, bitwise ref::MoeCombine with shared_gate nullptr.
TEST_F(MoeKernelsTest, UngatedSharedExpertMatchesOracle) {
  constexpr int64_t kT = 9, kK = 3, kH = 20;
  std::vector<int32_t> ids(kT * kK);
  for (int64_t s = 0; s < kT * kK; ++s)
    ids[s] = static_cast<int32_t>((s % kK) * 5 + s / kK % 4);  // ascending
  const std::vector<float> weights = testing::RandomFloats(kT * kK, 30, 0.0f, 2.5f);
  const std::vector<float> expert_out = testing::RandomNormal(kT * kK * kH, 31);
  const std::vector<float> shared = testing::RandomNormal(kT * kH, 32);
  const std::vector<float> residual = testing::RandomNormal(kT * kH, 33);
  std::vector<float> want(kT * kH);
  ref::MoeCombine(expert_out.data(), ids.data(), weights.data(), kT, kK, kH, shared.data(), nullptr,
                  want.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
  // The grouped path: slot s's row is s (ascending within each token, as its expert ids are).
  std::vector<int32_t> rows(kT * kK);
  for (int64_t s = 0; s < kT * kK; ++s) rows[s] = static_cast<int32_t>(s);
  DeviceArray<float> d_y(expert_out), d_w(weights), d_shared(shared), d_residual(residual);
  DeviceArray<int32_t> d_rows(rows);
  ASSERT_TRUE(MoeCombineGroupedFinish(d_y.get(), d_rows.get(), d_w.get(), kT, kK, kH, d_shared.get(), nullptr,
                                      0,
                                      /*accumulate=*/true, d_residual.get(), stream_)
                  .ok());
  Sync();
  std::vector<float> got = d_residual.Download();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  // The one-by-one path: the routed sum in ascending id (acc, as MoeAccumulate leaves it), then MoeFinish.
  std::vector<float> acc(kT * kH);
  ref::MoeCombine(expert_out.data(), ids.data(), weights.data(), kT, kK, kH, nullptr, nullptr, acc.data());
  DeviceArray<float> d_acc(acc), d_residual2(residual);
  ASSERT_TRUE(MoeFinish(d_acc.get(), d_shared.get(), nullptr, 0, kT, kH, d_residual2.get(), stream_).ok());
  Sync();
  got = d_residual2.Download();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

// The grouping at a forward's scale and at its edges: many chunks of kMoeGroupChunkSlots with a partial last
// one, a lone expert, the most experts, ids outside [0, num_experts) left out; every expert's slots in slot
// order, bitwise the host's stable grouping, and the offsets. A workspace one byte short is refused.
TEST_F(MoeKernelsTest, GroupByExpertAtScale) {
  struct Case {
    int64_t slots, experts;
  };
  for (const Case& c : {Case{131072 - 37, 128}, Case{2000, 1024}, Case{300, 1}, Case{5, 60}, Case{256, 7}}) {
    std::mt19937 rng(static_cast<uint32_t>(c.slots * 31 + c.experts));
    // skewed: half the slots on the first eighth of the experts (long runs within a chunk)
    std::uniform_int_distribution<int64_t> any(0, c.experts - 1),
        few(0, std::max<int64_t>(c.experts / 8, 1) - 1);
    std::vector<int32_t> ids(c.slots);
    for (int64_t s = 0; s < c.slots; ++s) ids[s] = static_cast<int32_t>(s % 2 == 0 ? any(rng) : few(rng));
    if (c.slots > 100) {
      ids[17] = -1;
      ids[50] = static_cast<int32_t>(c.experts);  // not an expert
    }
    std::vector<int32_t> want_counts(c.experts, 0), want_slots;
    for (int64_t e = 0; e < c.experts; ++e) {
      for (int64_t s = 0; s < c.slots; ++s) {
        if (ids[s] == e) {
          want_slots.push_back(static_cast<int32_t>(s));
          ++want_counts[e];
        }
      }
    }
    DeviceArray<int32_t> d_ids(ids), counts(c.experts), slots(c.slots), offsets(c.experts + 1);
    const int64_t ws_bytes = MoeGroupByExpertWorkspaceBytes(c.slots, c.experts);
    DeviceArray<int32_t> ws(ws_bytes / 4);
    ws.Poison();
    slots.Poison();
    EXPECT_FALSE(MoeGroupByExpert(d_ids.get(), c.slots, c.experts, counts.get(), slots.get(), offsets.get(),
                                  ws.get(), ws_bytes - 1, stream_)
                     .ok());
    ASSERT_TRUE(MoeGroupByExpert(d_ids.get(), c.slots, c.experts, counts.get(), slots.get(), offsets.get(),
                                 ws.get(), ws_bytes, stream_)
                    .ok());
    Sync();
    EXPECT_EQ(counts.Download(), want_counts) << c.slots << " slots, " << c.experts << " experts";
    std::vector<int32_t> want_offsets(c.experts + 1, 0);
    for (int64_t e = 0; e < c.experts; ++e) want_offsets[e + 1] = want_offsets[e] + want_counts[e];
    EXPECT_EQ(offsets.Download(), want_offsets) << c.slots << " slots, " << c.experts << " experts";
    const std::vector<int32_t> got = slots.Download();
    ASSERT_TRUE(std::equal(want_slots.begin(), want_slots.end(), got.begin()))
        << c.slots << " slots, " << c.experts << " experts";
  }
}

}  // namespace
}  // namespace scored::kernels

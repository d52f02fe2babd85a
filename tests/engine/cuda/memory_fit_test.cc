// SmallestTpThatFits (engine/cuda/rank.h): the --tp that the start-up error of a reference model that does
// not fit suggests, on the README's "what fits where" cases. Host code: runs without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/cuda/rank.h"

namespace scored::cuda {
namespace {

constexpr int64_t kGB = 1000 * 1000 * 1000;
constexpr int64_t kH100 = 79 * kGB;   // usable per GPU, about
constexpr int64_t kH200 = 140 * kGB;  //
constexpr int64_t kActs = 5 * kGB;    // activations per GPU

TEST(MemoryFitTest, SuggestsTheSmallestTpThatHoldsBothModels) {
  // Llama-3-70B bf16 (141 GB) + its W4A16 (39.5 GB) at --tp 2 on H100s: 90 GB per GPU; four H100s hold it.
  EXPECT_EQ(SmallestTpThatFits((141 + 39) * kGB / 2, 2, kActs, kH100), 4);
  // ... and at --tp 1 on one H100: four too (two give 90 GB + activations).
  EXPECT_EQ(SmallestTpThatFits((141 + 39) * kGB, 1, kActs, kH100), 4);
  // On H200s two suffice.
  EXPECT_EQ(SmallestTpThatFits((141 + 39) * kGB, 1, kActs, kH200), 2);
  // Qwen2.5-32B pair (85 GB) on one H100: two.
  EXPECT_EQ(SmallestTpThatFits(85 * kGB, 1, kActs, kH100), 2);
  // Mistral-Large-2 pair (311 GB) at --tp 4 on H100s: eight.
  EXPECT_EQ(SmallestTpThatFits(311 * kGB / 4, 4, kActs, kH100), 8);
  // Nothing up to 8 GPUs: 0.
  EXPECT_EQ(SmallestTpThatFits(1000 * kGB, 1, kActs, kH100), 0);
  EXPECT_EQ(SmallestTpThatFits(100 * kGB, 8, kActs, kH100), 0);
  // Activations alone too large: no tp helps.
  EXPECT_EQ(SmallestTpThatFits(10 * kGB, 1, 100 * kGB, kH100), 0);
}

}  // namespace
}  // namespace scored::cuda

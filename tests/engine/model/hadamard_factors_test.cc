// FactorHadamard on matrices of every form compressed-tensors writes: Sylvester with random signs (its
// power-of-two random-hadamard), a signed Kronecker of a non-Sylvester core with H_L (its other sizes), a
// matrix with no structure (core = T^T), and the real stored matrices of the QuIP fixture. Every entry of
// the factors' matrix must equal the stored one; the core must be the smallest the matrix allows.
#include "engine/model/hadamard_factors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "tests/engine/model/hadamard_matrices.h"

namespace scored {
namespace {

const std::string kFixtures = SCORED_FIXTURES_DIR;

using testing_hadamard::Structured;

TensorView View(const std::vector<double>& t, int64_t n) { return testing_hadamard::F64View(t, n); }

void ExpectReproduces(const HadamardFactors& f, const TensorView& m) {
  const int64_t n = m.shape[0];
  ASSERT_EQ(f.size, n);
  ASSERT_EQ(f.chunk * f.core_size, n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double v;
      std::memcpy(&v, m.data + (i * n + j) * 8, 8);
      wrong += f.Entry(i, j) != static_cast<int>(v);
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(HadamardFactorsTest, SylvesterWithSignsIsOneTransform) {
  const std::vector<double> t = Structured(1, 1024, 3);
  auto f = FactorHadamard(View(t, 1024));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->chunk, 1024);
  EXPECT_EQ(f->core_size, 1);
  ExpectReproduces(*f, View(t, 1024));
}

TEST(HadamardFactorsTest, KroneckerCoreIsFound) {
  for (const auto& [k, l] : {std::pair<int64_t, int64_t>{12, 16}, {28, 64}, {3, 8}}) {
    const std::vector<double> t = Structured(k, l, static_cast<uint32_t>(k + l));
    auto f = FactorHadamard(View(t, k * l));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->chunk, l) << "K " << k;
    EXPECT_EQ(f->core_size, k);
    ExpectReproduces(*f, View(t, k * l));
  }
}

TEST(HadamardFactorsTest, NoStructureKeepsTheWholeMatrixAsCore) {
  const std::vector<double> t = Structured(20, 1, 5);
  auto f = FactorHadamard(View(t, 20));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->chunk, 1);
  EXPECT_EQ(f->core_size, 20);
  ExpectReproduces(*f, View(t, 20));
}

TEST(HadamardFactorsTest, RefusesNonSignEntries) {
  std::vector<double> t = Structured(1, 8, 1);
  t[9] = 0.5;
  auto f = FactorHadamard(View(t, 8));
  ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(f.status().message()).find("test.matrix"), std::string::npos) << f.status();
  std::vector<double> wide(8 * 4, 1.0);
  TensorView v = View(wide, 8);
  v.shape = {8, 4};
  EXPECT_EQ(FactorHadamard(v).status().code(), absl::StatusCode::kInvalidArgument);
}

// The matrices llm-compressor's QuIPModifier stored in the fixture: random-hadamard of sizes 64 (a power of
// two: one Walsh-Hadamard transform) and 172 (compressed-tensors' own order-172 table, no Kronecker factor).
TEST(HadamardFactorsTest, RealQuipMatrices) {
  auto store = TensorStore::Open(kFixtures + "/stories260k-quip-w4a16-channel");
  ASSERT_TRUE(store.ok()) << store.status();
  struct Case {
    const char* name;
    int64_t chunk, core_size;
  };
  for (const Case& c : {Case{"model.layers.0.self_attn.q_proj.v_input.weight", 64, 1},
                        Case{"model.layers.0.mlp.down_proj.v_input.weight", 1, 172}}) {
    SCOPED_TRACE(c.name);
    auto m = (*store)->Get(c.name);
    ASSERT_TRUE(m.ok()) << m.status();
    auto f = FactorHadamard(*m);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->chunk, c.chunk);
    EXPECT_EQ(f->core_size, c.core_size);
    ExpectReproduces(*f, *m);
  }
}

}  // namespace
}  // namespace scored

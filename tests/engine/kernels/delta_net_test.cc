// Qwen3.5's Gated DeltaNet kernels (delta_net_conv.h, delta_net_prep.h, delta_net_rule.h,
// delta_net_norm.h) against the CPU reference ops (engine/reference/ops.h: CausalConv1dSilu, L2NormRows,
// GatedDeltaRule, GatedRmsNorm, and ReferenceEngine::DeltaNetBlock's beta / g arithmetic), each applied to
// every sequence of a varlen batch alone, at the tiny fixture's shapes (2 k heads, 4 v heads, 16 x 16,
// conv 4) and Qwen3.5-27B's (16 k heads, 48 v heads, 128 x 128, conv 4).
//
// Tolerances, and why:
//  - conv, prep (q, k, beta, g) and the gated norm reproduce the oracle's double arithmetic (exact products,
//    the same rounding points); only the order of a double sum and CUDA's double exp / log1p (<= 1-2 double
//    ulps) differ, which moves an fp32 result by one ulp only when it lands on a rounding boundary. So fp32
//    results must be within kNearExactUlps = 1 fp32 ulp of the oracle (almost all bit-identical: the count
//    of differing elements is printed), bf16 results within 1 bf16 ulp of the oracle rounded to bf16.
//  - the rule keeps its state in fp32 (the oracle in double): every token adds a few fp32 roundings of the
//    state, and with |k| = 1 the update is a contraction, so the error grows slowly with the sequence
//    length. kRuleTol bounds max |got - want| / max |want| over a test's outputs. No GPU was at hand when
//    the bound was set: a numpy emulation of the kernel's fp32 arithmetic (its per-thread partial sums,
//    butterfly and FMAs, on inputs drawn like these) gave 0.7e-7 to 2.3e-7 at both shapes and at 4000
//    tokens, so kRuleTol is ~10x that. kChainTol likewise bounds the whole chain (conv -> prep -> rule ->
//    gated norm) relative to max |out|: emulated 1.5e-7 on the chain's inputs, up to 1.5e-6 with
//    zero-mean v (rows of small rms magnify the rule's error). The [ measured ] lines print the values.
//  - a token's result must not depend on its batch: a sequence run alone is compared with its rows of the
//    batched run bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/delta_net_conv.h"
#include "engine/kernels/delta_net_norm.h"
#include "engine/kernels/delta_net_prep.h"
#include "engine/kernels/delta_net_rule.h"
#include "engine/reference/ops.h"
#include "tests/engine/kernels/kernel_test_util.h"

namespace scored::kernels {
namespace {

using testing::DeviceArray;

constexpr int64_t kNearExactUlps = 1;
// The rule's max error relative to max |want|, and the chain's: see the file comment.
constexpr double kRuleTol = 2e-6;
constexpr double kChainTol = 5e-6;
// The chunked form (GatedDeltaRuleChunked): with kTf32x3 its products are fp32-accurate, so it keeps the
// recurrent form's bounds (measured on an H200: 1e-6 at both shapes, up to 4096 tokens); with kTf32 each
// operand of a product is rounded to 10 mantissa bits (2^-11 relative), carried through the chunk's
// products: kTf32Tol of max |want| (measured 6e-4 to 8e-4).
constexpr double kTf32Tol = 4e-3;
constexpr double kNormEps = 1e-6;

struct Shape {
  const char* name;
  int64_t nk, nv, dk, dv, kernel;
  int64_t key_dim() const { return nk * dk; }
  int64_t value_dim() const { return nv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};
constexpr Shape kTiny = {"tiny", 2, 4, 16, 16, 4};
constexpr Shape k27B = {"27B", 16, 48, 128, 128, 4};

const std::vector<int32_t>& Lengths() {
  static const std::vector<int32_t> lengths = {5, 130, 1, 300};
  return lengths;
}

std::vector<int32_t> CuSeqlens(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int32_t len : lengths) cu.push_back(cu.back() + len);
  return cu;
}

// Rows [begin, end) of a [rows, stride] array, columns [col, col + width), as a contiguous array.
std::vector<float> Slice(const std::vector<float>& a, int64_t stride, int64_t begin, int64_t end, int64_t col,
                         int64_t width) {
  std::vector<float> out((end - begin) * width);
  for (int64_t r = begin; r < end; ++r) {
    std::copy_n(a.begin() + r * stride + col, width, out.begin() + (r - begin) * width);
  }
  return out;
}

// Distance of two floats in units in the last place (ordered bit patterns); NaN or inf: a huge value.
int64_t UlpDistance(float a, float b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return int64_t{1} << 40;
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof(i));
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

struct UlpStats {
  int64_t max_ulps = 0;
  int64_t differing = 0;
  int64_t worst = -1;
};

// got vs want in fp32 ulps; for bf16 results (bf16 = true) in bf16 ulps against want rounded to bf16.
UlpStats CompareUlps(const std::vector<float>& got, const std::vector<float>& want, bool bf16 = false) {
  UlpStats s;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const float w = bf16 ? RoundToBf16(want[i]) : want[i];
    int64_t d = UlpDistance(got[i], w);
    if (bf16) d = (d + 65535) >> 16;  // widened bf16 values sit 2^16 fp32 ulps apart
    if (d > 0) ++s.differing;
    if (d > s.max_ulps) {
      s.max_ulps = d;
      s.worst = static_cast<int64_t>(i);
    }
  }
  return s;
}

void ReportUlps(const std::string& what, const UlpStats& s, size_t n) {
  std::cout << "[ measured ] " << what << ": max_ulps=" << s.max_ulps << " differing=" << s.differing
            << " of " << n << " worst_index=" << s.worst << std::endl;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// max |got - want| / max |want|, and the count of non-finite outputs.
double RuleError(const std::vector<float>& got, const std::vector<float>& want, int64_t* not_finite) {
  const testing::ErrorStats s = testing::CompareArrays(got, want);
  *not_finite = s.not_finite;
  return s.max_abs / std::max(1e-30, MaxAbs(want));
}

float Sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

// DeltaNetBlock's g = -exp(A_log) * softplus(a + dt_bias) (torch's threshold 20), in its fp32 steps.
float LogDecay(float a, float dt_bias, float neg_a) {
  const float x = a + dt_bias;
  const float sp = x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x))));
  return neg_a * sp;
}

// The oracle of DeltaNetPrep on one [num_tokens, stride] fp32 buffer (q | k at the front), in place.
void PrepQkReference(std::vector<float>* qkv, int64_t stride, int64_t num_tokens, const Shape& s) {
  const float q_scale = static_cast<float>(std::sqrt(static_cast<double>(s.dk)));
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = qkv->data() + t * stride;
    ref::L2NormRows(row, 2 * s.nk, s.dk, 1e-6);
    for (int64_t i = 0; i < s.key_dim(); ++i) row[i] /= q_scale;
  }
}

// Inputs of the rule like the model's: q, k L2-normalized (q scaled), v ~ N(0, 1) in one [tokens, conv_dim]
// buffer; g and beta [tokens, nv] from DeltaNetBlock's formulas, with half the heads decaying slowly (g in
// [log 0.9, 0]: long memory, where fp32 rounding of the state accumulates most).
struct RuleInputs {
  std::vector<float> qkv, g, beta;
};

RuleInputs MakeRuleInputs(const Shape& s, int64_t tokens, uint32_t seed) {
  RuleInputs in;
  in.qkv = testing::RandomNormal(tokens * s.conv_dim(), seed, 1.0f);
  PrepQkReference(&in.qkv, s.conv_dim(), tokens, s);
  const std::vector<float> a = testing::RandomNormal(tokens * s.nv, seed + 1, 2.0f);
  const std::vector<float> b = testing::RandomNormal(tokens * s.nv, seed + 2, 1.5f);
  const std::vector<float> slow = testing::RandomFloats(tokens * s.nv, seed + 3, 0.9f, 1.0f);
  const std::vector<float> neg_a = testing::RandomFloats(s.nv, seed + 4, -3.0f, -0.05f);
  in.g.resize(tokens * s.nv);
  in.beta.resize(tokens * s.nv);
  for (int64_t i = 0; i < tokens * s.nv; ++i) {
    const int64_t h = i % s.nv;
    in.g[i] = h % 2 == 0 ? std::log(slow[i]) : LogDecay(a[i], 0.5f, neg_a[h]);
    in.beta[i] = Sigmoid(b[i]);
  }
  return in;
}

// ref::GatedDeltaRule of every sequence alone; out [tokens, nv, dv].
std::vector<float> RuleReference(const RuleInputs& in, const Shape& s, const std::vector<int32_t>& cu) {
  const int64_t tokens = cu.back();
  std::vector<float> out(tokens * s.value_dim());
  for (size_t seq = 0; seq + 1 < cu.size(); ++seq) {
    const int64_t b = cu[seq], e = cu[seq + 1];
    if (e == b) continue;
    const std::vector<float> q = Slice(in.qkv, s.conv_dim(), b, e, 0, s.key_dim());
    const std::vector<float> k = Slice(in.qkv, s.conv_dim(), b, e, s.key_dim(), s.key_dim());
    const std::vector<float> v = Slice(in.qkv, s.conv_dim(), b, e, 2 * s.key_dim(), s.value_dim());
    const std::vector<float> g = Slice(in.g, s.nv, b, e, 0, s.nv);
    const std::vector<float> beta = Slice(in.beta, s.nv, b, e, 0, s.nv);
    ref::GatedDeltaRule(q.data(), k.data(), v.data(), g.data(), beta.data(), e - b, s.nk, s.nv, s.dk, s.dv,
                        out.data() + b * s.value_dim());
  }
  return out;
}

// The rule's two forms, the chunked one with either rounding of its products.
enum class Form { kRecurrent, kChunkedTf32x3, kChunkedTf32 };
constexpr Form kForms[] = {Form::kRecurrent, Form::kChunkedTf32x3, Form::kChunkedTf32};

const char* FormName(Form f) {
  switch (f) {
    case Form::kRecurrent:
      return "recurrent";
    case Form::kChunkedTf32x3:
      return "chunked tf32x3";
    case Form::kChunkedTf32:
      return "chunked tf32";
  }
  return "?";
}

// The bound of a form's max error relative to max |want|.
double FormTol(Form f) { return f == Form::kChunkedTf32 ? kTf32Tol : kRuleTol; }

// The rule in `form` on device arrays: q | k | v of each token in one [tokens, conv_dim] row (the engine's
// layout).
absl::Status RunRuleOnDevice(Form form, const Shape& s, const float* qkv, int64_t stride, const float* g,
                             const float* beta, const int32_t* cu, int64_t seqs, int64_t tokens, float* out,
                             cudaStream_t stream) {
  const float *q = qkv, *k = qkv + s.key_dim(), *v = qkv + 2 * s.key_dim();
  if (form == Form::kRecurrent) {
    return GatedDeltaRule(q, k, v, stride, g, beta, cu, seqs, tokens, s.nk, s.nv, s.dk, s.dv, out, stream);
  }
  const DeltaRuleMath math = form == Form::kChunkedTf32 ? DeltaRuleMath::kTf32 : DeltaRuleMath::kTf32x3;
  return GatedDeltaRuleChunked(q, k, v, stride, g, beta, cu, seqs, tokens, s.nk, s.nv, s.dk, s.dv, math, out,
                               stream);
}

// Runs the rule in `form` on device copies of `in`.
std::vector<float> RunRule(const RuleInputs& in, const Shape& s, const std::vector<int32_t>& cu,
                           cudaStream_t stream, Form form = Form::kRecurrent) {
  const int64_t tokens = cu.back();
  DeviceArray<float> d_qkv(in.qkv), d_g(in.g), d_beta(in.beta), d_out(tokens * s.value_dim());
  DeviceArray<int32_t> d_cu(cu);
  d_out.Poison();
  const absl::Status st =
      RunRuleOnDevice(form, s, d_qkv.get(), s.conv_dim(), d_g.get(), d_beta.get(), d_cu.get(),
                      static_cast<int64_t>(cu.size()) - 1, tokens, d_out.get(), stream);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return d_out.Download();
}

class DeltaNetTest : public testing::GpuTest {};

TEST_F(DeltaNetTest, ConvMatchesReferencePerSequence) {
  for (const Shape& s : {kTiny, k27B}) {
    const std::vector<int32_t> cu = CuSeqlens(Lengths());
    const int64_t tokens = cu.back(), channels = s.conv_dim(), stride = channels + 24;
    const std::vector<float> x = testing::RoundedToBf16(testing::RandomNormal(tokens * stride, 101, 1.5f));
    const std::vector<float> w = testing::RandomFloats(channels * s.kernel, 102, -0.6f, 0.6f);
    std::vector<float> want(tokens * channels);
    for (size_t seq = 0; seq + 1 < cu.size(); ++seq) {
      const std::vector<float> xs = Slice(x, stride, cu[seq], cu[seq + 1], 0, channels);
      ref::CausalConv1dSilu(xs.data(), w.data(), cu[seq + 1] - cu[seq], channels, s.kernel,
                            want.data() + cu[seq] * channels);
    }
    DeviceArray<float> d_x32(x), d_w(w), d_out32(tokens * channels), d_out16(tokens * channels);
    DeviceArray<bf16_t> d_x16(testing::ToBf16(x));
    DeviceArray<int32_t> d_cu(cu);
    d_out32.Poison();
    d_out16.Poison();
    const int64_t seqs = static_cast<int64_t>(cu.size()) - 1;
    ASSERT_TRUE(DeltaNetConv1dSilu(d_x32.get(), stride, d_w.get(), d_cu.get(), seqs, tokens, channels,
                                   s.kernel, d_out32.get(), stream_)
                    .ok());
    ASSERT_TRUE(DeltaNetConv1dSilu(d_x16.get(), stride, d_w.get(), d_cu.get(), seqs, tokens, channels,
                                   s.kernel, d_out16.get(), stream_)
                    .ok());
    Sync();
    const std::vector<float> got32 = d_out32.Download(), got16 = d_out16.Download();
    const UlpStats u = CompareUlps(got32, want);
    ReportUlps(std::string("conv ") + s.name + " f32 input", u, want.size());
    EXPECT_LE(u.max_ulps, kNearExactUlps) << s.name << " at " << u.worst;
    // The bf16 input holds the same values: the same fp32 results bit for bit.
    EXPECT_EQ(testing::CountBitDifferences(got32, got16), 0) << s.name;
  }
}

TEST_F(DeltaNetTest, PrepMatchesReference) {
  for (const Shape& s : {kTiny, k27B}) {
    const std::vector<int32_t> cu = CuSeqlens(Lengths());
    const int64_t tokens = cu.back(), stride = s.conv_dim() + 8, b_stride = s.nv + 3, a_stride = s.nv + 5;
    const std::vector<float> qkv = testing::RandomNormal(tokens * stride, 111, 1.0f);
    const std::vector<float> b = testing::RoundedToBf16(testing::RandomNormal(tokens * b_stride, 112, 3.0f));
    std::vector<float> a = testing::RoundedToBf16(testing::RandomNormal(tokens * a_stride, 113, 4.0f));
    for (int64_t t = 0; t < tokens; t += 7) a[t * a_stride + t % s.nv] = 19.5f + static_cast<float>(t % 5);
    const std::vector<float> neg_a = testing::RandomFloats(s.nv, 114, -8.0f, -0.01f);
    const std::vector<float> dt_bias = testing::RandomFloats(s.nv, 115, -1.0f, 1.0f);

    std::vector<float> want_qkv = qkv, want_beta(tokens * s.nv), want_g(tokens * s.nv);
    PrepQkReference(&want_qkv, stride, tokens, s);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < s.nv; ++h) {
        want_beta[t * s.nv + h] = Sigmoid(b[t * b_stride + h]);
        want_g[t * s.nv + h] = LogDecay(a[t * a_stride + h], dt_bias[h], neg_a[h]);
      }
    }
    DeviceArray<float> d_na(neg_a), d_dt(dt_bias);
    for (bool bf16 : {false, true}) {
      const std::string name = std::string("prep ") + s.name + (bf16 ? " bf16 a/b" : " f32 a/b");
      DeviceArray<float> d_qkv(qkv), d_beta(tokens * s.nv), d_g(tokens * s.nv);
      DeviceArray<float> d_b32(b), d_a32(a);
      DeviceArray<bf16_t> d_b16(testing::ToBf16(b)), d_a16(testing::ToBf16(a));
      d_beta.Poison();
      d_g.Poison();
      const absl::Status st =
          bf16 ? DeltaNetPrep(d_qkv.get(), stride, d_b16.get(), b_stride, d_a16.get(), a_stride, d_na.get(),
                              d_dt.get(), tokens, s.nk, s.nv, s.dk, d_beta.get(), d_g.get(), stream_)
               : DeltaNetPrep(d_qkv.get(), stride, d_b32.get(), b_stride, d_a32.get(), a_stride, d_na.get(),
                              d_dt.get(), tokens, s.nk, s.nv, s.dk, d_beta.get(), d_g.get(), stream_);
      ASSERT_TRUE(st.ok()) << st;
      Sync();
      const std::vector<float> got_qkv = d_qkv.Download();
      // q | k within an ulp; v and the extra columns untouched.
      std::vector<float> got_qk, want_qk;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t c = 0; c < stride; ++c) {
          const int64_t e = t * stride + c;
          if (c < 2 * s.key_dim()) {
            got_qk.push_back(got_qkv[e]);
            want_qk.push_back(want_qkv[e]);
          } else {
            ASSERT_EQ(std::memcmp(&got_qkv[e], &qkv[e], sizeof(float)), 0) << name << " column " << c;
          }
        }
      }
      const UlpStats uq = CompareUlps(got_qk, want_qk);
      const UlpStats ub = CompareUlps(d_beta.Download(), want_beta);
      const UlpStats ug = CompareUlps(d_g.Download(), want_g);
      ReportUlps(name + " q|k", uq, want_qk.size());
      ReportUlps(name + " beta", ub, want_beta.size());
      ReportUlps(name + " g", ug, want_g.size());
      EXPECT_LE(uq.max_ulps, kNearExactUlps) << name;
      EXPECT_LE(ub.max_ulps, kNearExactUlps) << name;
      EXPECT_LE(ug.max_ulps, kNearExactUlps) << name;
    }
  }
}

TEST_F(DeltaNetTest, RuleMatchesReferencePerSequence) {
  for (const Shape& s : {kTiny, k27B}) {
    const std::vector<int32_t> cu = CuSeqlens(Lengths());
    const RuleInputs in = MakeRuleInputs(s, cu.back(), 121);
    const std::vector<float> want = RuleReference(in, s, cu);
    for (Form form : kForms) {
      const std::vector<float> got = RunRule(in, s, cu, stream_, form);
      int64_t not_finite = 0;
      const double err = RuleError(got, want, &not_finite);
      const std::string name = std::string("rule ") + FormName(form) + " " + s.name;
      testing::Report(name + " (normalized max error " + std::to_string(err) + ")",
                      testing::CompareArrays(got, want));
      EXPECT_EQ(not_finite, 0) << name;
      EXPECT_LE(err, FormTol(form)) << name;
    }
  }
}

// Longer sequences (4000 and 96 tokens, the tiny shape; 1024 tokens at the 27B shape): the fp32 state's
// error must stay bounded, not compound.
TEST_F(DeltaNetTest, RuleErrorStaysBoundedOnLongSequences) {
  struct Case {
    Shape shape;
    std::vector<int32_t> lengths;
  };
  for (const Case& c : {Case{kTiny, {4000, 96}}, Case{k27B, {1024}}}) {
    const std::vector<int32_t> cu = CuSeqlens(c.lengths);
    const RuleInputs in = MakeRuleInputs(c.shape, cu.back(), 131);
    const std::vector<float> want = RuleReference(in, c.shape, cu);
    for (Form form : kForms) {
      const std::vector<float> got = RunRule(in, c.shape, cu, stream_, form);
      int64_t not_finite = 0;
      const double err = RuleError(got, want, &not_finite);
      const std::string name = std::string("rule long ") + FormName(form) + " " + c.shape.name + " " +
                               std::to_string(cu.back()) + " tokens";
      testing::Report(name + " (normalized max error " + std::to_string(err) + ")",
                      testing::CompareArrays(got, want));
      EXPECT_EQ(not_finite, 0) << name;
      EXPECT_LE(err, FormTol(form)) << name;
    }
  }
}

// A sequence's rows do not depend on the batch: each sequence run alone equals its rows of the batch run.
TEST_F(DeltaNetTest, RuleIsBatchInvariant) {
  for (const Shape& s : {kTiny, k27B}) {
    const std::vector<int32_t> cu = CuSeqlens(Lengths());
    const RuleInputs in = MakeRuleInputs(s, cu.back(), 141);
    for (Form form : kForms) {
      const std::vector<float> batched = RunRule(in, s, cu, stream_, form);
      for (size_t seq = 0; seq + 1 < cu.size(); ++seq) {
        const int64_t b = cu[seq], e = cu[seq + 1];
        RuleInputs alone;
        alone.qkv = Slice(in.qkv, s.conv_dim(), b, e, 0, s.conv_dim());
        alone.g = Slice(in.g, s.nv, b, e, 0, s.nv);
        alone.beta = Slice(in.beta, s.nv, b, e, 0, s.nv);
        const std::vector<float> got = RunRule(alone, s, {0, static_cast<int32_t>(e - b)}, stream_, form);
        const std::vector<float> rows(batched.begin() + b * s.value_dim(),
                                      batched.begin() + e * s.value_dim());
        EXPECT_EQ(testing::CountBitDifferences(got, rows), 0)
            << FormName(form) << " " << s.name << " sequence " << seq;
      }
    }
  }
}

TEST_F(DeltaNetTest, GatedRmsNormMatchesReference) {
  for (const Shape& s : {kTiny, k27B}) {
    const int64_t tokens = CuSeqlens(Lengths()).back(), z_stride = s.value_dim() + 16;
    const int64_t rows = tokens * s.nv;
    const std::vector<float> x = testing::RandomNormal(rows * s.dv, 151, 0.5f);
    const std::vector<float> z = testing::RoundedToBf16(testing::RandomNormal(tokens * z_stride, 152, 2.0f));
    const std::vector<float> w = testing::RandomFloats(s.dv, 153, 0.5f, 1.5f);
    const std::vector<float> zc = Slice(z, z_stride, 0, tokens, 0, s.value_dim());
    std::vector<float> want(rows * s.dv);
    ref::GatedRmsNorm(x.data(), zc.data(), w.data(), rows, s.dv, kNormEps, want.data());

    DeviceArray<float> d_x(x), d_w(w), d_z32(z), d_out32(rows * s.dv);
    DeviceArray<bf16_t> d_z16(testing::ToBf16(z)), d_out16(rows * s.dv);
    d_out32.Poison();
    d_out16.Poison();
    ASSERT_TRUE(DeltaNetGatedRmsNorm(d_x.get(), d_z32.get(), z_stride, d_w.get(), tokens, s.nv, s.dv,
                                     kNormEps, d_out32.get(), stream_)
                    .ok());
    ASSERT_TRUE(DeltaNetGatedRmsNorm(d_x.get(), d_z16.get(), z_stride, d_w.get(), tokens, s.nv, s.dv,
                                     kNormEps, d_out16.get(), stream_)
                    .ok());
    Sync();
    const UlpStats u32 = CompareUlps(d_out32.Download(), want);
    const UlpStats u16 = CompareUlps(testing::FromBf16(d_out16.Download()), want, /*bf16=*/true);
    ReportUlps(std::string("gated norm ") + s.name + " f32", u32, want.size());
    ReportUlps(std::string("gated norm ") + s.name + " bf16 (bf16 ulps)", u16, want.size());
    EXPECT_LE(u32.max_ulps, kNearExactUlps) << s.name;
    EXPECT_LE(u16.max_ulps, kNearExactUlps) << s.name;
  }
}

// The four kernels chained as the CUDA engine would (conv of the qkv GEMM output, prep in place on the conv
// output, the rule reading q | k | v from it, the gated norm into out_proj's input), against
// ReferenceEngine::DeltaNetBlock's chain of reference ops on the same GEMM outputs, with fp32 and bf16
// GEMM outputs (their values rounded to bf16 for both), the rule in the form the engine runs (recurrent).
// The error is the rule's (the other steps are near-exact) scaled by the norm: bound kChainTol of max
// |want|, plus for bf16 one rounding (2^-8 relative).
TEST_F(DeltaNetTest, ChainMatchesReferenceBlock) {
  for (const Shape& s : {kTiny, k27B}) {
    const std::vector<int32_t> cu = CuSeqlens(Lengths());
    const int64_t tokens = cu.back(), conv = s.conv_dim(), seqs = static_cast<int64_t>(cu.size()) - 1;
    // GEMM outputs: qkv [tokens, conv], z [tokens, value_dim], b, a [tokens, nv].
    const std::vector<float> mixed = testing::RoundedToBf16(testing::RandomNormal(tokens * conv, 161, 1.0f));
    const std::vector<float> z =
        testing::RoundedToBf16(testing::RandomNormal(tokens * s.value_dim(), 162, 1.0f));
    const std::vector<float> b = testing::RoundedToBf16(testing::RandomNormal(tokens * s.nv, 163, 1.5f));
    const std::vector<float> a = testing::RoundedToBf16(testing::RandomNormal(tokens * s.nv, 164, 2.0f));
    const std::vector<float> conv_w = testing::RandomFloats(conv * s.kernel, 165, -0.5f, 0.5f);
    const std::vector<float> neg_a = testing::RandomFloats(s.nv, 166, -4.0f, -0.02f);
    const std::vector<float> dt_bias = testing::RandomFloats(s.nv, 167, -1.0f, 1.0f);
    const std::vector<float> norm_w = testing::RandomFloats(s.dv, 168, 0.5f, 1.5f);

    // Oracle: DeltaNetBlock's steps, each sequence alone.
    std::vector<float> want(tokens * s.value_dim());
    for (int64_t seq = 0; seq < seqs; ++seq) {
      const int64_t b0 = cu[seq], n = cu[seq + 1] - cu[seq];
      if (n == 0) continue;
      const std::vector<float> xs = Slice(mixed, conv, b0, b0 + n, 0, conv);
      std::vector<float> act(n * conv);
      ref::CausalConv1dSilu(xs.data(), conv_w.data(), n, conv, s.kernel, act.data());
      PrepQkReference(&act, conv, n, s);
      std::vector<float> beta(n * s.nv), g(n * s.nv);
      for (int64_t i = 0; i < n * s.nv; ++i) {
        const int64_t h = i % s.nv;
        beta[i] = Sigmoid(b[b0 * s.nv + i]);
        g[i] = LogDecay(a[b0 * s.nv + i], dt_bias[h], neg_a[h]);
      }
      const std::vector<float> q = Slice(act, conv, 0, n, 0, s.key_dim());
      const std::vector<float> k = Slice(act, conv, 0, n, s.key_dim(), s.key_dim());
      const std::vector<float> v = Slice(act, conv, 0, n, 2 * s.key_dim(), s.value_dim());
      std::vector<float> o(n * s.value_dim());
      ref::GatedDeltaRule(q.data(), k.data(), v.data(), g.data(), beta.data(), n, s.nk, s.nv, s.dk, s.dv,
                          o.data());
      ref::GatedRmsNorm(o.data(), z.data() + b0 * s.value_dim(), norm_w.data(), n * s.nv, s.dv, kNormEps,
                        want.data() + b0 * s.value_dim());
    }

    DeviceArray<float> d_cw(conv_w), d_na(neg_a), d_dt(dt_bias), d_nw(norm_w);
    DeviceArray<int32_t> d_cu(cu);
    DeviceArray<float> d_act(tokens * conv), d_beta(tokens * s.nv), d_g(tokens * s.nv),
        d_o(tokens * s.value_dim());
    for (bool bf16 : {false, true}) {
      const std::string name = std::string("chain ") + s.name + (bf16 ? " bf16" : " f32");
      d_act.Poison();
      d_o.Poison();
      std::vector<float> got;
      auto run = [&](auto tag) {
        using T = decltype(tag);
        auto upload = [](const std::vector<float>& v) {
          if constexpr (std::is_same_v<T, float>) {
            return v;
          } else {
            return testing::ToBf16(v);
          }
        };
        DeviceArray<T> d_mixed(upload(mixed)), d_z(upload(z)), d_b(upload(b)), d_a(upload(a)),
            d_out(tokens * s.value_dim());
        d_out.Poison();
        ASSERT_TRUE(DeltaNetConv1dSilu(d_mixed.get(), conv, d_cw.get(), d_cu.get(), seqs, tokens, conv,
                                       s.kernel, d_act.get(), stream_)
                        .ok());
        ASSERT_TRUE(DeltaNetPrep(d_act.get(), conv, d_b.get(), s.nv, d_a.get(), s.nv, d_na.get(), d_dt.get(),
                                 tokens, s.nk, s.nv, s.dk, d_beta.get(), d_g.get(), stream_)
                        .ok());
        ASSERT_TRUE(RunRuleOnDevice(Form::kRecurrent, s, d_act.get(), conv, d_g.get(), d_beta.get(),
                                    d_cu.get(), seqs, tokens, d_o.get(), stream_)
                        .ok());
        ASSERT_TRUE(DeltaNetGatedRmsNorm(d_o.get(), d_z.get(), s.value_dim(), d_nw.get(), tokens, s.nv, s.dv,
                                         kNormEps, d_out.get(), stream_)
                        .ok());
        Sync();
        if constexpr (std::is_same_v<T, float>) {
          got = d_out.Download();
        } else {
          got = testing::FromBf16(d_out.Download());
        }
      };
      if (bf16) {
        run(bf16_t{});
      } else {
        run(0.0f);
      }
      ASSERT_EQ(got.size(), want.size());
      const testing::ErrorStats e = testing::CompareArrays(got, want);
      const double max_want = MaxAbs(want);
      testing::Report(name + " (max |want| " + std::to_string(max_want) + ")", e);
      EXPECT_EQ(e.not_finite, 0) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        const double bound = kChainTol * max_want + (bf16 ? std::fabs(want[i]) / 256.0 : 0.0);
        ASSERT_LE(std::fabs(got[i] - want[i]), bound) << name << " at " << i;
      }
    }
  }
}

// Qwen3.5-27B shapes at 4 x 2048 tokens, bf16 GEMM outputs: the four kernels' times. Reports only.
TEST_F(DeltaNetTest, Throughput27B) {
  const Shape& s = k27B;
  const std::vector<int32_t> cu = CuSeqlens({2048, 2048, 2048, 2048});
  const int64_t tokens = cu.back(), conv = s.conv_dim(), seqs = static_cast<int64_t>(cu.size()) - 1;
  DeviceArray<bf16_t> d_mixed(testing::ToBf16(testing::RandomNormal(tokens * conv, 171, 1.0f)));
  DeviceArray<bf16_t> d_z(testing::ToBf16(testing::RandomNormal(tokens * s.value_dim(), 172, 1.0f)));
  DeviceArray<bf16_t> d_ab(testing::ToBf16(testing::RandomNormal(tokens * 2 * s.nv, 173, 1.0f)));
  DeviceArray<float> d_cw(testing::RandomFloats(conv * s.kernel, 174, -0.5f, 0.5f));
  DeviceArray<float> d_na(testing::RandomFloats(s.nv, 175, -4.0f, -0.02f));
  DeviceArray<float> d_dt(testing::RandomFloats(s.nv, 176, -1.0f, 1.0f));
  DeviceArray<float> d_nw(testing::RandomFloats(s.dv, 177, 0.5f, 1.5f));
  DeviceArray<int32_t> d_cu(cu);
  DeviceArray<float> d_act(tokens * conv), d_beta(tokens * s.nv), d_g(tokens * s.nv),
      d_o(tokens * s.value_dim());
  DeviceArray<bf16_t> d_out(tokens * s.value_dim());
  const float conv_ms = testing::MedianMs(
      stream_,
      [&] {
        return DeltaNetConv1dSilu(d_mixed.get(), conv, d_cw.get(), d_cu.get(), seqs, tokens, conv, s.kernel,
                                  d_act.get(), stream_);
      },
      10);
  // b | a side by side in one [tokens, 2 nv] buffer (a fused in_proj_b | in_proj_a GEMM).
  const float prep_ms = testing::MedianMs(
      stream_,
      [&] {
        return DeltaNetPrep(d_act.get(), conv, d_ab.get(), 2 * s.nv, d_ab.get() + s.nv, 2 * s.nv, d_na.get(),
                            d_dt.get(), tokens, s.nk, s.nv, s.dk, d_beta.get(), d_g.get(), stream_);
      },
      10);
  const float rule_ms = testing::MedianMs(
      stream_,
      [&] {
        return GatedDeltaRule(d_act.get(), d_act.get() + s.key_dim(), d_act.get() + 2 * s.key_dim(), conv,
                              d_g.get(), d_beta.get(), d_cu.get(), seqs, tokens, s.nk, s.nv, s.dk, s.dv,
                              d_o.get(), stream_);
      },
      5);
  auto chunked_ms = [&](DeltaRuleMath math, const int32_t* cu_dev, int64_t num_seqs) {
    return testing::MedianMs(
        stream_,
        [&] {
          return GatedDeltaRuleChunked(d_act.get(), d_act.get() + s.key_dim(), d_act.get() + 2 * s.key_dim(),
                                       conv, d_g.get(), d_beta.get(), cu_dev, num_seqs, tokens, s.nk, s.nv,
                                       s.dk, s.dv, math, d_o.get(), stream_);
        },
        5);
  };
  const float chunk3_ms = chunked_ms(DeltaRuleMath::kTf32x3, d_cu.get(), seqs);
  const float chunk1_ms = chunked_ms(DeltaRuleMath::kTf32, d_cu.get(), seqs);
  // One sequence of all 8192 tokens: the recurrent form fills num_v_heads SMs, the chunked 2x that.
  DeviceArray<int32_t> d_cu_one(std::vector<int32_t>{0, static_cast<int32_t>(tokens)});
  const float one_rec_ms = testing::MedianMs(
      stream_,
      [&] {
        return GatedDeltaRule(d_act.get(), d_act.get() + s.key_dim(), d_act.get() + 2 * s.key_dim(), conv,
                              d_g.get(), d_beta.get(), d_cu_one.get(), 1, tokens, s.nk, s.nv, s.dk, s.dv,
                              d_o.get(), stream_);
      },
      3);
  const float one_chunk3_ms = chunked_ms(DeltaRuleMath::kTf32x3, d_cu_one.get(), 1);
  const float one_chunk1_ms = chunked_ms(DeltaRuleMath::kTf32, d_cu_one.get(), 1);
  const float norm_ms = testing::MedianMs(
      stream_,
      [&] {
        return DeltaNetGatedRmsNorm(d_o.get(), d_z.get(), s.value_dim(), d_nw.get(), tokens, s.nv, s.dv,
                                    kNormEps, d_out.get(), stream_);
      },
      10);
  ASSERT_GT(conv_ms, 0.0f);
  ASSERT_GT(prep_ms, 0.0f);
  ASSERT_GT(rule_ms, 0.0f);
  ASSERT_GT(norm_ms, 0.0f);
  testing::ReportBandwidth("delta_net conv1d+silu bf16 -> f32, 8192 x 10240", conv_ms,
                           tokens * conv * (2.0 + 4.0));
  testing::ReportBandwidth("delta_net prep (l2 q|k, beta, g), 8192 tokens", prep_ms,
                           tokens * (3.0 * 4 * 2 * s.key_dim() + 2 * 2 * s.nv + 2 * 4 * s.nv));
  std::cout << "[ measured ] delta_net rule (recurrent) 4 x 2048 tokens, 48 v heads, 128 x 128: " << rule_ms
            << " ms (" << rule_ms * 1e3 / 2048 << " us per token of a sequence)" << std::endl;
  std::cout << "[ measured ] delta_net rule (chunked) 4 x 2048 tokens: tf32x3 " << chunk3_ms << " ms, tf32 "
            << chunk1_ms << " ms" << std::endl;
  std::cout << "[ measured ] delta_net rule 1 x 8192 tokens: recurrent " << one_rec_ms
            << " ms, chunked tf32x3 " << one_chunk3_ms << " ms, chunked tf32 " << one_chunk1_ms << " ms"
            << std::endl;
  testing::ReportBandwidth("delta_net gated rmsnorm f32 x, bf16 z -> bf16, 8192 x 48 x 128", norm_ms,
                           tokens * s.value_dim() * (4.0 + 2.0 + 2.0));
}

// One 32k-token window at the Qwen3.5-27B shape: the chunked rule in both roundings (the memory it needs is
// its inputs and outputs only: linear in the length), finite everywhere. Reports the time only.
TEST_F(DeltaNetTest, LongWindow32kTiming) {
  const Shape& s = k27B;
  const int64_t tokens = 32768, conv = s.conv_dim();
  const RuleInputs in = MakeRuleInputs(s, 2048, 181);
  // The inputs of 2048 tokens repeated: the state's recurrence still runs over all 32768.
  std::vector<float> qkv(tokens * conv), g(tokens * s.nv), beta(tokens * s.nv);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(in.qkv.begin() + (t % 2048) * conv, conv, qkv.begin() + t * conv);
    std::copy_n(in.g.begin() + (t % 2048) * s.nv, s.nv, g.begin() + t * s.nv);
    std::copy_n(in.beta.begin() + (t % 2048) * s.nv, s.nv, beta.begin() + t * s.nv);
  }
  DeviceArray<float> d_qkv(qkv), d_g(g), d_beta(beta), d_o(tokens * s.value_dim());
  DeviceArray<int32_t> d_cu(std::vector<int32_t>{0, static_cast<int32_t>(tokens)});
  for (DeltaRuleMath math : {DeltaRuleMath::kTf32x3, DeltaRuleMath::kTf32}) {
    d_o.Poison();
    const float ms = testing::MedianMs(
        stream_,
        [&] {
          return GatedDeltaRuleChunked(d_qkv.get(), d_qkv.get() + s.key_dim(), d_qkv.get() + 2 * s.key_dim(),
                                       conv, d_g.get(), d_beta.get(), d_cu.get(), 1, tokens, s.nk, s.nv, s.dk,
                                       s.dv, math, d_o.get(), stream_);
        },
        3);
    const std::vector<float> out = d_o.Download();
    int64_t not_finite = 0;
    for (float x : out) not_finite += std::isfinite(x) ? 0 : 1;
    EXPECT_EQ(not_finite, 0);
    std::cout << "[ measured ] delta_net rule (chunked " << (math == DeltaRuleMath::kTf32 ? "tf32" : "tf32x3")
              << ") 1 x 32768 tokens, 48 v heads, 128 x 128: " << ms << " ms" << std::endl;
  }
}

// Argument checks return before any CUDA call, so they run without a device too. (Only rejected or empty
// calls here: a valid call with these fake pointers would launch.)
TEST(DeltaNetArgsTest, RejectsBadArguments) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  float* f = reinterpret_cast<float*>(uintptr_t{256});
  const bf16_t* h = reinterpret_cast<const bf16_t*>(uintptr_t{256});
  const int32_t* cu = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const bf16_t* no_h = nullptr;
  const float* no_f = nullptr;

  // Conv: x, x_stride, weight, cu_seqlens, num_seqs, num_tokens, channels, kernel, out.
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, 1, 4, 64, 0, f, nullptr).code(), kInvalid) << "kernel 0";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, 1, 4, 64, 65, f, nullptr).code(), kInvalid) << "kernel 65";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 63, f, cu, 1, 4, 64, 4, f, nullptr).code(), kInvalid) << "x_stride";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, 1, -1, 64, 4, f, nullptr).code(), kInvalid) << "num_tokens";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, -1, 4, 64, 4, f, nullptr).code(), kInvalid) << "num_seqs";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, 0, 4, 64, 4, f, nullptr).code(), kInvalid) << "no sequence";
  EXPECT_EQ(DeltaNetConv1dSilu(no_h, 64, f, cu, 1, 4, 64, 4, f, nullptr).code(), kInvalid) << "null x";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, no_f, cu, 1, 4, 64, 4, f, nullptr).code(), kInvalid) << "null weight";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, nullptr, 1, 4, 64, 4, f, nullptr).code(), kInvalid) << "null cu";
  EXPECT_EQ(DeltaNetConv1dSilu(h, 64, f, cu, 1, 4, 64, 4, nullptr, nullptr).code(), kInvalid) << "null out";
  EXPECT_TRUE(DeltaNetConv1dSilu(no_h, 64, no_f, nullptr, 0, 0, 64, 4, nullptr, nullptr).ok()) << "no tokens";

  // Prep: qkv, qkv_stride, b, b_stride, a, a_stride, neg_a, dt_bias, num_tokens, nk, nv, k_dim, beta, g.
  EXPECT_EQ(DeltaNetPrep(f, 63, h, 4, h, 4, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "qkv_stride";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 3, h, 4, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid) << "b_stride";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 3, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid) << "a_stride";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, f, f, 3, 2, 4, 0, f, f, nullptr).code(), kInvalid) << "k_dim 0";
  EXPECT_EQ(DeltaNetPrep(f, 4096, h, 4, h, 4, f, f, 3, 2, 4, 1025, f, f, nullptr).code(), kInvalid)
      << "k_dim 1025";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, f, f, -3, 2, 4, 16, f, f, nullptr).code(), kInvalid) << "tokens";
  EXPECT_EQ(DeltaNetPrep(nullptr, 64, h, 4, h, 4, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "null qkv";
  EXPECT_EQ(DeltaNetPrep(f, 64, no_h, 4, h, 4, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "null b";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, no_h, 4, f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "null a";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, no_f, f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "null neg_a";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, f, no_f, 3, 2, 4, 16, f, f, nullptr).code(), kInvalid)
      << "null dt_bias";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, f, f, 3, 2, 4, 16, nullptr, f, nullptr).code(), kInvalid)
      << "null beta";
  EXPECT_EQ(DeltaNetPrep(f, 64, h, 4, h, 4, f, f, 3, 2, 4, 16, f, nullptr, nullptr).code(), kInvalid)
      << "null g";
  EXPECT_TRUE(
      DeltaNetPrep(nullptr, 64, no_h, 4, no_h, 4, nullptr, nullptr, 0, 2, 4, 16, nullptr, nullptr, nullptr)
          .ok())
      << "no tokens";

  // Rule: q, k, v, qkv_stride, g, beta, cu_seqlens, num_seqs, num_tokens, nk, nv, k_dim, v_dim, out.
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 1, 5, 3, 4, 16, 16, f, nullptr).code(), kInvalid)
      << "nv % nk";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 1, 5, 0, 4, 16, 16, f, nullptr).code(), kInvalid)
      << "nk 0";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 1024, f, f, cu, 1, 5, 2, 4, 129, 16, f, nullptr).code(), kInvalid)
      << "k_dim 129";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 1024, f, f, cu, 1, 5, 2, 4, 16, 129, f, nullptr).code(), kInvalid)
      << "v_dim 129";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 1, 5, 2, 4, 16, 0, f, nullptr).code(), kInvalid)
      << "v_dim 0";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 63, f, f, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid)
      << "qkv_stride";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 0, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid)
      << "no sequence";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 1, -5, 2, 4, 16, 16, f, nullptr).code(), kInvalid)
      << "num_tokens";
  EXPECT_EQ(GatedDeltaRule(f, f, f, 1024, f, f, cu, int64_t{1} << 27, 5, 2, 16, 16, 16, f, nullptr).code(),
            kInvalid)
      << "grid";
  EXPECT_EQ(GatedDeltaRule(nullptr, f, f, 128, f, f, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, nullptr, f, 128, f, f, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, f, nullptr, 128, f, f, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, nullptr, f, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, nullptr, cu, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, nullptr, 1, 5, 2, 4, 16, 16, f, nullptr).code(), kInvalid);
  EXPECT_EQ(GatedDeltaRule(f, f, f, 128, f, f, cu, 1, 5, 2, 4, 16, 16, nullptr, nullptr).code(), kInvalid);
  EXPECT_TRUE(GatedDeltaRule(nullptr, nullptr, nullptr, 128, nullptr, nullptr, nullptr, 0, 0, 2, 4, 16, 16,
                             nullptr, nullptr)
                  .ok())
      << "no tokens";
  // The chunked form shares the checks (CheckGatedDeltaRuleArgs), its grid has a block per 64 v columns.
  constexpr DeltaRuleMath kX3 = DeltaRuleMath::kTf32x3;
  EXPECT_EQ(GatedDeltaRuleChunked(f, f, f, 128, f, f, cu, 1, 5, 3, 4, 16, 16, kX3, f, nullptr).code(),
            kInvalid)
      << "chunked nv % nk";
  EXPECT_EQ(GatedDeltaRuleChunked(f, f, f, 1024, f, f, cu, 1, 5, 2, 4, 129, 16, kX3, f, nullptr).code(),
            kInvalid)
      << "chunked k_dim 129";
  EXPECT_EQ(
      GatedDeltaRuleChunked(f, f, f, 4096, f, f, cu, int64_t{1} << 25, 5, 2, 32, 16, 128, kX3, f, nullptr)
          .code(),
      kInvalid)
      << "chunked grid (2^25 sequences x 32 heads x 2 tiles)";
  EXPECT_EQ(GatedDeltaRuleChunked(f, f, f, 128, f, f, cu, 1, 5, 2, 4, 16, 16, kX3, nullptr, nullptr).code(),
            kInvalid)
      << "chunked null out";
  EXPECT_TRUE(GatedDeltaRuleChunked(nullptr, nullptr, nullptr, 128, nullptr, nullptr, nullptr, 0, 0, 2, 4, 16,
                                    16, kX3, nullptr, nullptr)
                  .ok())
      << "chunked no tokens";

  // Gated norm: x, z, z_stride, weight, num_tokens, num_heads, head_dim, eps, out.
  bf16_t* out16 = reinterpret_cast<bf16_t*>(uintptr_t{256});
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, f, 3, 4, 0, 1e-6, out16, nullptr).code(), kInvalid)
      << "head_dim 0";
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 8192, f, 3, 4, 1025, 1e-6, out16, nullptr).code(), kInvalid)
      << "head_dim 1025";
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 63, f, 3, 4, 16, 1e-6, out16, nullptr).code(), kInvalid) << "z_stride";
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, f, 3, 4, 16, 0.0, out16, nullptr).code(), kInvalid) << "eps 0";
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, f, 3, 4, 16, std::nan(""), out16, nullptr).code(), kInvalid)
      << "eps NaN";
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, f, -3, 4, 16, 1e-6, out16, nullptr).code(), kInvalid) << "tokens";
  EXPECT_EQ(DeltaNetGatedRmsNorm(nullptr, h, 64, f, 3, 4, 16, 1e-6, out16, nullptr).code(), kInvalid);
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, no_h, 64, f, 3, 4, 16, 1e-6, out16, nullptr).code(), kInvalid);
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, nullptr, 3, 4, 16, 1e-6, out16, nullptr).code(), kInvalid);
  EXPECT_EQ(DeltaNetGatedRmsNorm(f, h, 64, f, 3, 4, 16, 1e-6, static_cast<bf16_t*>(nullptr), nullptr).code(),
            kInvalid);
  EXPECT_TRUE(
      DeltaNetGatedRmsNorm(nullptr, no_h, 64, nullptr, 0, 4, 16, 1e-6, static_cast<bf16_t*>(nullptr), nullptr)
          .ok())
      << "no tokens";
}

}  // namespace
}  // namespace scored::kernels

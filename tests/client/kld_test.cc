// scored-ppl --kld statistics (client/ppl/kld.h): known answers for every statistic, its error and the
// percentiles, the report's JSON / text forms, and a --kld journal resumed into the same statistics.
// No server: the per-token values are the ones a ScoreResponse with want_reference carries.
#include "client/ppl/kld.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/ppl/journal.h"
#include "client/ppl/report.h"
#include "engine/base/sha256.h"
#include "gtest/gtest.h"

namespace scored {
namespace ppl {
namespace {

// Twelve scored tokens (n > 10: llama-perplexity reports errors only above 10 values), split 5 + 7 over
// two windows. Every expected value below was computed with numpy in float64 from these vectors (cast from
// float32, as the client reads them), independently of kld.cc:
//   nq, nr = -lq, -rq;  e(x) = sqrt(np.var(x) / (n - 1))  (np.var: population variance)
//   cov = (np.mean(nq * nr) - nq.mean() * nr.mean()) / (n - 1);  corr = np.corrcoef(nq, nr)[0, 1]
//   percentiles: np.percentile(kld, 100 f) (numpy's default "linear" method)
//   dp = np.exp(lq) - np.exp(lr);  rms = sqrt(mean(dp^2)), error 0.5 / rms * e(dp^2)
const std::vector<float> kLq = {-1.5f, -0.25f, -3.0f,   -0.75f, -2.0f,  -0.5f,
                                -4.0f, -1.0f,  -0.125f, -2.5f,  -1.25f, -0.0625f};
const std::vector<float> kLr = {-1.25f, -0.5f,   -2.5f,  -0.75f, -2.25f, -0.375f,
                                -3.0f,  -1.125f, -0.25f, -2.0f,  -1.5f,  -0.125f};
const std::vector<float> kKld = {0.01f, 0.002f, 0.3f,   0.0f,  0.05f, 0.004f,
                                 0.8f,  0.02f,  0.001f, 0.12f, 0.03f, 0.0005f};
const std::vector<uint8_t> kSameTop = {1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1};

double Sum(const std::vector<float>& v, size_t from, size_t to) {
  double s = 0.0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s;
}

// The two windows as the server would answer them (double sums of the per-token floats).
KldAggregator TwoWindows() {
  KldAggregator agg;
  for (const auto& [from, to] : {std::pair<size_t, size_t>{0, 5}, {5, 12}}) {
    auto part = [&](const auto& v) { return absl::MakeConstSpan(v).subspan(from, to - from); };
    EXPECT_TRUE(agg.AddWindow(Sum(kLq, from, to), Sum(kLr, from, to), part(kLq), part(kLr), part(kKld),
                              part(kSameTop))
                    .ok());
  }
  return agg;
}

TEST(KldStatsTest, KnownAnswers) {
  const KldStats s = TwoWindows().Finish();
  constexpr double kTol = 1e-12;
  EXPECT_EQ(s.count, 12);
  // PPL = exp(mean NLL): mean NLL(Q) = 16.9375 / 12, mean NLL(R) = 15.625 / 12.
  EXPECT_NEAR(s.ppl_q, std::exp(16.9375 / 12.0), kTol);
  EXPECT_NEAR(s.ppl_q, 4.101933029994947, kTol);
  EXPECT_NEAR(s.ppl_q_error, 1.4742447698413286, kTol);
  EXPECT_NEAR(s.ppl_r, std::exp(15.625 / 12.0), kTol);
  EXPECT_NEAR(s.ppl_r, 3.6769490040928385, kTol);
  EXPECT_NEAR(s.ppl_r_error, 1.015926887151155, kTol);
  EXPECT_NEAR(s.ln_ppl_ratio, 0.109375, kTol);  // (16.9375 - 15.625) / 12
  EXPECT_NEAR(s.ln_ppl_ratio_error, 0.11204796600387758, kTol);
  EXPECT_NEAR(s.ppl_ratio, s.ppl_q / s.ppl_r, kTol);
  EXPECT_NEAR(s.ppl_ratio_error, s.ppl_ratio * s.ln_ppl_ratio_error, kTol);
  EXPECT_NEAR(s.nll_correlation, 0.9715608996518894, kTol);
  EXPECT_NEAR(s.kld_mean, 0.11145833507665277, kTol);
  EXPECT_NEAR(s.kld_error, 0.06737759665539522, kTol);
  // max, 99.9, 99, 95, 90, median, 10, 5, 1, 0.1, min.
  const std::vector<double> percentiles = {0.800000011920929,
                                           0.7945000119209293,
                                           0.7450000119209292,
                                           0.5250000119209286,
                                           0.28200001046061524,
                                           0.014999999664723873,
                                           0.0005500000261235982,
                                           0.0002750000130617991,
                                           5.500000261235982e-05,
                                           5.5000002612359815e-06,
                                           0.0};
  ASSERT_EQ(s.kld_percentiles.size(), percentiles.size());
  for (size_t i = 0; i < percentiles.size(); ++i) {
    EXPECT_NEAR(s.kld_percentiles[i], percentiles[i], 1e-12 + 1e-9 * percentiles[i]) << "percentile " << i;
  }
  EXPECT_NEAR(s.same_top, 0.75, kTol);                       // 9 of 12
  EXPECT_NEAR(s.same_top_error, 0.13055824196677338, kTol);  // sqrt(0.75 * 0.25 / 11)
  EXPECT_NEAR(s.dp_mean, 0.0173555976802055, kTol);
  EXPECT_NEAR(s.dp_error, 0.02171497723940917, kTol);
  EXPECT_NEAR(s.dp_rms, 0.07408211236476588, kTol);
  EXPECT_NEAR(s.dp_rms_error, 0.015921977244002412, kTol);
  EXPECT_NEAR(s.dlp_abs_mean, 0.2864583333333333, kTol);  // 3.4375 / 12
  EXPECT_EQ(s.dlp_abs_max, 1.0);                          // token 6: -4 vs -3
}

TEST(KldStatsTest, MeanAndErrorFollowsLlamaPerplexity) {
  // 11 values 0..10: mean 5, population variance 10, error sqrt(10 / 10) = 1.
  double sum = 0.0, sum2 = 0.0;
  for (int i = 0; i <= 10; ++i) {
    sum += i;
    sum2 += i * i;
  }
  const auto [mean, error] = MeanAndError(sum, sum2, 11);
  EXPECT_DOUBLE_EQ(mean, 5.0);
  EXPECT_DOUBLE_EQ(error, 1.0);
  // Ten values or fewer: no error (llama-perplexity's count > 10), and nothing at all for none.
  EXPECT_EQ(MeanAndError(45.0, 285.0, 10).second, 0.0);
  EXPECT_EQ(MeanAndError(0.0, 0.0, 0).first, 0.0);
}

TEST(KldStatsTest, PercentileInterpolatesLinearly) {
  const std::vector<float> v = {1.0f, 2.0f, 4.0f, 8.0f};  // positions 0..3
  EXPECT_EQ(Percentile(v, 0.0), 1.0);
  EXPECT_EQ(Percentile(v, 1.0), 8.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 3.0);                    // position 1.5: median of an even count
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 0.3 * 4.0 + 0.7 * 8.0);  // position 2.7
  const std::vector<float> odd = {1.0f, 5.0f, 9.0f};
  EXPECT_DOUBLE_EQ(Percentile(odd, 0.5), 5.0);  // the middle value
}

TEST(KldStatsTest, ModelAgainstItselfIsIdentical) {
  std::vector<float> lp(20), zero(20, 0.0f);
  std::vector<uint8_t> top(20, 1);
  double sum = 0.0;
  for (size_t i = 0; i < lp.size(); ++i) {
    lp[i] = -0.1f * static_cast<float>(i + 1);
    sum += lp[i];
  }
  KldAggregator agg;
  ASSERT_TRUE(agg.AddWindow(sum, sum, lp, lp, zero, top).ok());
  const KldStats s = agg.Finish();
  EXPECT_EQ(s.ppl_q, s.ppl_r);
  EXPECT_EQ(s.ln_ppl_ratio, 0.0);
  EXPECT_EQ(s.ln_ppl_ratio_error, 0.0);
  EXPECT_NEAR(s.nll_correlation, 1.0, 1e-12);
  EXPECT_EQ(s.kld_mean, 0.0);
  EXPECT_EQ(s.kld_percentiles.front(), 0.0);
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_EQ(s.same_top_error, 0.0);
  EXPECT_EQ(s.dp_mean, 0.0);
  EXPECT_EQ(s.dp_rms, 0.0);
  EXPECT_EQ(s.dp_rms_error, 0.0);
  EXPECT_EQ(s.dlp_abs_max, 0.0);
}

TEST(KldStatsTest, MismatchedSizesAreRefused) {
  KldAggregator agg;
  const std::vector<float> two = {-1.0f, -2.0f}, one = {0.5f};
  const std::vector<uint8_t> flags = {1, 0};
  const absl::Status s = agg.AddWindow(-3.0, -3.0, two, two, one, flags);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(agg.count(), 0);
}

Report KldReport(const std::string& format, double bpw, float scale) {
  // The known-answer tokens with Q's logprobs moved away from R's by `scale` (a coarser quant: larger).
  KldAggregator kld;
  Aggregator agg;
  std::vector<float> lq(kLq.size()), k(kKld.size());
  for (size_t i = 0; i < lq.size(); ++i) {
    lq[i] = kLr[i] + scale * (kLq[i] - kLr[i]);
    k[i] = scale * scale * kKld[i];
  }
  double sum_q = 0.0, sum_r = 0.0;
  for (size_t i = 0; i < lq.size(); ++i) {
    sum_q += lq[i];
    sum_r += kLr[i];
  }
  EXPECT_TRUE(kld.AddWindow(sum_q, sum_r, lq, kLr, k, kSameTop).ok());
  agg.AddWindow(sum_q, lq, -1);
  Report r;
  FillResults(agg, &r);
  r.method.method = Method::kExl3;
  r.method.ctx = 2048;
  r.method.stride = 512;
  r.data_path = "wiki.test.raw";
  r.data_format = "wikitext";
  r.model_fingerprint = "q-" + format;
  r.tokenizer_fingerprint = "tok";
  r.tokenizer_source = "server";
  r.model_info = {{"format", format}, {"bits_per_weight_decoder", bpw}};
  r.kld = true;
  r.kld_stats = kld.Finish();
  r.reference_fingerprint = "r-bf16";
  r.reference_format = "bf16";
  return r;
}

TEST(KldReportTest, JsonAndTextCarryTheComparison) {
  const Report r = KldReport("W4A16", 4.25, 1.0f);
  const nlohmann::json j = ReportToJson(r);
  // PPL(Q) of the comparison is the report's ppl: both exp(-sum_logprob / n).
  EXPECT_NEAR(j["kld"]["ppl_q"].get<double>(), j["ppl"].get<double>(), 1e-12);
  EXPECT_NEAR(j["kld_mean"].get<double>(), 0.11145833507665277, 1e-12);
  EXPECT_NEAR(j["ppl_ratio"].get<double>(), std::exp(0.109375), 1e-12);
  EXPECT_EQ(j["kld"]["reference"]["model_fingerprint"], "r-bf16");
  EXPECT_EQ(j["kld"]["reference"]["format"], "bf16");
  for (const char* key : {"max", "p99.9", "p99", "p95", "p90", "median", "p10", "p5", "p1", "p0.1", "min"}) {
    EXPECT_TRUE(j["kld"]["kld_percentiles"].contains(key)) << key;
  }
  EXPECT_EQ(j["kld"]["kld_percentiles"]["max"].get<double>(), 0.800000011920929);
  EXPECT_NEAR(j["kld"]["same_top"].get<double>(), 0.75, 1e-15);
  const std::string text = ReportToText(r);
  for (const char* line :
       {"Mean PPL(Q)", "Mean PPL(R)", "Cor(ln(PPL(Q)), ln(PPL(R)))", "Mean ln(PPL(Q)/PPL(R))",
        "Mean    KLD:   0.111458 +-   0.067378", "Maximum KLD:   0.800000",
        "99.9%   KLD:", "Median  KLD:   0.015000", "0.1%    KLD:", "Minimum KLD:   0.000000",
        "Same top p : 75.000 +- 13.056 %", "RMS     dp :", "reference      r-bf16 (bf16)"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  }
  // A run without --kld keeps its report as it was.
  Report plain = r;
  plain.kld = false;
  EXPECT_FALSE(ReportToJson(plain).contains("kld"));
  EXPECT_EQ(ReportToText(plain).find("KLD"), std::string::npos);
}

// The plot tool's test renders these reports (tests/python/fixtures/kld_report_*.json): they must be what
// this code writes. SCORED_UPDATE_FIXTURES=1 rewrites them.
TEST(KldReportTest, PlotFixturesAreThisCodesReports) {
  const std::string dir = std::string(SCORED_FIXTURES_DIR) + "/../python/fixtures/";
  const bool update = std::getenv("SCORED_UPDATE_FIXTURES") != nullptr;
  struct Quant {
    const char* name;
    double bpw;
    float scale;
  };
  for (const Quant& q : {Quant{"W4A16", 4.25, 1.0f}, Quant{"NVFP4A16", 4.5, 1.2f}, Quant{"FP8", 8.0, 0.3f}}) {
    Report r = KldReport(q.name, q.bpw, q.scale);
    nlohmann::json j = ReportToJson(r);
    const std::string path = dir + "kld_report_" + q.name + ".json";
    if (update) {
      std::ofstream(path) << j.dump(2) << "\n";
      continue;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path << " missing; run with SCORED_UPDATE_FIXTURES=1";
    const nlohmann::json committed = nlohmann::json::parse(in);
    EXPECT_EQ(committed["kld"], j["kld"]) << path;
    EXPECT_EQ(committed["ppl_ratio"], j["ppl_ratio"]) << path;
    EXPECT_EQ(committed["kld_mean"], j["kld_mean"]) << path;
  }
}

// A --kld journal records what the statistics need; statistics from the resumed records are the
// uninterrupted run's, bit for bit.
TEST(KldJournalTest, ResumedRecordsGiveTheSameStatistics) {
  char dir_template[] = "/tmp/kld_journal_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/run.journal";
  JournalIdentity id;
  id.Add("method", "exl3");
  id.Add("kld", "1");
  id.Add("reference_fingerprint", "r-bf16");
  std::vector<JournalRecord> records;
  for (const auto& [from, to] : {std::pair<size_t, size_t>{0, 5}, {5, 12}}) {
    JournalRecord r;
    r.window = static_cast<int64_t>(records.size());
    r.sum_logprob = Sum(kLq, from, to) / 3.0;  // long decimal forms: the text must round-trip exactly
    r.logprobs.assign(kLq.begin() + from, kLq.begin() + to);
    for (float& v : r.logprobs) v /= 3.0f;
    r.num_bytes = 7;
    r.has_reference = true;
    r.sum_ref_logprob = Sum(kLr, from, to) / 7.0;
    r.ref_logprobs.assign(kLr.begin() + from, kLr.begin() + to);
    for (float& v : r.ref_logprobs) v /= 7.0f;
    r.kld.assign(kKld.begin() + from, kKld.begin() + to);
    for (float& v : r.kld) v /= 3.0f;
    r.same_top.assign(kSameTop.begin() + from, kSameTop.begin() + to);
    records.push_back(r);
  }
  {
    auto journal = Journal::Open(path, id);
    ASSERT_TRUE(journal.ok()) << journal.status();
    // The run is interrupted after its first window...
    ASSERT_TRUE((*journal)->Append(records[0]).ok());
  }
  KldAggregator resumed;
  {
    auto journal = Journal::Open(path, id);
    ASSERT_TRUE(journal.ok()) << journal.status();
    ASSERT_EQ((*journal)->resumed().size(), 1u);
    // ...and the rerun scores the second one; both enter in window order, as RunPpl aggregates.
    const JournalRecord& r = (*journal)->resumed().at(0);
    EXPECT_TRUE(r.has_reference);
    ASSERT_TRUE(
        resumed.AddWindow(r.sum_logprob, r.sum_ref_logprob, r.logprobs, r.ref_logprobs, r.kld, r.same_top)
            .ok());
    const JournalRecord& s = records[1];
    ASSERT_TRUE(
        resumed.AddWindow(s.sum_logprob, s.sum_ref_logprob, s.logprobs, s.ref_logprobs, s.kld, s.same_top)
            .ok());
  }
  KldAggregator uninterrupted;
  for (const JournalRecord& r : records) {
    ASSERT_TRUE(
        uninterrupted
            .AddWindow(r.sum_logprob, r.sum_ref_logprob, r.logprobs, r.ref_logprobs, r.kld, r.same_top)
            .ok());
  }
  EXPECT_EQ(KldStatsToJson(resumed.Finish()).dump(), KldStatsToJson(uninterrupted.Finish()).dump());

  // A journal of a run without --kld, or with another reference, is not resumed by this run.
  JournalIdentity other = id;
  other.fields.back().second = "r-other";
  const absl::Status refused = Journal::Open(path, other).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("reference_fingerprint"), std::string::npos);
  std::remove(path.c_str());
  rmdir(dir_template);
}

TEST(KldJournalTest, RecordRoundTripAndPlainRecordsUnchanged) {
  JournalRecord r;
  r.window = 3;
  r.logprobs = {-0.1f / 3.0f, -2.0f};
  r.sum_logprob = double{r.logprobs[0]} + double{r.logprobs[1]};  // a record's sum is its values'
  r.num_bytes = -1;
  const std::string plain = FormatRecordLine(r);
  EXPECT_EQ(plain.find("\"rs\""), std::string::npos);
  r.has_reference = true;
  r.ref_logprobs = {-0.2f / 3.0f, -1.5f};
  r.sum_ref_logprob = double{r.ref_logprobs[0]} + double{r.ref_logprobs[1]};
  r.kld = {1e-7f / 3.0f, 0.25f};
  r.same_top = {0, 1};
  const std::string line = FormatRecordLine(r);
  const size_t plain_end = plain.rfind(",\"c\":");                   // the plain fields, before the checksum
  EXPECT_EQ(line.substr(0, plain_end), plain.substr(0, plain_end));  // same prefix
  auto parsed = ParseRecordLine(line);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->has_reference);
  EXPECT_EQ(parsed->sum_ref_logprob, r.sum_ref_logprob);
  EXPECT_EQ(parsed->ref_logprobs, r.ref_logprobs);
  EXPECT_EQ(parsed->kld, r.kld);
  EXPECT_EQ(parsed->same_top, r.same_top);
  // A record whose reference values do not cover every token is corrupt, even with a checksum that fits.
  std::string short_line = line.substr(0, line.rfind(",\"c\":"));
  short_line.replace(short_line.find("\"t\":\"01\""), 8, "\"t\":\"0\"");
  short_line += ",\"c\":\"" + Sha256Hex(short_line).substr(0, 16) + "\"}";
  const absl::StatusOr<JournalRecord> short_record = ParseRecordLine(short_line);
  ASSERT_FALSE(short_record.ok());
  EXPECT_EQ(short_record.status().message(), "inconsistent record");
}

}  // namespace
}  // namespace ppl
}  // namespace scored

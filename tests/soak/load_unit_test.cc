// Unit tests of scored-load's pure parts: length-mix parsing and sampling, the request-kind mix,
// percentile math, the report.
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/load/latency.h"
#include "client/load/length_mix.h"
#include "client/load/load_runner.h"
#include "client/load/report.h"
#include "client/load/request_gen.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace load {
namespace {

using ::testing::HasSubstr;

TEST(LengthMixTest, ParsesTheDocumentedExample) {
  absl::StatusOr<std::vector<LengthBucket>> mix = ParseLengthMix("64:0.5,512:0.4,2048:0.1");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 3u);
  EXPECT_EQ((*mix)[0].tokens, 64);
  EXPECT_DOUBLE_EQ((*mix)[0].weight, 0.5);
  EXPECT_EQ((*mix)[1].tokens, 512);
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 0.4);
  EXPECT_EQ((*mix)[2].tokens, 2048);
  EXPECT_DOUBLE_EQ((*mix)[2].weight, 0.1);
  EXPECT_EQ(FormatLengthMix(*mix), "64:0.5,512:0.4,2048:0.1");
}

TEST(LengthMixTest, BareLengthsWeighOneAndSpacesAreIgnored) {
  absl::StatusOr<std::vector<LengthBucket>> mix = ParseLengthMix(" 128 , 256 : 3 ");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].tokens, 128);
  EXPECT_DOUBLE_EQ((*mix)[0].weight, 1.0);
  EXPECT_EQ((*mix)[1].tokens, 256);
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 3.0);
}

TEST(LengthMixTest, RejectsBadMixesNamingTheEntry) {
  const std::map<std::string, std::string> cases = {
      {"", "empty"},
      {"   ", "empty"},
      {"64:0.5,", "is not TOKENS:WEIGHT"},
      {"64:0.5:1", "is not TOKENS:WEIGHT"},
      {"x:1", "'x' is not an integer"},
      {"1:1", "at least 2 tokens, got 1"},
      {"-5:1", "at least 2 tokens, got -5"},
      {"64:abc", "'abc' is not a number"},
      {"64:0", "finite number > 0"},
      {"64:-1", "finite number > 0"},
      {"64:nan", "finite number > 0"},
      {"64:inf", "finite number > 0"},
      {"64:1,64:2", "64 tokens more than once"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<std::vector<LengthBucket>> mix = ParseLengthMix(text);
    ASSERT_FALSE(mix.ok()) << "'" << text << "' was accepted";
    EXPECT_EQ(mix.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(mix.status().message()), HasSubstr(message)) << text;
  }
}

TEST(LengthSamplerTest, MeanAndMax) {
  LengthSampler sampler(*ParseLengthMix("64:0.5,512:0.4,2048:0.1"));
  EXPECT_DOUBLE_EQ(sampler.MeanTokens(), 64 * 0.5 + 512 * 0.4 + 2048 * 0.1);
  EXPECT_EQ(sampler.MaxTokens(), 2048);
}

TEST(LengthSamplerTest, FrequenciesFollowTheWeights) {
  // 200000 draws: the standard error of a frequency p is sqrt(p(1-p)/n) <= 0.0012; 0.006 is 5 sigma.
  LengthSampler sampler(*ParseLengthMix("64:5,512:4,2048:1"));
  std::mt19937_64 rng(7);
  std::map<int64_t, int64_t> counts;
  const int64_t n = 200000;
  for (int64_t i = 0; i < n; ++i) ++counts[sampler.Sample(rng)];
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_NEAR(static_cast<double>(counts[64]) / n, 0.5, 0.006);
  EXPECT_NEAR(static_cast<double>(counts[512]) / n, 0.4, 0.006);
  EXPECT_NEAR(static_cast<double>(counts[2048]) / n, 0.1, 0.006);
}

TEST(LengthSamplerTest, SameSeedSameSequence) {
  LengthSampler sampler(*ParseLengthMix("2:1,3:1,4:1,5:1"));
  std::mt19937_64 a(42);
  std::mt19937_64 b(42);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sampler.Sample(a), sampler.Sample(b));
}

TEST(LengthSamplerTest, SingleBucketAlwaysDrawn) {
  LengthSampler sampler(*ParseLengthMix("100:0.3"));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sampler.Sample(rng), 100);
}

TEST(RequestGeneratorTest, BosFirstIdsInRangeLengthsFromTheMix) {
  LengthSampler sampler(*ParseLengthMix("2:1,17:1,300:1"));
  RequestGenerator gen(&sampler, /*vocab_size=*/512, /*bos_id=*/1, /*seed=*/9, /*client=*/3);
  std::vector<int32_t> ids;
  std::map<size_t, int> lengths;
  std::vector<int64_t> id_counts(512, 0);
  for (int i = 0; i < 600; ++i) {
    gen.Next(&ids);
    ++lengths[ids.size()];
    ASSERT_EQ(ids[0], 1);
    for (size_t j = 1; j < ids.size(); ++j) {
      ASSERT_GE(ids[j], 0);
      ASSERT_LT(ids[j], 512);
      ++id_counts[static_cast<size_t>(ids[j])];
    }
  }
  EXPECT_EQ(lengths.size(), 3u);
  EXPECT_GT(lengths[2], 0);
  EXPECT_GT(lengths[17], 0);
  EXPECT_GT(lengths[300], 0);
  // ~63000 uniform draws over 512 ids: ~123 each; every id appears (P(some id absent) < 512 e^-123).
  for (int64_t c : id_counts) EXPECT_GT(c, 0);
}

TEST(RequestGeneratorTest, ReproducibleBySeedAndClient) {
  LengthSampler sampler(*ParseLengthMix("8:1,64:1"));
  RequestGenerator a(&sampler, 32000, 1, 5, 0);
  RequestGenerator b(&sampler, 32000, 1, 5, 0);
  RequestGenerator other_client(&sampler, 32000, 1, 5, 1);
  RequestGenerator other_seed(&sampler, 32000, 1, 6, 0);
  std::vector<int32_t> x, y, z, w;
  bool client_differs = false;
  bool seed_differs = false;
  for (int i = 0; i < 50; ++i) {
    a.Next(&x);
    b.Next(&y);
    other_client.Next(&z);
    other_seed.Next(&w);
    ASSERT_EQ(x, y);
    client_differs |= x != z;
    seed_differs |= x != w;
  }
  EXPECT_TRUE(client_differs);
  EXPECT_TRUE(seed_differs);
}

TEST(RequestGeneratorTest, NoBosMeansRandomFirstId) {
  LengthSampler sampler(*ParseLengthMix("4:1"));
  RequestGenerator gen(&sampler, 1000, -1, 0, 0);
  std::vector<int32_t> ids;
  std::map<int32_t, int> first;
  for (int i = 0; i < 100; ++i) {
    gen.Next(&ids);
    ASSERT_EQ(ids.size(), 4u);
    ++first[ids[0]];
  }
  EXPECT_GT(first.size(), 50u);
}

// Kinds drawn by `sampler` over `n` draws.
std::map<RequestKind, int64_t> DrawKinds(KindSampler* sampler, int n, std::vector<RequestKind>* sequence) {
  std::map<RequestKind, int64_t> counts;
  for (int i = 0; i < n; ++i) {
    const RequestKind k = sampler->Next();
    ++counts[k];
    if (sequence != nullptr) sequence->push_back(k);
  }
  return counts;
}

TEST(KindSamplerTest, FractionsHonouredAndMalformedKindsMixed) {
  constexpr int kDraws = 200000;
  KindSampler sampler(/*cancel_fraction=*/0.05, /*malformed_fraction=*/0.05, /*seed=*/7, /*client=*/2);
  std::map<RequestKind, int64_t> counts = DrawKinds(&sampler, kDraws, nullptr);
  // Binomial(200000, 0.05): sd ~97 requests (0.05%); 0.5% is > 10 sd.
  EXPECT_NEAR(static_cast<double>(counts[RequestKind::kCancel]) / kDraws, 0.05, 0.005);
  const int64_t malformed = counts[RequestKind::kMalformedOutOfVocab] + counts[RequestKind::kMalformedEmpty] +
                            counts[RequestKind::kMalformedTopK] + counts[RequestKind::kMalformedRawBytes];
  EXPECT_NEAR(static_cast<double>(malformed) / kDraws, 0.05, 0.005);
  EXPECT_NEAR(static_cast<double>(counts[RequestKind::kNormal]) / kDraws, 0.90, 0.007);
  // Each malformed kind ~1/4 of the malformed ones (~2500 each, sd ~43).
  for (RequestKind k : {RequestKind::kMalformedOutOfVocab, RequestKind::kMalformedEmpty,
                        RequestKind::kMalformedTopK, RequestKind::kMalformedRawBytes}) {
    EXPECT_NEAR(static_cast<double>(counts[k]) / static_cast<double>(malformed), 0.25, 0.04)
        << RequestKindName(k);
    EXPECT_TRUE(IsMalformed(k));
  }
  EXPECT_FALSE(IsMalformed(RequestKind::kNormal));
  EXPECT_FALSE(IsMalformed(RequestKind::kCancel));
}

TEST(KindSamplerTest, DeterministicBySeedAndClient) {
  KindSampler a(0.2, 0.3, 11, 0);
  KindSampler b(0.2, 0.3, 11, 0);
  KindSampler other_client(0.2, 0.3, 11, 1);
  KindSampler other_seed(0.2, 0.3, 12, 0);
  std::vector<RequestKind> x, y, z, w;
  DrawKinds(&a, 500, &x);
  DrawKinds(&b, 500, &y);
  DrawKinds(&other_client, 500, &z);
  DrawKinds(&other_seed, 500, &w);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  EXPECT_NE(x, w);
}

TEST(KindSamplerTest, ZeroFractionsAlwaysNormalAndFullFractionsAlwaysThatKind) {
  KindSampler none(0.0, 0.0, 3, 0);
  EXPECT_EQ(DrawKinds(&none, 1000, nullptr)[RequestKind::kNormal], 1000);
  KindSampler all_cancel(1.0, 0.0, 3, 0);
  EXPECT_EQ(DrawKinds(&all_cancel, 1000, nullptr)[RequestKind::kCancel], 1000);
  KindSampler all_malformed(0.0, 1.0, 3, 0);
  std::map<RequestKind, int64_t> counts = DrawKinds(&all_malformed, 1000, nullptr);
  EXPECT_EQ(counts.count(RequestKind::kNormal) + counts.count(RequestKind::kCancel), 0u);
  EXPECT_EQ(counts.size(), 4u);  // all four malformed kinds appear
}

TEST(KindSamplerTest, InvalidUtf8RequestBytes) {
  // request_id 300 is the varint ac 02; then field 3 (0x1a), length 6, TextInput{1: "ab\xff\xfe"}.
  const std::string bytes = InvalidUtf8ScoreRequest(300);
  EXPECT_EQ(bytes, std::string("\x08\xac\x02\x1a\x06\x0a\x04"
                               "ab\xff\xfe",
                               11));
  EXPECT_EQ(InvalidUtf8ScoreRequest(5).substr(0, 3), std::string("\x08\x05\x1a", 3));
}

TEST(PercentileTest, NearestRankKnownAnswers) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(NearestRankPercentile(v, 0), 1);
  EXPECT_EQ(NearestRankPercentile(v, 1), 1);
  EXPECT_EQ(NearestRankPercentile(v, 50), 50);
  EXPECT_EQ(NearestRankPercentile(v, 90), 90);
  EXPECT_EQ(NearestRankPercentile(v, 99), 99);
  EXPECT_EQ(NearestRankPercentile(v, 99.5), 100);
  EXPECT_EQ(NearestRankPercentile(v, 100), 100);

  // n = 10: p90 is rank ceil(9) = 9 exactly (0.9 * 10 must not round up to rank 10).
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(NearestRankPercentile(ten, 90), 9);
  EXPECT_EQ(NearestRankPercentile(ten, 50), 5);
  EXPECT_EQ(NearestRankPercentile(ten, 99), 10);
  // Classic textbook example (n = 5): p30 -> rank 2, p40 -> rank 2, p50 -> rank 3, p100 -> rank 5.
  const std::vector<double> five = {15, 20, 35, 40, 50};
  EXPECT_EQ(NearestRankPercentile(five, 30), 20);
  EXPECT_EQ(NearestRankPercentile(five, 40), 20);
  EXPECT_EQ(NearestRankPercentile(five, 50), 35);
  EXPECT_EQ(NearestRankPercentile(five, 100), 50);

  EXPECT_EQ(NearestRankPercentile({}, 50), 0);
  EXPECT_EQ(NearestRankPercentile({3.5}, 99), 3.5);
}

TEST(PercentileTest, SummarySortsAndAverages) {
  std::vector<double> v = {4, 1, 3, 2};
  const LatencySummary s = SummarizeLatencies(&v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean_ms, 2.5);
  EXPECT_EQ(s.min_ms, 1);
  EXPECT_EQ(s.p50_ms, 2);
  EXPECT_EQ(s.p90_ms, 4);
  EXPECT_EQ(s.p99_ms, 4);
  EXPECT_EQ(s.max_ms, 4);
  std::vector<double> none;
  EXPECT_EQ(SummarizeLatencies(&none).count, 0);
}

TEST(LoadOptionsTest, Validation) {
  LoadOptions o;
  o.lengths = *ParseLengthMix("64:1");
  o.duration = absl::Seconds(1);
  EXPECT_TRUE(ValidateLoadOptions(o).ok());
  LoadOptions both = o;
  both.num_requests = 10;
  EXPECT_EQ(ValidateLoadOptions(both).code(), absl::StatusCode::kInvalidArgument);
  LoadOptions neither = o;
  neither.duration = absl::ZeroDuration();
  EXPECT_EQ(ValidateLoadOptions(neither).code(), absl::StatusCode::kInvalidArgument);
  LoadOptions no_clients = o;
  no_clients.concurrency = 0;
  EXPECT_THAT(ValidateLoadOptions(no_clients).ToString(), HasSubstr("concurrency"));
  LoadOptions no_inflight = o;
  no_inflight.inflight = 0;
  EXPECT_THAT(ValidateLoadOptions(no_inflight).ToString(), HasSubstr("inflight"));
  LoadOptions no_lengths = o;
  no_lengths.lengths.clear();
  EXPECT_THAT(ValidateLoadOptions(no_lengths).ToString(), HasSubstr("length mix"));
  LoadOptions fractions = o;
  fractions.cancel_fraction = 0.05;
  fractions.malformed_fraction = 0.05;
  EXPECT_TRUE(ValidateLoadOptions(fractions).ok());
  fractions.cancel_fraction = -0.1;
  EXPECT_THAT(ValidateLoadOptions(fractions).ToString(), HasSubstr("cancel_fraction"));
  fractions.cancel_fraction = 0.7;
  fractions.malformed_fraction = 0.4;
  EXPECT_THAT(ValidateLoadOptions(fractions).ToString(), HasSubstr("<= 1"));
  fractions.cancel_fraction = 0.0;
  fractions.malformed_fraction = std::nan("");
  EXPECT_THAT(ValidateLoadOptions(fractions).ToString(), HasSubstr("malformed_fraction"));
  EXPECT_EQ(*ParseMode("unary"), Mode::kUnary);
  EXPECT_EQ(*ParseMode("stream"), Mode::kStream);
  EXPECT_FALSE(ParseMode("batch").ok());
}

// Open loop (--rate): unary mode with normal requests only, a finite rate >= 0.
TEST(LoadOptionsTest, OpenLoopValidation) {
  LoadOptions o;
  o.lengths = *ParseLengthMix("64:1");
  o.num_requests = 10;
  o.rate = 25.0;
  EXPECT_TRUE(ValidateLoadOptions(o).ok());
  LoadOptions stream = o;
  stream.mode = Mode::kStream;
  EXPECT_THAT(ValidateLoadOptions(stream).ToString(), HasSubstr("needs unary mode"));
  LoadOptions cancel = o;
  cancel.cancel_fraction = 0.1;
  EXPECT_THAT(ValidateLoadOptions(cancel).ToString(), HasSubstr("normal requests only"));
  LoadOptions malformed = o;
  malformed.malformed_fraction = 0.1;
  EXPECT_THAT(ValidateLoadOptions(malformed).ToString(), HasSubstr("normal requests only"));
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    LoadOptions r = o;
    r.rate = bad;
    EXPECT_THAT(ValidateLoadOptions(r).ToString(), HasSubstr("rate must be >= 0")) << bad;
  }
}

TEST(ReportTest, OpenLoopLineAndJson) {
  LoadResult r;
  r.lengths = "16:1";
  r.rate = 50.0;
  r.rate_achieved = 49.5;
  r.schedule_lag_max_ms = 1.25;
  r.max_outstanding = 3;
  const std::string table = FormatTable(r);
  EXPECT_THAT(table, HasSubstr("unary, open loop at 50 req/s, lengths 16:1"));
  EXPECT_THAT(table, HasSubstr("open loop    50.00 req/s asked, 49.50 achieved (start lag max 1.25 ms, 3 "
                               "outstanding max); latency from the scheduled start\n"));
  const nlohmann::json j = ToJson(r);
  EXPECT_DOUBLE_EQ(j["open_loop"]["rate"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(j["open_loop"]["rate_achieved"].get<double>(), 49.5);
  EXPECT_DOUBLE_EQ(j["open_loop"]["schedule_lag_max_ms"].get<double>(), 1.25);
  EXPECT_EQ(j["open_loop"]["max_outstanding"].get<int64_t>(), 3);
  r.rate = 0.0;
  EXPECT_FALSE(ToJson(r).contains("open_loop"));
}

TEST(LoadOptionsTest, NoServerMeansUnavailableNotAHang) {
  LoadOptions o;
  o.server = "127.0.0.1:1";  // reserved port, nothing listens
  o.lengths = *ParseLengthMix("64:1");
  o.num_requests = 1;
  o.connect_timeout = absl::Milliseconds(300);
  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("127.0.0.1:1"));
}

TEST(ReportTest, TableAndJson) {
  LoadResult r;
  r.server = "127.0.0.1:5";
  r.mode = Mode::kStream;
  r.concurrency = 4;
  r.inflight = 8;
  r.lengths = "64:1";
  r.wall = absl::Seconds(2);
  r.requests = 12;
  r.requests_ok = 10;
  r.tokens_ok = 640;
  r.requests_per_s = 5;
  r.tokens_per_s = 320;
  r.codes[absl::StatusCode::kOk] = 10;
  r.codes[absl::StatusCode::kUnavailable] = 2;
  r.first_message[absl::StatusCode::kUnavailable] = "the server is shutting down";
  r.clients_finished = 4;
  r.clients_stopped_unavailable = 2;
  const std::string table = FormatTable(r);
  EXPECT_THAT(table, HasSubstr("stream, 4 streams x 8 in flight"));
  EXPECT_THAT(table, HasSubstr("12 sent, 10 ok, 2 failed  5.0 req/s"));
  EXPECT_THAT(table, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(table, HasSubstr("first: the server is shutting down"));
  const nlohmann::json j = ToJson(r);
  EXPECT_EQ(j["mode"], "stream");
  EXPECT_EQ(j["errors"], 2);
  EXPECT_EQ(j["codes"]["OK"], 10);
  EXPECT_EQ(j["codes"]["UNAVAILABLE"], 2);
  EXPECT_EQ(j["first_error"]["UNAVAILABLE"], "the server is shutting down");
  EXPECT_DOUBLE_EQ(j["wall_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 320.0);
}

TEST(ReportTest, OutcomesAndKinds) {
  LoadResult r;
  r.lengths = "64:1";
  r.requests = 20;
  r.requests_ok = 14;
  r.cancelled = 2;
  r.refused = 3;
  r.unexpected = 1;
  r.first_unexpected = "normal: INTERNAL: boom";
  r.cancel_fraction = 0.1;
  r.malformed_fraction = 0.2;
  r.kinds[RequestKind::kNormal] = 14;
  r.kinds[RequestKind::kCancel] = 2;
  r.kinds[RequestKind::kMalformedRawBytes] = 4;
  const std::string table = FormatTable(r);
  EXPECT_THAT(table, HasSubstr("ok 14, cancelled 2, refused 3 (expected), unexpected 1"));
  EXPECT_THAT(table, HasSubstr("normal 14 cancel 2 raw_bytes 4"));
  EXPECT_THAT(table, HasSubstr("unexpected   first: normal: INTERNAL: boom"));
  const nlohmann::json j = ToJson(r);
  EXPECT_EQ(j["outcomes"]["ok"], 14);
  EXPECT_EQ(j["outcomes"]["cancelled"], 2);
  EXPECT_EQ(j["outcomes"]["refused"], 3);
  EXPECT_EQ(j["outcomes"]["unexpected"], 1);
  EXPECT_EQ(j["unexpected"], 1);
  EXPECT_EQ(j["kinds"]["raw_bytes"], 4);
  EXPECT_DOUBLE_EQ(j["malformed_fraction"].get<double>(), 0.2);
}

}  // namespace
}  // namespace load
}  // namespace scored

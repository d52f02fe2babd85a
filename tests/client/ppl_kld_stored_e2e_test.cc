// scored-ppl --save_reference / --kld --reference_file against real `scored` daemons (CPU backend): R =
// stories260K-hf served alone, Q = the stories260k-w4a16-channel fixture served with R as its reference (for
// the one-pass --kld the stored run is checked against). WikiText-2 test, chunks, ctx 128, 24 windows
// (3,048 scored positions); each scored-ppl run takes well under a second.
//   - K = 64 (of 512 ids): the save prints its size first and leaves FILE (no FILE.partial); R's PPL equals
//   the
//     one-pass PPL(R); against the file, every exact statistic (PPL(Q), PPL(R), their ratio, ln ratio and
//     errors, the NLL correlation, same top, delta p, |delta logprob|) equals the one-pass one, and the
//     one-pass mean KLD and every percentile lie inside the printed bounds. A save whose FILE.partial lost
//     its trailer and half a block resumes it and ends with the same report and file contents.
//   - K = 1024, clamped to the whole vocabulary: the bounds close on the one-pass KLD (float rounding).
//   - refusals naming the mismatch: other windows (--ctx, --max_windows), another tokenizer (a copy of R's
//     tokenizer files with one byte more); flags that do not go together exit 2 before any server is used.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/server/scored_process.h"

namespace scored {
namespace ppl {
namespace {

using testing::ChildRun;
using ::testing::HasSubstr;
using testing::ReadText;

ChildRun RunPpl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunToExit(argv, absl::StrCat(::testing::TempDir(), "/ppl_kld_stored_e2e.", ::getpid()),
                            absl::Seconds(120));
}

std::string Temp(const std::string& name) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/ppl_kld_stored.", ::getpid(), ".", name);
  std::remove(path.c_str());
  std::remove((path + ".partial").c_str());
  return path;
}

nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadText(path), nullptr, false);
}

class PplKldStoredE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::ScoredProcessOptions r;
    r.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu"};
    auto started_r = testing::ScoredProcess::Start(r);
    ASSERT_TRUE(started_r.ok()) << started_r.status();
    r_server_ = started_r->release();
    testing::ScoredProcessOptions q;
    q.args = {"--model=" + std::string(SCORED_FIXTURES_DIR) + "/stories260k-w4a16-channel", "--backend=cpu",
              "--reference_model=" + testing::StoriesModelDir()};
    q.startup_timeout = absl::Seconds(60);
    auto started_q = testing::ScoredProcess::Start(q);
    ASSERT_TRUE(started_q.ok()) << started_q.status();
    q_server_ = started_q->release();
    // The one-pass --kld every stored run is compared with.
    one_pass_json_ = new std::string(Temp("one_pass.json"));
    const ChildRun one = RunPpl(Args(q_server_->grpc_address(), *one_pass_json_, {"--kld"}));
    ASSERT_EQ(one.exit_code, 0) << one.err;
  }
  static void TearDownTestSuite() {
    delete r_server_;
    delete q_server_;
    if (one_pass_json_ != nullptr) std::remove(one_pass_json_->c_str());
    delete one_pass_json_;
  }
  void SetUp() override {
    ASSERT_NE(r_server_, nullptr);
    ASSERT_NE(q_server_, nullptr);
  }

  static std::vector<std::string> Args(const std::string& address, const std::string& json,
                                       const std::vector<std::string>& more) {
    std::vector<std::string> args = {
        "--server=" + address, std::string("--data=") + SCORED_DATA_DIR + "/wikitext-2-raw/wiki.test.raw",
        "--method=chunks",     "--ctx=128",
        "--max_windows=24",    "--quiet",
        "--json=" + json};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  // Saves R's reference at K = `top_k` into `file`; returns the save's report.
  static nlohmann::json Save(const std::string& file, int top_k, std::string* err = nullptr) {
    const std::string json = Temp("save.json");
    const ChildRun run =
        RunPpl(Args(r_server_->grpc_address(), json,
                    {"--save_reference=" + file, absl::StrCat("--reference_top_k=", top_k)}));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    if (err != nullptr) *err = run.err;
    nlohmann::json report = ReadJson(json);
    std::remove(json.c_str());
    return report;
  }

  // Q against `file`: its report.
  static nlohmann::json Compare(const std::string& file) {
    const std::string json = Temp("stored.json");
    const ChildRun run = RunPpl(Args(q_server_->grpc_address(), json, {"--kld", "--reference_file=" + file}));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_THAT(run.out, HasSubstr("bounds ["));
    EXPECT_THAT(run.out, HasSubstr("KLD from a stored reference"));
    nlohmann::json report = ReadJson(json);
    std::remove(json.c_str());
    return report;
  }

  static testing::ScoredProcess* r_server_;
  static testing::ScoredProcess* q_server_;
  static std::string* one_pass_json_;
};
testing::ScoredProcess* PplKldStoredE2eTest::r_server_ = nullptr;
testing::ScoredProcess* PplKldStoredE2eTest::q_server_ = nullptr;
std::string* PplKldStoredE2eTest::one_pass_json_ = nullptr;

// The statistics the stored data determine, compared with the one-pass ones: equal up to the rounding of the
// same float values summed in another order (here they come out bit for bit).
void ExpectExactStatistics(const nlohmann::json& stored, const nlohmann::json& one_pass) {
  EXPECT_EQ(stored["count"], one_pass["count"]);
  for (const char* key : {"ppl_q", "ppl_q_error", "ppl_r", "ppl_r_error", "ppl_ratio", "ppl_ratio_error",
                          "ln_ppl_ratio", "ln_ppl_ratio_error", "nll_correlation", "same_top",
                          "same_top_error", "delta_p_mean", "delta_p_error", "delta_p_rms",
                          "delta_p_rms_error", "abs_delta_logprob_mean", "abs_delta_logprob_max"}) {
    const double want = one_pass[key].get<double>();
    EXPECT_NEAR(stored[key].get<double>(), want, 1e-12 * std::fabs(want) + 1e-15) << key;
  }
}

TEST_F(PplKldStoredE2eTest, TopKFileGivesTheExactStatisticsAndBoundsTheKld) {
  const nlohmann::json one = ReadJson(*one_pass_json_);
  ASSERT_TRUE(one.contains("kld")) << *one_pass_json_;
  const std::string file = Temp("k64.ref");
  std::string save_err;
  const nlohmann::json saved = Save(file, 64, &save_err);
  EXPECT_THAT(save_err,
              HasSubstr("K=64 (R's top-64 per position): ~1.6 MB for 3048 positions in 24 windows"));
  EXPECT_TRUE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(file + ".partial"));
  EXPECT_EQ(saved["saved_reference"]["top_k"], 64);
  EXPECT_EQ(saved["saved_reference"]["bytes"].get<int64_t>(),
            static_cast<int64_t>(std::filesystem::file_size(file)));
  EXPECT_NEAR(saved["ppl"].get<double>(), one["kld"]["ppl_r"].get<double>(),
              1e-12 * one["kld"]["ppl_r"].get<double>());

  const nlohmann::json stored = Compare(file);
  const nlohmann::json& s = stored["kld"];
  const nlohmann::json& o = one["kld"];
  EXPECT_EQ(stored["ppl"], one["ppl"]);
  EXPECT_EQ(s["kld_source"], "stored");
  EXPECT_EQ(s["reference_top_k"], 64);
  EXPECT_EQ(s["reference"]["model_fingerprint"], o["reference"]["model_fingerprint"]);
  ExpectExactStatistics(s, o);
  // The one-pass KLD (each per-token value within 1e-6 of float64: the mean and the percentiles too) inside
  // the bounds.
  const double kld = o["kld_mean"].get<double>();
  std::cout << "[ measured ] K=64: one-pass mean KLD " << kld << ", stored estimate " << s["kld_mean"]
            << " in [" << s["kld_mean_lower"] << ", " << s["kld_mean_upper"] << "], R's mass left out "
            << s["tail_mass_mean"] << ", file " << std::filesystem::file_size(file) << " bytes" << std::endl;
  EXPECT_LE(s["kld_mean_lower"].get<double>(), kld + 1e-6);
  EXPECT_GE(s["kld_mean_upper"].get<double>(), kld - 1e-6);
  EXPECT_LT(s["kld_mean_lower"].get<double>(), s["kld_mean_upper"].get<double>());
  EXPECT_EQ(s["kld_mean"], s["kld_mean_lower"]);
  for (const auto& item : o["kld_percentiles"].items()) {
    const double v = item.value().get<double>();
    EXPECT_LE(s["kld_percentiles_lower"][item.key()].get<double>(), v + 1e-6) << item.key();
    EXPECT_GE(s["kld_percentiles_upper"][item.key()].get<double>(), v - 1e-6) << item.key();
  }

  // A save killed mid-way: FILE.partial without its trailer and with the last block cut in half. The rerun
  // keeps the whole blocks, scores the rest and ends with the same report and file.
  const std::string again = Temp("k64_again.ref");
  {
    std::ifstream in(file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string all = bytes.str();
    const size_t block = 28 + 127 * (16 + 8 * 64) + 4;  // a window of 127 scored positions
    std::ofstream out(again + ".partial", std::ios::binary);
    out << all.substr(0, all.size() - 24 - block / 2);
  }
  std::string resume_err;
  const nlohmann::json resumed = Save(again, 64, &resume_err);
  EXPECT_THAT(resume_err, HasSubstr("cutting off its last"));
  EXPECT_THAT(resume_err, HasSubstr("23 of 24 windows already stored"));
  EXPECT_EQ(resumed["ppl"], saved["ppl"]);
  EXPECT_EQ(resumed["num_windows_resumed"], 23);
  nlohmann::json again_kld = Compare(again)["kld"], first_kld = s;
  again_kld["reference"].erase("file");
  first_kld["reference"].erase("file");
  EXPECT_EQ(again_kld, first_kld);
  std::remove(file.c_str());
  std::remove(again.c_str());
}

TEST_F(PplKldStoredE2eTest, WholeVocabularyFileIsExact) {
  const nlohmann::json one = ReadJson(*one_pass_json_);
  const std::string file = Temp("all.ref");
  std::string save_err;
  Save(file, 1024, &save_err);
  EXPECT_THAT(save_err, HasSubstr("K=512 (R's top-512 per position, the whole vocabulary)"));
  const nlohmann::json stored = Compare(file);
  const nlohmann::json& s = stored["kld"];
  const nlohmann::json& o = one["kld"];
  ExpectExactStatistics(s, o);
  const double kld = o["kld_mean"].get<double>();
  std::cout << "[ measured ] K=512 (all): one-pass mean KLD " << kld << ", stored " << s["kld_mean"]
            << ", bounds width " << s["kld_mean_upper"].get<double>() - s["kld_mean_lower"].get<double>()
            << std::endl;
  EXPECT_NEAR(s["kld_mean"].get<double>(), kld, 1e-6 * kld);
  EXPECT_EQ(s["kld_mean_lower"], s["kld_mean_upper"]);
  EXPECT_EQ(s["tail_mass_mean"].get<double>(), 0.0);
  for (const auto& item : o["kld_percentiles"].items()) {
    EXPECT_NEAR(s["kld_percentiles"][item.key()].get<double>(), item.value().get<double>(),
                1e-6 + 1e-5 * item.value().get<double>())
        << item.key();
  }
  std::remove(file.c_str());
}

TEST_F(PplKldStoredE2eTest, ARunWithOtherWindowsOrAnotherTokenizerIsRefused) {
  const std::string file = Temp("mismatch.ref");
  Save(file, 8);
  const std::string json = Temp("refused.json");
  auto refused = [&](std::vector<std::string> args, const std::string& why) {
    const ChildRun run = RunPpl(args);
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr(why));
    EXPECT_FALSE(std::filesystem::exists(json)) << "a refused run wrote a report";
  };
  std::vector<std::string> args =
      Args(q_server_->grpc_address(), json, {"--kld", "--reference_file=" + file});
  std::vector<std::string> other_ctx = args;
  other_ctx[3] = "--ctx=64";
  refused(other_ctx, "was saved by a run with ctx '128' but this run has '64'");
  std::vector<std::string> fewer = args;
  fewer[4] = "--max_windows=12";
  refused(fewer, "max_windows '24' but this run has '12'");
  // The same tokenizer files with one more byte in tokenizer_config.json: the same ids, another fingerprint.
  const std::string tokenizer = Temp("tokenizer");
  std::filesystem::create_directories(tokenizer);
  for (const char* name : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}) {
    std::filesystem::copy_file(testing::StoriesModelDir() + "/" + name, tokenizer + "/" + name,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(tokenizer + "/tokenizer_config.json", std::ios::app) << "\n";
  std::vector<std::string> other_tokenizer = args;
  other_tokenizer.push_back("--tokenizer=" + tokenizer);
  refused(other_tokenizer, "was saved by a run with tokenizer_fingerprint '");
  std::filesystem::remove_all(tokenizer);
  // A missing file.
  std::vector<std::string> missing = args;
  missing.back() = "--reference_file=" + file + ".missing";
  refused(missing, "does not exist (make it with scored-ppl --save_reference)");
  std::remove(file.c_str());
}

TEST_F(PplKldStoredE2eTest, FlagsThatDoNotGoTogetherExit2) {
  const std::string json = Temp("usage.json");
  const std::string unreachable = "127.0.0.1:1";  // never contacted
  for (const auto& [more, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--save_reference=/tmp/x.ref", "--kld"}, "--save_reference runs the reference model alone"},
           {{"--reference_file=/tmp/x.ref"},
            "--reference_file compares with a stored reference: give it with --kld"},
           {{"--kld", "--reference_file=/tmp/x.ref", "--journal=/tmp/x.journal"},
            "--journal does not combine"},
           {{"--save_reference=/tmp/x.ref", "--reference_top_k=0"}, "--reference_top_k must be in [1, 1024]"},
       }) {
    const ChildRun run = RunPpl(Args(unreachable, json, more));
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_THAT(run.err, HasSubstr(why));
  }
}

}  // namespace
}  // namespace ppl
}  // namespace scored

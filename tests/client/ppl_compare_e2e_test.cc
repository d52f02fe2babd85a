// End-to-end: real reports of the real scored-ppl binary against the real `scored` daemon (CPU backend,
// stories260K-hf), then `scored-ppl compare` over them. The reports name the model (label, model_path),
// write every number as a JSON number and give PPL with its error; compare tabulates comparable reports,
// refuses (exit 1, naming the field) reports made with another ctx, and flags them with --force.
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

ChildRun RunPplBinary(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {std::string(SCORED_BINARY_DIR) + "/client/ppl/scored-ppl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunToExit(argv, absl::StrCat(::testing::TempDir(), "/ppl_compare_e2e.", ::getpid()),
                            absl::Seconds(300));
}

class PplCompareE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::ScoredProcessOptions options;
    options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu"};
    auto proc = testing::ScoredProcess::Start(options);
    ASSERT_TRUE(proc.ok()) << proc.status();
    server_ = proc->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // Runs one scored-ppl over the first windows of WikiText-2 test; the JSON report goes to `json`.
  static ChildRun Score(int ctx, const std::string& json, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--server=" + server_->grpc_address(),
        "--data=" + std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw",
        "--method=chunks",
        absl::StrCat("--ctx=", ctx),
        "--max_windows=8",
        "--quiet",
        "--connect_timeout_s=60",
        "--json=" + json};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunPplBinary(args);
  }

  static std::string Temp(const std::string& name) {
    return absl::StrCat(::testing::TempDir(), "/ppl_compare_e2e.", ::getpid(), ".", name);
  }

  static testing::ScoredProcess* server_;
};

testing::ScoredProcess* PplCompareE2eTest::server_ = nullptr;

TEST_F(PplCompareE2eTest, ReportsNameTheModelAndCompareTabulatesThem) {
  ASSERT_NE(server_, nullptr);
  const std::string plain = Temp("plain.json"), named = Temp("named.json"), short_ctx = Temp("short.json");
  const ChildRun first = Score(128, plain);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const ChildRun second = Score(128, named, {"--label=run, \"two\""});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const ChildRun third = Score(64, short_ctx);
  ASSERT_EQ(third.exit_code, 0) << third.err;

  // The report: default label = the model folder's name, its path, PPL +- error, numbers as numbers.
  const nlohmann::json a = nlohmann::json::parse(ReadText(plain));
  EXPECT_EQ(a["label"], "stories260K-hf");
  EXPECT_EQ(a["model_path"], testing::StoriesModelDir());
  EXPECT_EQ(a["model_info"]["model_path"], testing::StoriesModelDir());
  EXPECT_TRUE(a["model_info"]["num_parameters"].is_number_integer()) << a["model_info"].dump();
  EXPECT_GT(a["model_info"]["num_parameters"].get<int64_t>(), 200000);
  EXPECT_TRUE(a["model_info"]["max_seq_len"].is_number_integer());
  EXPECT_TRUE(a["model_info"]["resident_bytes"].is_number_integer());
  EXPECT_EQ(a["num_windows"].get<int64_t>(), 8);
  EXPECT_EQ(a["data"]["sha256"].get<std::string>().size(), 64u);
  const double ppl = a["ppl"].get<double>(), nll_stderr = a["nll_stderr"].get<double>();
  EXPECT_GT(nll_stderr, 0.0);
  EXPECT_DOUBLE_EQ(a["ppl_stderr"].get<double>(), ppl * nll_stderr);
  EXPECT_THAT(first.out, HasSubstr("label          stories260K-hf\n"));
  EXPECT_THAT(first.out, HasSubstr("model_path     " + testing::StoriesModelDir() + "\n"));
  EXPECT_THAT(first.out, HasSubstr(" +- "));
  const nlohmann::json b = nlohmann::json::parse(ReadText(named));
  EXPECT_EQ(b["label"], "run, \"two\"");
  EXPECT_EQ(b["ppl"].get<double>(), ppl);  // the same windows score the same, bit for bit

  // Comparable reports: a table, ratio 1, and a CSV that parses back to the reports' numbers.
  const std::string csv = Temp("table.csv");
  const ChildRun table = RunPplBinary({"compare", "--csv", csv, plain, named});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("| label | PPL ± err | ratio | bits/weight |\n"));
  EXPECT_THAT(table.out, HasSubstr("| stories260K-hf | "));
  EXPECT_THAT(table.out, HasSubstr("| run, \"two\" | "));
  EXPECT_THAT(table.out, HasSubstr(" | 1.0000 | 32.000 |\n"));  // fp32 weights: 32 bits per weight
  const std::vector<std::string> lines = absl::StrSplit(ReadText(csv), "\r\n", absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << ReadText(csv);
  EXPECT_EQ(lines[0], "label,report,ppl,ppl_stderr,ratio,bits_per_weight");
  const std::vector<std::string> row = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(row.size(), 6u) << lines[1];
  EXPECT_EQ(row[0], "stories260K-hf");
  EXPECT_EQ(row[1], plain);
  EXPECT_EQ(std::stod(row[2]), ppl);
  EXPECT_EQ(std::stod(row[3]), ppl * nll_stderr);
  EXPECT_EQ(std::stod(row[4]), 1.0);
  EXPECT_THAT(lines[2], HasSubstr("\"run, \"\"two\"\"\","));

  // Another ctx: refused naming the field, or flagged with --force.
  const ChildRun refused = RunPplBinary({"compare", plain, short_ctx});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("method.ctx differs: " + plain + " has 128, " + short_ctx + " has 64"));
  EXPECT_TRUE(refused.out.empty()) << refused.out;
  const ChildRun forced = RunPplBinary({"compare", "--force", plain, short_ctx});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_THAT(forced.out, HasSubstr("| differs from the first in |"));
  EXPECT_THAT(forced.out, HasSubstr(" | method.ctx, num_scored |\n"));

  // Bad command lines exit 2.
  EXPECT_EQ(RunPplBinary({"compare"}).exit_code, 2);
  EXPECT_EQ(RunPplBinary({"compare", "--bogus", plain}).exit_code, 2);
  EXPECT_EQ(RunPplBinary({"compare", Temp("missing.json")}).exit_code, 1);
}

// A --kld report (the model as its own reference) next to a plain one: the KLD columns appear, empty for the
// plain report; Q = R gives KLD 0, PPL(Q)/PPL(R) 1 and same top p 100 %.
TEST_F(PplCompareE2eTest, KldColumnsFromARealKldReport) {
  testing::ScoredProcessOptions options;
  options.args = {"--model=" + testing::StoriesModelDir(), "--backend=cpu",
                  "--reference_model=" + testing::StoriesModelDir()};
  auto with_reference = testing::ScoredProcess::Start(options);
  ASSERT_TRUE(with_reference.ok()) << with_reference.status();
  const std::string plain = Temp("kld_plain.json"), kld = Temp("kld.json");
  ASSERT_EQ(Score(128, plain).exit_code, 0);
  std::vector<std::string> args = {"--server=" + (*with_reference)->grpc_address(),
                                   "--data=" + std::string(SCORED_DATA_DIR) + "/wikitext-2-raw/wiki.test.raw",
                                   "--method=chunks",
                                   "--ctx=128",
                                   "--max_windows=8",
                                   "--quiet",
                                   "--kld",
                                   "--label=self-reference",
                                   "--json=" + kld};
  const ChildRun kld_run = RunPplBinary(args);
  ASSERT_EQ(kld_run.exit_code, 0) << kld_run.err;
  const std::string csv = Temp("kld.csv");
  const ChildRun table = RunPplBinary({"compare", plain, kld, "--csv=" + csv});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr(" | KLD ± err | PPL(Q)/PPL(R) ± err | same top p |\n"));
  EXPECT_THAT(table.out, HasSubstr(" | 1.0000 | 32.000 |  |  |  |\n"));
  EXPECT_THAT(table.out, HasSubstr("| self-reference | "));
  EXPECT_THAT(table.out,
              HasSubstr(" | 1.0000 | 32.000 | 0.000000 ± 0.000000 | 1.0000 ± 0.0000 | 100.000 % |\n"));
  const std::vector<std::string> lines = absl::StrSplit(ReadText(csv), "\r\n", absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "label,report,ppl,ppl_stderr,ratio,bits_per_weight,kld_mean,kld_error,ppl_ratio_ref,"
            "ppl_ratio_ref_error,same_top");
  EXPECT_THAT(lines[2], HasSubstr(",0,0,1,0,1"));
}

}  // namespace
}  // namespace ppl
}  // namespace scored

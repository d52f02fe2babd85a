// scored-ppl compare's pure parts (client/ppl/compare.h): rows read from reports (new and old forms),
// comparability checks naming the field, the markdown table and the CSV, with known values.
#include "client/ppl/compare.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace ppl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A report as scored-ppl writes it (the keys compare reads).
nlohmann::json MakeReport(const std::string& label, double ppl, double nll_stderr, double bpw) {
  return {{"label", label},
          {"model_path", "/models/" + label},
          {"ppl", ppl},
          {"ppl_stderr", ppl * nll_stderr},
          {"nll_stderr", nll_stderr},
          {"num_windows", 10},
          {"num_scored", 5110},
          {"method", {{"name", "chunks"}, {"ctx", 512}, {"max_windows", 10}, {"prefix_id", 1}}},
          {"data", {{"path", "/data/wiki.test.raw"}, {"format", "wikitext"}, {"sha256", "abc"}}},
          {"tokenizer_fingerprint", "tok1"},
          {"model_info", {{"bits_per_weight_decoder", bpw}, {"num_parameters", 260000}}}};
}

CompareEntry Entry(const nlohmann::json& report, const std::string& source) {
  absl::StatusOr<CompareEntry> e = EntryFromReport(report, source);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : CompareEntry{};
}

TEST(CompareTest, TableAndCsvOfComparableReports) {
  const CompareEntry a = Entry(MakeReport("bf16", 10.0, 0.01, 16.0), "a.json");
  const CompareEntry b = Entry(MakeReport("w4a16", 10.5, 0.02, 4.25), "b.json");
  absl::StatusOr<Comparison> c = Compare({a, b}, /*force=*/false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->kld);
  EXPECT_FALSE(c->any_differing);
  EXPECT_EQ(MarkdownTable(*c),
            "| label | PPL ± err | ratio | bits/weight |\n"
            "| :-- | --: | --: | --: |\n"
            "| bf16 | 10.0000 ± 0.1000 | 1.0000 | 16.000 |\n"
            "| w4a16 | 10.5000 ± 0.2100 | 1.0500 | 4.250 |\n");
  EXPECT_EQ(CsvTable(*c),
            "label,report,ppl,ppl_stderr,ratio,bits_per_weight\r\n"
            "bf16,a.json,10,0.10000000000000001,1,16\r\n"
            "w4a16,b.json,10.5,0.20999999999999999,1.05,4.25\r\n");
}

TEST(CompareTest, KldColumnsWhenAnyReportHasThem) {
  nlohmann::json with_kld = MakeReport("q", 11.0, 0.01, 4.5);
  with_kld["kld"] = {{"kld_mean", 0.0125},
                     {"kld_error", 0.0005},
                     {"ppl_ratio", 1.1},
                     {"ppl_ratio_error", 0.002},
                     {"same_top", 0.9375}};
  absl::StatusOr<Comparison> c =
      Compare({Entry(MakeReport("r", 10.0, 0.01, 16.0), "r.json"), Entry(with_kld, "q.json")}, false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->kld);
  const std::string md = MarkdownTable(*c);
  EXPECT_THAT(md, HasSubstr("| label | PPL ± err | ratio | bits/weight | KLD ± err | PPL(Q)/PPL(R) ± err | "
                            "same top p |\n"));
  EXPECT_THAT(md, HasSubstr("| r | 10.0000 ± 0.1000 | 1.0000 | 16.000 |  |  |  |\n"));
  EXPECT_THAT(md,
              HasSubstr("| q | 11.0000 ± 0.1100 | 1.1000 | 4.500 | 0.012500 ± 0.000500 | 1.1000 ± 0.0020 | "
                        "93.750 % |\n"));
  const std::string csv = CsvTable(*c);
  EXPECT_THAT(csv, HasSubstr(",kld_mean,kld_error,ppl_ratio_ref,ppl_ratio_ref_error,same_top\r\n"));
  EXPECT_THAT(csv, HasSubstr("r,r.json,10,0.10000000000000001,1,16,,,,,\r\n"));
  EXPECT_THAT(csv,
              HasSubstr(",0.012500000000000001,0.00050000000000000001,1.1000000000000001,0.002,0.9375\r\n"));
}

TEST(CompareTest, RefusesDifferentMethodWindowsDataOrTokenizerNamingTheField) {
  const nlohmann::json base = MakeReport("a", 10.0, 0.01, 16.0);
  struct Case {
    const char* what;
    nlohmann::json report;
    std::vector<std::string> fields;
  };
  std::vector<Case> cases;
  nlohmann::json r = base;
  r["method"]["name"] = "rolling";
  cases.push_back({"method", r, {"method.name"}});
  r = base;
  r["method"]["ctx"] = 256;
  r["num_windows"] = 20;
  cases.push_back({"ctx", r, {"method.ctx", "num_windows"}});
  r = base;
  r["num_scored"] = 5000;
  cases.push_back({"windows", r, {"num_scored"}});
  r = base;
  r["data"]["sha256"] = "def";
  cases.push_back({"data", r, {"data.sha256"}});
  r = base;
  r["tokenizer_fingerprint"] = "tok2";
  cases.push_back({"tokenizer", r, {"tokenizer_fingerprint"}});
  for (const Case& c : cases) {
    const CompareEntry other = Entry(c.report, "other.json");
    EXPECT_EQ(DifferingFields(Entry(base, "base.json"), other), c.fields) << c.what;
    absl::StatusOr<Comparison> refused = Compare({Entry(base, "base.json"), other}, false);
    ASSERT_FALSE(refused.ok()) << c.what;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(refused.status().message(), HasSubstr(c.fields.front() + " differs: base.json has "));
    absl::StatusOr<Comparison> forced = Compare({Entry(base, "base.json"), other}, true);
    ASSERT_TRUE(forced.ok()) << c.what;
    EXPECT_TRUE(forced->any_differing);
    EXPECT_THAT(MarkdownTable(*forced), HasSubstr("differs from the first in |"));
    EXPECT_THAT(MarkdownTable(*forced), HasSubstr(" | " + c.fields.front()));
  }
  // A copy of the data elsewhere (same bytes, other path) is the same data.
  r = base;
  r["data"]["path"] = "/elsewhere/wiki.test.raw";
  EXPECT_TRUE(DifferingFields(Entry(base, "a"), Entry(r, "b")).empty());
  // Without hashes the path decides.
  nlohmann::json no_hash = base;
  no_hash["data"].erase("sha256");
  r.erase("data");
  r["data"] = {{"path", "/elsewhere/wiki.test.raw"}, {"format", "wikitext"}};
  EXPECT_THAT(DifferingFields(Entry(no_hash, "a"), Entry(r, "b")), ElementsAre("data.path"));
}

// Reports written before labels, ppl_stderr and numeric int64 fields read as they are.
TEST(CompareTest, OldReportsStayReadable) {
  nlohmann::json old = MakeReport("x", 8.0, 0.05, 4.0);
  old.erase("label");
  old.erase("ppl_stderr");
  old.erase("model_path");
  old["model_info"]["num_parameters"] = "260000";
  old["num_windows"] = "10";  // a string holding the same count as the new report's number
  const CompareEntry e = Entry(old, "/runs/old-run.json");
  EXPECT_EQ(e.label, "old-run.json");
  EXPECT_DOUBLE_EQ(e.ppl_stderr, 8.0 * 0.05);
  EXPECT_DOUBLE_EQ(e.bits_per_weight, 4.0);
  EXPECT_TRUE(DifferingFields(Entry(MakeReport("y", 8.0, 0.05, 4.0), "new.json"), e).empty());
  old["model_info"]["model_path"] = "/models/stories260K-hf/";
  EXPECT_EQ(Entry(old, "o.json").label, "stories260K-hf");
}

TEST(CompareTest, NotAReport) {
  EXPECT_EQ(EntryFromReport(nlohmann::json::object(), "e.json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EntryFromReport({{"method", nlohmann::json::object()}}, "e.json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare({}, false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadReportEntry("/nonexistent/report.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(CompareTest, CellsAreEscaped) {
  const CompareEntry a = Entry(MakeReport("a|b", 10.0, 0.01, 16.0), "x,\"y\".json");
  absl::StatusOr<Comparison> c = Compare({a}, false);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(MarkdownTable(*c), HasSubstr("| a\\|b |"));
  EXPECT_THAT(CsvTable(*c), HasSubstr("a|b,\"x,\"\"y\"\".json\","));
}

}  // namespace
}  // namespace ppl
}  // namespace scored

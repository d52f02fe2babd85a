// Every checkpoint the tests own, scored by the CPU backend, reduced to one SHA-256 of its results' bytes
// and compared with tests/fixtures/cpu_result_digests.txt: a restructuring of the loader, the layer plan or
// the oracle's forward must leave every byte of every result as it was (issue 30's acceptance). The tolerance
// is zero on purpose: the CPU backend is deterministic (each sequence on its own, the thread pool splitting
// rows without changing any sum), so any change of a bit is a change of behaviour, and a deliberate one
// rewrites the file: SCORED_UPDATE_DIGESTS=1 ./digest_test (then review the diff of the digests file; the
// fixture tests against transformers say whether the new values are right).
//
// Inputs: the token ids of each fixture's reference_logprobs.json (real text for the trained fixtures), all
// sequences in one batch, with top_k 4, rank and entropy, so the digest covers the log-softmax, greedy,
// rank, entropy and top-k paths too; stories260K-hf (the real trained Llama);
// and two --reference_model pairs (stories260K against a weight-only and a W8A8 quant of it), so the
// KL-divergence comparison is covered. stories260K-hf scores the TinyStories sample of its golden file; a
// model without a golden file would score ids from a fixed generator.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/base/sha256.h"
#include "engine/engine.h"
#include "engine/reference/reference_engine.h"
#include "engine/score_contract.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace scored {
namespace {

const std::string kFixtures = SCORED_FIXTURES_DIR;
const std::string kDigestFile = kFixtures + "/cpu_result_digests.txt";
const std::string kStories = std::string(SCORED_DATA_DIR) + "/stories260K-hf";

struct Case {
  std::string name;       // the digest's key
  std::string model_dir;  // Q
  std::string reference;  // R for want_reference, or empty
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "config.json") &&
        std::filesystem::exists(entry.path() / "reference_logprobs.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) cases.push_back({n, kFixtures + "/" + n, ""});
  cases.push_back({"stories260K-hf", kStories, ""});
  cases.push_back({"kld:stories260k-w4a16-channel", kFixtures + "/stories260k-w4a16-channel", kStories});
  cases.push_back({"kld:stories260k-fp8-dynamic", kFixtures + "/stories260k-fp8-dynamic", kStories});
  return cases;
}

// The batch a case scores: the token ids of its golden file, else 3 sequences of fixed pseudo-random ids
// (a 64-bit LCG, the same on every platform) below the model's vocabulary.
std::vector<ScoreRequest> Requests(const Case& c, int64_t vocab_size) {
  std::vector<std::vector<int32_t>> ids;
  const std::string golden = c.model_dir + "/reference_logprobs.json";
  if (std::filesystem::exists(golden)) {
    std::ifstream in(golden);
    const nlohmann::json j = nlohmann::json::parse(in);
    // A fixture's sequences, or the TinyStories sample of stories260K-hf's golden file.
    const nlohmann::json& seqs =
        j.contains("sequences") ? j["sequences"] : j["tinystories_sample"]["stories"];
    for (const nlohmann::json& seq : seqs) ids.push_back(seq["token_ids"].get<std::vector<int32_t>>());
  }
  if (ids.empty()) {
    uint64_t state = 0x5C0BEDULL;
    for (int64_t length : {64, 17, 130}) {
      std::vector<int32_t> seq(static_cast<size_t>(length));
      for (int32_t& id : seq) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab_size));
      }
      ids.push_back(std::move(seq));
    }
  }
  std::vector<ScoreRequest> batch;
  for (std::vector<int32_t>& seq : ids) {
    ScoreRequest r;
    r.tokens = std::move(seq);
    r.top_k = 4;
    r.want_rank = true;
    r.want_entropy = true;
    r.want_reference = !c.reference.empty();
    batch.push_back(std::move(r));
  }
  return batch;
}

template <typename T>
void Add(Sha256& h, const std::vector<T>& v) {
  const uint64_t n = v.size();
  h.Update(&n, sizeof(n));
  if (!v.empty()) h.Update(v.data(), v.size() * sizeof(T));
}

// SHA-256 of every field of every result, in a fixed order.
std::string Digest(const std::vector<ScoreResult>& results) {
  Sha256 h;
  for (const ScoreResult& r : results) {
    Add(h, r.logprob);
    Add(h, r.greedy);
    Add(h, r.rank);
    Add(h, r.entropy);
    for (const std::vector<TopKEntry>& row : r.top_k) {
      for (const TopKEntry& e : row) {
        h.Update(&e.id, sizeof(e.id));
        h.Update(&e.logprob, sizeof(e.logprob));
      }
    }
    h.Update(&r.sum_logprob, sizeof(r.sum_logprob));
    h.Update(&r.num_scored, sizeof(r.num_scored));
    Add(h, r.ref_logprob);
    Add(h, r.kld);
    Add(h, r.ref_greedy);
    Add(h, r.same_top);
    h.Update(&r.sum_ref_logprob, sizeof(r.sum_ref_logprob));
    h.Update(&r.sum_kld, sizeof(r.sum_kld));
  }
  return h.HexDigest();
}

std::map<std::string, std::string> ReadDigests() {
  std::map<std::string, std::string> out;
  std::ifstream in(kDigestFile);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, digest;
    fields >> name >> digest;
    out[name] = digest;
  }
  return out;
}

TEST(CpuResultDigestTest, EveryCheckpointScoresBitForBitAsRecorded) {
  if (!std::filesystem::exists(kStories + "/config.json")) GTEST_SKIP() << "no " << kStories;
  const bool update = std::getenv("SCORED_UPDATE_DIGESTS") != nullptr;
  const std::map<std::string, std::string> recorded = ReadDigests();
  std::map<std::string, std::string> measured;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    EngineOptions options;
    options.model_dir = c.model_dir;
    options.reference_model_dir = c.reference;
    options.backend = Backend::kCpu;
    absl::StatusOr<std::unique_ptr<Engine>> engine = CreateReferenceEngine(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    absl::StatusOr<std::vector<ScoreResult>> results =
        ScoreAll(**engine, Requests(c, (*engine)->info().vocab_size));
    ASSERT_TRUE(results.ok()) << results.status();
    measured[c.name] = Digest(*results);
    if (update) continue;
    const auto it = recorded.find(c.name);
    ASSERT_NE(it, recorded.end()) << c.name << " has no digest in " << kDigestFile
                                  << " (SCORED_UPDATE_DIGESTS=1 records it)";
    EXPECT_EQ(measured[c.name], it->second) << c.name << ": the CPU backend's results changed";
  }
  if (update) {
    std::ofstream out(kDigestFile);
    out << "# SHA-256 of the CPU backend's results per checkpoint (tests/engine/reference/digest_test.cc).\n"
           "# Rewritten only by SCORED_UPDATE_DIGESTS=1 digest_test, for a deliberate change of results.\n";
    for (const auto& [name, digest] : measured) out << name << " " << digest << "\n";
    ASSERT_TRUE(out.good()) << "cannot write " << kDigestFile;
    return;
  }
  EXPECT_EQ(measured.size(), recorded.size()) << kDigestFile << " names checkpoints that no longer exist";
}

}  // namespace
}  // namespace scored

// End to end: the real `scored` daemon (CPU backend) must refuse a broken model folder at load time,
// exiting with a non-zero code (not a signal) and a message that names what is wrong: the file, the
// tensor, the config field or the unsupported feature. Each test copies stories260K-hf into a fresh
// temporary folder and breaks exactly one thing.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/scored_process.h"

namespace scored {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Loading the 260K-parameter model takes well under a second; a daemon still running after this long
// has not refused the model (it is serving or hung), which fails the test.
constexpr std::chrono::seconds kExitTimeout(60);

constexpr char kModelFile[] = "model.safetensors";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A parsed safetensors file: the JSON header and the data section that follows it.
struct Safetensors {
  nlohmann::json header;
  std::string data;
  int64_t header_size = 0;  // bytes of JSON after the 8-byte length prefix
};

Safetensors ParseSafetensors(const std::string& bytes) {
  Safetensors st;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  st.header_size = static_cast<int64_t>(n);
  st.header = nlohmann::json::parse(bytes.substr(8, static_cast<size_t>(n)));
  st.data = bytes.substr(8 + static_cast<size_t>(n));
  return st;
}

std::string SerializeSafetensors(const nlohmann::json& header, const std::string& data) {
  std::string json = header.dump();
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

struct RunResult {
  bool exited = false;     // exited normally (not killed by a signal, not timed out)
  int exit_code = -1;      // valid when exited
  int signal_number = 0;   // non-zero when a signal ended it
  bool timed_out = false;  // still running after kExitTimeout (then killed)
  std::string output;      // stdout + stderr
};

// Runs `scored --model DIR --backend=cpu --listen=127.0.0.1:0 --metrics_listen=` with a timeout.
RunResult RunScored(const fs::path& model_dir, const fs::path& log_path) {
  RunResult result;
  const std::string binary = scored::testing::DefaultScoredBinary();
  std::vector<std::string> args = {
      binary, "--model", model_dir.string(), "--backend=cpu", "--listen=127.0.0.1:0", "--metrics_listen="};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    FILE* log = std::freopen(log_path.c_str(), "w", stdout);
    if (log == nullptr || dup2(fileno(stdout), STDERR_FILENO) < 0) _exit(126);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + kExitTimeout;
  int wstatus = 0;
  while (true) {
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.output = ReadFile(log_path);
  if (result.timed_out) return result;
  if (WIFEXITED(wstatus)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.signal_number = WTERMSIG(wstatus);
  }
  return result;
}

class BrokenModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/scored_broken_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    tmp_dir_ = templ;
    model_dir_ = tmp_dir_ / "model";
    fs::copy(scored::testing::StoriesModelDir(), model_dir_, fs::copy_options::recursive);
    ASSERT_TRUE(fs::exists(model_dir_ / kModelFile));
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_dir_, ec);
  }

  fs::path Model(const std::string& name) const { return model_dir_ / name; }

  // Runs the daemon on the broken folder and checks it refused it cleanly; returns its output.
  std::string ExpectLoadFailure() {
    const RunResult r = RunScored(model_dir_, tmp_dir_ / "scored.log");
    EXPECT_FALSE(r.timed_out) << "scored still running after the timeout; output:\n" << r.output;
    EXPECT_EQ(r.signal_number, 0) << "scored crashed (signal " << r.signal_number << "); output:\n"
                                  << r.output;
    EXPECT_TRUE(r.exited) << r.output;
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 127) << "could not exec " << scored::testing::DefaultScoredBinary();
    return r.output;
  }

  nlohmann::json ReadConfig() const { return nlohmann::json::parse(ReadFile(Model("config.json"))); }
  void WriteConfig(const nlohmann::json& config) { WriteFile(Model("config.json"), config.dump(2)); }

  fs::path tmp_dir_;
  fs::path model_dir_;
};

TEST_F(BrokenModelTest, IntactCopyIsNotRefused) {
  // Control: the unmodified copy is accepted, so the failures below come from the one broken thing.
  scored::testing::ScoredProcessOptions opts;
  opts.args = {"--model=" + model_dir_.string(), "--backend=cpu"};
  auto proc = scored::testing::ScoredProcess::Start(opts);
  ASSERT_TRUE(proc.ok()) << proc.status();
}

TEST_F(BrokenModelTest, SafetensorsTruncatedInDataSection) {
  const std::string bytes = ReadFile(Model(kModelFile));
  const Safetensors st = ParseSafetensors(bytes);
  WriteFile(Model(kModelFile), bytes.substr(0, static_cast<size_t>(8 + st.header_size) + st.data.size() / 2));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kModelFile).string()));
  EXPECT_THAT(output, HasSubstr("data section"));
}

TEST_F(BrokenModelTest, SafetensorsTruncatedInsideHeader) {
  const std::string bytes = ReadFile(Model(kModelFile));
  const Safetensors st = ParseSafetensors(bytes);
  WriteFile(Model(kModelFile), bytes.substr(0, static_cast<size_t>(8 + st.header_size / 2)));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kModelFile).string()));
  EXPECT_THAT(output, HasSubstr("header length"));
}

TEST_F(BrokenModelTest, TensorShapeInconsistentWithItsBytes) {
  Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  st.header["model.layers.1.self_attn.q_proj.weight"]["shape"] = {64, 63};
  WriteFile(Model(kModelFile), SerializeSafetensors(st.header, st.data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_THAT(output, HasSubstr("16128"));  // 64 x 63 x 4 bytes the shape needs
}

TEST_F(BrokenModelTest, TensorShapeWrongForTheConfig) {
  // Same number of bytes, so the file itself is consistent: only the model loader can see it.
  Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  st.header["model.layers.1.self_attn.q_proj.weight"]["shape"] = {32, 128};
  WriteFile(Model(kModelFile), SerializeSafetensors(st.header, st.data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_THAT(output, HasSubstr("[32, 128]"));
  EXPECT_THAT(output, HasSubstr("[64, 64]"));
}

TEST_F(BrokenModelTest, MissingTensor) {
  const std::string kDropped = "model.layers.2.mlp.up_proj.weight";
  const Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  // Rebuild the data section without the dropped tensor, keeping the others' order.
  std::vector<std::pair<int64_t, std::string>> by_offset;
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__" || name == kDropped) continue;
    by_offset.emplace_back(info["data_offsets"][0].get<int64_t>(), name);
  }
  std::sort(by_offset.begin(), by_offset.end());
  nlohmann::json header;
  if (st.header.contains("__metadata__")) header["__metadata__"] = st.header["__metadata__"];
  std::string data;
  for (const auto& [begin, name] : by_offset) {
    nlohmann::json info = st.header[name];
    const int64_t end = info["data_offsets"][1].get<int64_t>();
    const int64_t new_begin = static_cast<int64_t>(data.size());
    data += st.data.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    info["data_offsets"] = {new_begin, static_cast<int64_t>(data.size())};
    header[name] = info;
  }
  ASSERT_EQ(data.size(), st.data.size() - 172 * 64 * 4);
  WriteFile(Model(kModelFile), SerializeSafetensors(header, data));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(kDropped));
  EXPECT_THAT(output, HasSubstr("not found"));
}

TEST_F(BrokenModelTest, ConfigJsonSyntaxError) {
  std::string text = ReadFile(Model("config.json"));
  const size_t comma = text.find(',');
  ASSERT_NE(comma, std::string::npos);
  text.erase(comma, 1);  // "architectures": [...] "attention_bias": ...
  WriteFile(Model("config.json"), text);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
  EXPECT_THAT(output, HasSubstr("malformed JSON"));
}

TEST_F(BrokenModelTest, UnsupportedArchitecture) {
  nlohmann::json config = ReadConfig();
  config["architectures"] = {"GPT2LMHeadModel"};
  config["model_type"] = "gpt2";
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("GPT2LMHeadModel"));
  EXPECT_THAT(output, HasSubstr("unsupported architecture"));
}

TEST_F(BrokenModelTest, UnsupportedQuantizationGptq) {
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = {
      {"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false}, {"sym", true}};
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("quant_method 'gptq'"));
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
}

TEST_F(BrokenModelTest, UnsupportedQuantizationSparse24) {
  // The quantization_config of a real 2:4-sparse compressed-tensors checkpoint.
  const nlohmann::json sparse = nlohmann::json::parse(
      ReadFile(fs::path(SCORED_DATA_DIR) /
               "models-configs/compressed-tensors/llama2.c-stories42M-pruned2.4-compressed/config.json"));
  ASSERT_EQ(sparse["quantization_config"]["sparsity_config"]["format"], "sparse-24-bitmask");
  nlohmann::json config = ReadConfig();
  config["quantization_config"] = sparse["quantization_config"];
  WriteConfig(config);
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr("sparsity_config"));
  EXPECT_THAT(output, HasSubstr("sparse-24-bitmask"));
}

TEST_F(BrokenModelTest, MissingConfigJson) {
  ASSERT_TRUE(fs::remove(Model("config.json")));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model("config.json").string()));
  EXPECT_THAT(output, HasSubstr("cannot open"));
}

TEST_F(BrokenModelTest, ShardedIndexNamesMissingShard) {
  const std::string kShard1 = "model-00001-of-00002.safetensors";
  const std::string kShard2 = "model-00002-of-00002.safetensors";  // never written
  const Safetensors st = ParseSafetensors(ReadFile(Model(kModelFile)));
  fs::rename(Model(kModelFile), Model(kShard1));
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__") continue;
    weight_map[name] = name.rfind("model.layers.4.", 0) == 0 ? kShard2 : kShard1;
  }
  nlohmann::json index = {{"metadata", {{"total_size", st.data.size()}}}, {"weight_map", weight_map}};
  WriteFile(Model("model.safetensors.index.json"), index.dump(2));
  const std::string output = ExpectLoadFailure();
  EXPECT_THAT(output, HasSubstr(Model(kShard2).string()));
  EXPECT_THAT(output, HasSubstr("cannot open"));
}

}  // namespace
}  // namespace scored

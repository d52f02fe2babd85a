// The exposition of server/metrics.h without a server: the build_info labels, the process_* families read
// from /proc (checked against what this test process reads itself), the in-flight gauge and the queue-wait
// and compute-time histograms.
#include "server/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace scored {
namespace {

using ::testing::HasSubstr;

// Sample lines "name{labels} value" of the exposition, keyed by everything before the value.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    samples[std::string(line.substr(0, space))] = v;
  }
  return samples;
}

std::unique_ptr<Metrics> NewMetrics() {
  auto m = Metrics::Create("");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(MetricsTest, BuildInfoNamesVersionCommitAndCuda) {
  std::unique_ptr<Metrics> m = NewMetrics();
  ASSERT_NE(m, nullptr);
  const std::string text = m->Serialize();
  EXPECT_THAT(text, HasSubstr("# TYPE scored_build_info gauge"));
  const std::string want = std::string("cuda=\"") + (SCORED_EXPECT_CUDA ? "on" : "off") + "\",git_commit=\"" +
                           cli::GitCommit() + "\",version=\"" + cli::ProjectVersion() + "\"} 1";
  EXPECT_THAT(text, HasSubstr("scored_build_info{" + want)) << text;
}

TEST(MetricsTest, ProcessMetricsMatchProc) {
  std::unique_ptr<Metrics> m = NewMetrics();
  ASSERT_NE(m, nullptr);
  // Burn a little CPU so that the counter is above zero at any tick rate.
  volatile double sink = 0;
  for (int i = 0; i < 20000000; ++i) sink = sink + i * 0.5;
  const std::map<std::string, double> s = Samples(m->Serialize());
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
        "process_open_fds", "process_max_fds", "process_start_time_seconds", "process_threads"}) {
    EXPECT_TRUE(s.count(name)) << name;
  }
  EXPECT_GT(s.at("process_cpu_seconds_total"), 0.0);
  // This process started after boot and before now (within the test's own time limit of it).
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(s.at("process_start_time_seconds"), now + 1);
  EXPECT_GT(s.at("process_start_time_seconds"), now - 3600);
  EXPECT_GT(s.at("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(s.at("process_virtual_memory_bytes"), s.at("process_resident_memory_bytes"));
  EXPECT_GE(s.at("process_threads"), 1);
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(s.at("process_max_fds"), static_cast<double>(limit.rlim_cur));
  // Open one more descriptor: the gauge follows.
  const double before = s.at("process_open_fds");
  EXPECT_GE(before, 3);  // stdin, stdout, stderr
  const int fd = dup(2);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Samples(m->Serialize()).at("process_open_fds"), before + 1);
  close(fd);
}

TEST(MetricsTest, InFlightQueueWaitAndCompute) {
  std::unique_ptr<Metrics> m = NewMetrics();
  ASSERT_NE(m, nullptr);
  std::map<std::string, double> s = Samples(m->Serialize());
  EXPECT_EQ(s.at("scored_requests_in_flight"), 0);
  EXPECT_EQ(s.at("scored_queue_wait_seconds_count"), 0);
  EXPECT_EQ(s.at("scored_batch_compute_seconds_count"), 0);
  m->SetInFlight(7);
  m->RecordQueueWait(0.00005);
  m->RecordQueueWait(0.003);
  m->RecordBatchCompute(0.25);
  s = Samples(m->Serialize());
  EXPECT_EQ(s.at("scored_requests_in_flight"), 7);
  EXPECT_EQ(s.at("scored_queue_wait_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(s.at("scored_queue_wait_seconds_sum"), 0.00305);
  EXPECT_EQ(s.at("scored_queue_wait_seconds_bucket{le=\"0.0001\"}"), 1);  // the first bucket: 0.1 ms
  EXPECT_EQ(s.at("scored_queue_wait_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_EQ(s.at("scored_batch_compute_seconds_count"), 1);
  EXPECT_EQ(s.at("scored_batch_compute_seconds_bucket{le=\"0.128\"}"), 0);
  EXPECT_EQ(s.at("scored_batch_compute_seconds_bucket{le=\"0.256\"}"), 1);
}

}  // namespace
}  // namespace scored

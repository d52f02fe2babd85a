#include "tests/fuzz/fuzz_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace scored {
namespace fuzz {

void Fail(const char* file, int line, const char* cond, std::string_view what) {
  std::fprintf(stderr, "%s:%d: contract broken: %s (%.*s)\n", file, line, cond, static_cast<int>(what.size()),
               what.data());
  std::fflush(stderr);
  __builtin_trap();
}

std::string DataPath(std::string_view relative) {
  return std::string(SCORED_DATA_DIR) + "/" + std::string(relative);
}

namespace {

std::string* g_scratch = nullptr;

void RemoveScratch() {
  if (g_scratch == nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(*g_scratch, ec);
}

}  // namespace

const std::string& ScratchDir() {
  if (g_scratch == nullptr) {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ec;
    std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    if ((tmp == nullptr || *tmp == '\0') && std::filesystem::is_directory("/dev/shm", ec)) base = "/dev/shm";
    std::string templ = base + "/scored-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) Fail(__FILE__, __LINE__, "mkdtemp", templ);
    g_scratch = new std::string(templ);
    std::atexit(RemoveScratch);
  }
  return *g_scratch;
}

bool WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

bool WriteFile(const std::string& path, std::string_view text) {
  return WriteFile(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

MemFile::MemFile() {
  fd_ = memfd_create("scored-fuzz", MFD_CLOEXEC);
  if (fd_ < 0) Fail(__FILE__, __LINE__, "memfd_create", "");
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemFile::~MemFile() {
  if (fd_ >= 0) close(fd_);
}

bool MemFile::Set(const uint8_t* data, size_t size) {
  if (ftruncate(fd_, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    uint32_t min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
      min = 0x10000;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

bool CodeIsOneOf(const absl::Status& s, absl::StatusCode a, absl::StatusCode b, absl::StatusCode c,
                 absl::StatusCode d) {
  if (s.message().empty()) return false;
  const absl::StatusCode code = s.code();
  return code == a || (b != absl::StatusCode::kOk && code == b) ||
         (c != absl::StatusCode::kOk && code == c) || (d != absl::StatusCode::kOk && code == d);
}

}  // namespace fuzz
}  // namespace scored

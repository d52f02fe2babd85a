#include "cli/flags_help.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/version.h"

namespace scored::cli {
namespace {

constexpr size_t kWidth = 100;
constexpr absl::string_view kHelpIndent = "      ";

// Appends `text` wrapped at kWidth columns, each line indented by kHelpIndent; breaks only at spaces (a
// longer word gets a line of its own).
void AppendWrapped(absl::string_view text, std::string* out) {
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && kHelpIndent.size() + line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(out, kHelpIndent, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(out, kHelpIndent, line, "\n");
}

void AppendFlag(const absl::CommandLineFlag& flag, std::string* out) {
  std::string value = flag.DefaultValue();
  if (flag.IsOfType<std::string>()) value = absl::StrCat("\"", value, "\"");
  absl::StrAppend(out, "  --", flag.Name(), " (default: ", value, ")\n");
  AppendWrapped(flag.Help(), out);
}

}  // namespace

void SetUsageConfig(absl::string_view program) {
  static std::string* const name = new std::string();
  *name = std::string(program);
  absl::FlagsUsageConfig config;
  config.version_string = [] { return VersionLine(*name); };
  // absl's --helpshort / --help list flags whose file passes these; ours live in each program's main.cc.
  config.contains_helpshort_flags = [](absl::string_view file) { return absl::EndsWith(file, "main.cc"); };
  config.contains_help_flags = config.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(config);
}

bool WantsHelp(int argc, char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (!absl::ConsumePrefix(&arg, "-")) continue;
    }
    for (absl::string_view name : {"help", "helpshort"}) {
      if (arg == name || arg == absl::StrCat(name, "=true") || arg == absl::StrCat(name, "=1")) return true;
    }
  }
  return false;
}

namespace {

// Whether a flag's Filename() names `defining_file` (a __FILE__): absl normalizes the names it reports, and
// __FILE__ is absolute or relative depending on how the build passed the source (a compiler launcher may
// rewrite it), so both lose their leading '.' and '/' and one may extend the other at a '/'.
bool SameSourceFile(absl::string_view flag_file, absl::string_view defining_file) {
  auto strip = [](absl::string_view f) {
    const size_t first = f.find_first_not_of("./");
    return first == absl::string_view::npos ? absl::string_view() : f.substr(first);
  };
  const absl::string_view a = strip(flag_file), b = strip(defining_file);
  if (a.empty() || b.empty()) return false;
  return a == b || absl::EndsWith(a, absl::StrCat("/", b)) || absl::EndsWith(b, absl::StrCat("/", a));
}

}  // namespace

std::string GroupedHelp(absl::string_view usage, const std::vector<FlagGroup>& groups,
                        absl::string_view defining_file) {
  std::string out = absl::StrCat(usage, "\n");
  std::set<std::string> listed;
  for (const FlagGroup& group : groups) {
    absl::StrAppend(&out, "\n", group.title, ":\n");
    for (const char* name : group.flags) {
      listed.insert(name);
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) {
        absl::StrAppend(&out, "  --", name, " (not a flag of this program)\n");
        continue;
      }
      AppendFlag(*flag, &out);
    }
  }
  std::vector<const absl::CommandLineFlag*> others;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (SameSourceFile(flag->Filename(), defining_file) && listed.count(std::string(name)) == 0) {
      others.push_back(flag);
    }
  }
  if (!others.empty()) {
    std::sort(
        others.begin(), others.end(),
        [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) { return a->Name() < b->Name(); });
    absl::StrAppend(&out, "\nOther flags:\n");
    for (const absl::CommandLineFlag* flag : others) AppendFlag(*flag, &out);
  }
  absl::StrAppend(
      &out,
      "\nFlags take --name=value or --name value; booleans also --name / --noname.\n"
      "--flagfile=FILE reads flags from FILE; --helpfull lists every flag (absl's own included);\n"
      "--version prints the version.\n");
  return out;
}

}  // namespace scored::cli

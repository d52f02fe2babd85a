#include "cli/command_line.h"

#include <algorithm>
#include <optional>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace scored::cli {
namespace {

// absl's built-in usage flags (not registered as flags; ParseCommandLine handles them).
bool IsUsageFlag(absl::string_view name) {
  for (const char* usage : {"help", "helpfull", "helpshort", "helppackage", "version", "only_check_args",
                            "helpon", "helpmatch"}) {
    if (name == usage) return true;
  }
  return false;
}

// Levenshtein distance, stopping early: any value above `bound` is returned as bound + 1.
int EditDistance(absl::string_view a, absl::string_view b, int bound) {
  if (static_cast<int>(std::max(a.size(), b.size()) - std::min(a.size(), b.size())) > bound) return bound + 1;
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    int best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
      best = std::min(best, row[j]);
    }
    if (best > bound) return bound + 1;
  }
  return row[b.size()];
}

// The program's own flags: every registered flag outside Abseil's (--flagfile, --fromenv, ...).
bool IsProgramFlag(const absl::CommandLineFlag& flag) { return !absl::StrContains(flag.Filename(), "absl/"); }

}  // namespace

std::string SuggestFlag(absl::string_view name, const CommandLineRules& rules) {
  for (const auto& [alias, flag] : rules.aliases) {
    if (name == alias || absl::StrReplaceAll(name, {{"_", "-"}}) == alias) {
      return absl::StrCat("this program's flag for that is --", flag);
    }
  }
  const std::string underscored = absl::StrReplaceAll(name, {{"-", "_"}});
  if (underscored != name && absl::FindCommandLineFlag(underscored) != nullptr) {
    return absl::StrCat("flags are spelled with underscores: --", underscored);
  }
  std::string best;
  int best_distance = 3;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (!IsProgramFlag(*flag)) continue;
    const int d = EditDistance(underscored, flag_name, 2);
    if (d < best_distance || (d == best_distance && flag_name < best)) {
      best_distance = d;
      best = std::string(flag_name);
    }
  }
  if (best_distance <= 2 && !best.empty()) return absl::StrCat("did you mean --", best, "?");
  return "";
}

absl::Status CheckCommandLine(int argc, char** argv, const CommandLineRules& rules) {
  std::vector<std::string> errors;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.push_back(absl::StrCat("'", argv[i], "'"));
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(absl::StrCat("'", arg, "'"));
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    std::optional<absl::string_view> value;
    if (eq != absl::string_view::npos) value = arg.substr(eq + 1);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        if (value.has_value()) errors.push_back(absl::StrCat("--", name, " takes no value"));
        continue;
      }
    }
    if (flag == nullptr) {
      if (IsUsageFlag(name)) continue;
      const std::string hint = SuggestFlag(name, rules);
      errors.push_back(absl::StrCat("unknown flag --", name, hint.empty() ? "" : absl::StrCat(": ", hint)));
      continue;
    }
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        errors.push_back(absl::StrCat("--", name, " needs a value"));
        continue;
      }
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) errors.push_back(absl::StrCat("--", name, ": ", error));
  }
  if (!positional.empty()) {
    errors.push_back(absl::StrCat("unexpected argument", positional.size() > 1 ? "s " : " ",
                                  absl::StrJoin(positional, " "), " (", rules.positional_hint, ")"));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

}  // namespace scored::cli

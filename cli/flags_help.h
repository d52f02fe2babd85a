// Command-line help shared by the scored binaries. absl's own --help lists only the flags of files whose
// name matches the program's (none of ours: "No flags matched"), ungrouped; --help here prints each
// program's flags grouped by purpose from the flag registry, and --version prints the project version
// (cli/version.h).
//
// Usage, at the top of main() before absl::ParseCommandLine:
//   scored::cli::SetUsageConfig("scored-ppl");
//   if (scored::cli::WantsHelp(argc, argv)) {
//     std::fputs(scored::cli::GroupedHelp(kUsage, kGroups, __FILE__).c_str(), stdout);
//     return 0;
//   }
// absl's --helpfull (every flag, absl's own included) and --version keep working through ParseCommandLine.
//
// Thread-safety: call from main() before other threads start (SetUsageConfig writes absl's global config).
#ifndef SCORED_CLI_FLAGS_HELP_H_
#define SCORED_CLI_FLAGS_HELP_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace scored::cli {

// One section of --help: a title ("Model", "Limits", ...) and flag names without dashes, in the order shown.
struct FlagGroup {
  const char* title;
  std::vector<const char*> flags;
};

// Sets absl's usage config: --version prints VersionLine(program) on stdout and exits 0, and absl's
// --helpshort / --help filters match this program's flags. `program` is copied.
void SetUsageConfig(absl::string_view program);

// True when an argument before "--" is --help or --helpshort (one or two dashes, or "=true"/"=1").
bool WantsHelp(int argc, char* const* argv);

// The --help text: `usage`, a blank line, then one section per group ("<title>:" and each flag as
// "  --name (default: VALUE)" followed by its help text wrapped at 100 columns), then "Other flags:" with
// every flag defined in `defining_file` (the __FILE__ of the ABSL_FLAG definitions) that no group lists, and
// a closing line on --helpfull and --version. A group naming a flag that is not registered shows it as
// "--name (not a flag of this program)", which the --help tests look for.
std::string GroupedHelp(absl::string_view usage, const std::vector<FlagGroup>& groups,
                        absl::string_view defining_file);

}  // namespace scored::cli

#endif  // SCORED_CLI_FLAGS_HELP_H_

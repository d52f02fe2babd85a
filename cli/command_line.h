// The command-line check every scored binary runs before absl::ParseCommandLine, so that a bad command line
// is one clear message and exit status 2 in all of them (absl's own parser exits 1 on an unknown flag or a
// bad value, and hands positional arguments back to be ignored).
//
// It reads the arguments by absl's rules ("--name=value", "--name value", one or two dashes, booleans as
// "--name", "--name=false" or "--noname", "--" ends the flags) and finds: unknown flags, values that do not
// parse, a missing value, and positional arguments. An unknown flag gets a hint where one is likely: the
// underscore spelling of a dashed name (--max-seq-len -> --max_seq_len), a flag of the same meaning in the
// tools users come from (`aliases`, e.g. vLLM's --tensor-parallel-size -> --tp), or a registered flag
// within two edits (--modle -> --model). It sets the flags it parses; ParseCommandLine then parses the same
// arguments again (and handles --help, --version, --flagfile).
//
// Thread-safety: call from main() before other threads start (it sets flag values).
#ifndef SCORED_CLI_COMMAND_LINE_H_
#define SCORED_CLI_COMMAND_LINE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace scored::cli {

struct CommandLineRules {
  // Appended to the positional-argument error, e.g. "scored-ppl takes only flags, e.g. --data FILE".
  std::string positional_hint;
  // Spellings of other tools (without dashes) and the flag meant, e.g. {"tensor-parallel-size", "tp"}.
  std::vector<std::pair<std::string, std::string>> aliases;
};

// INVALID_ARGUMENT listing every problem ("; "-joined), OK when the command line is well-formed.
absl::Status CheckCommandLine(int argc, char** argv, const CommandLineRules& rules);

// The hint for an unknown flag `name` ("did you mean --model?", "flags are spelled with underscores:
// --max_seq_len", "this program's flag for that is --tp"), or "" when none is close.
std::string SuggestFlag(absl::string_view name, const CommandLineRules& rules);

}  // namespace scored::cli

#endif  // SCORED_CLI_COMMAND_LINE_H_

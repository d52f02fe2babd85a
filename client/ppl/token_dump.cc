#include "client/ppl/token_dump.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace scored {
namespace ppl {

absl::Status WriteTokenDump(const std::string& path, const Plan& plan, const std::vector<WindowScore>& scores,
                            bool kld) {
  if (scores.size() != plan.windows.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token dump: ", scores.size(), " scores for ", plan.windows.size(), " windows"));
  }
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    return absl::InternalError(absl::StrCat("cannot write --dump_tokens ", path, ": ", std::strerror(errno)));
  }
  std::fputs(
      kld ? "window\tposition\ttoken_id\tnll\tref_nll\tkld\tsame_top\n" : "window\tposition\ttoken_id\tnll\n",
      out);
  absl::Status status;
  for (size_t w = 0; w < plan.windows.size() && status.ok(); ++w) {
    const Window& window = plan.windows[w];
    const WindowScore& s = scores[w];
    const size_t n = static_cast<size_t>(window.num_scored());
    if (s.logprobs.size() != n ||
        (kld && (s.ref_logprobs.size() != n || s.kld.size() != n || s.same_top.size() != n))) {
      status = absl::InvalidArgumentError(absl::StrCat("token dump: window ", w, " has ", s.logprobs.size(),
                                                       " scored values for ", n, " positions"));
      break;
    }
    for (size_t j = 0; j < n; ++j) {
      const size_t position = static_cast<size_t>(window.score_from) + j;
      std::string line =
          absl::StrFormat("%d\t%d\t%d\t%.9g", w, position, window.tokens[position], -s.logprobs[j]);
      if (kld) absl::StrAppendFormat(&line, "\t%.9g\t%.9g\t%d", -s.ref_logprobs[j], s.kld[j], s.same_top[j]);
      line.push_back('\n');
      if (std::fputs(line.c_str(), out) < 0) {
        status =
            absl::InternalError(absl::StrCat("writing --dump_tokens ", path, ": ", std::strerror(errno)));
        break;
      }
    }
  }
  if (std::fclose(out) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat("writing --dump_tokens ", path, ": ", std::strerror(errno)));
  }
  return status;
}

}  // namespace ppl
}  // namespace scored

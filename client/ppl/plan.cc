#include "client/ppl/plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace scored {
namespace ppl {
namespace {

void PrependBos(int32_t bos_id, TokenStream* stream) {
  stream->ids.insert(stream->ids.begin(), bos_id);
  if (!stream->byte_lengths.empty()) stream->byte_lengths.insert(stream->byte_lengths.begin(), 0);
}

absl::Status CheckByteLengths(const TokenStream& stream) {
  if (!stream.byte_lengths.empty() && stream.byte_lengths.size() != stream.ids.size()) {
    return absl::InternalError(absl::StrCat("tokenizer returned ", stream.byte_lengths.size(),
                                            " byte lengths for ", stream.ids.size(), " ids"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> BuildPlan(const Dataset& dataset, const MethodParams& params,
                               const SpecialTokens& special, const TokenizeFn& tokenize) {
  SCORED_RETURN_IF_ERROR(ValidateParams(params));
  Plan plan;
  plan.add_bos = special.add_bos_by_default && special.bos_id >= 0;
  const int32_t prefix = special.bos_id >= 0 ? special.bos_id : special.eos_id;
  const std::string name = MethodName(params.method);

  switch (params.method) {
    case Method::kExl3:
    case Method::kGptq:
    case Method::kHf:
    case Method::kLlamaCpp: {
      std::string text;
      if (params.method == Method::kLlamaCpp) {
        text = dataset.whole_text;
      } else {
        text = JoinRows(dataset.rows, /*drop_empty=*/params.method == Method::kExl3);
      }
      SCORED_ASSIGN_OR_RETURN(TokenStream stream, tokenize(text));
      SCORED_RETURN_IF_ERROR(CheckByteLengths(stream));
      if (plan.add_bos) PrependBos(special.bos_id, &stream);
      plan.num_documents = 1;
      plan.num_input_tokens = static_cast<int64_t>(stream.ids.size());
      if (params.method == Method::kExl3) {
        plan.windows = Exl3Windows(stream, params);
      } else if (params.method == Method::kGptq) {
        plan.windows = GptqWindows(stream, params);
      } else if (params.method == Method::kHf) {
        plan.windows = HfWindows(stream, params);
      } else {
        plan.windows = LlamaCppWindows(stream, params, plan.add_bos, special.bos_id);
      }
      break;
    }
    case Method::kChunks:
    case Method::kRolling: {
      if (prefix < 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, " needs a BOS or EOS id for the window prefix; the tokenizer has neither"));
      }
      plan.prefix_id = prefix;
      if (params.method == Method::kChunks) {
        SCORED_ASSIGN_OR_RETURN(TokenStream stream, tokenize(dataset.whole_text));
        SCORED_RETURN_IF_ERROR(CheckByteLengths(stream));
        plan.num_documents = 1;
        plan.num_input_tokens = static_cast<int64_t>(stream.ids.size());
        plan.windows = ChunksWindows(stream, params, prefix);
      } else {
        std::vector<TokenStream> docs;
        docs.reserve(dataset.documents.size());
        for (const std::string& doc : dataset.documents) {
          SCORED_ASSIGN_OR_RETURN(TokenStream stream, tokenize(doc));
          SCORED_RETURN_IF_ERROR(CheckByteLengths(stream));
          plan.num_input_tokens += static_cast<int64_t>(stream.ids.size());
          docs.push_back(std::move(stream));
        }
        plan.num_documents = static_cast<int64_t>(docs.size());
        plan.windows = BuildRollingWindows(docs, params, prefix);
      }
      break;
    }
  }
  if (plan.windows.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " with ctx ", params.ctx, " gives no window for ", plan.num_input_tokens,
                     " tokens in ", plan.num_documents,
                     " document(s) (exl3 needs more than ctx tokens; gptq and "
                     "llamacpp at least ctx)"));
  }
  return plan;
}

}  // namespace ppl
}  // namespace scored

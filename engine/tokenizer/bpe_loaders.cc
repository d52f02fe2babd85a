// Loaders of the BPE formats: HF tokenizer.json, vocab.json + merges.txt, tiktoken.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/hf_config.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/pipeline_json.h"
#include "engine/tokenizer/regex_splitter.h"
#include "engine/tokenizer/text_util.h"

namespace scored {
namespace tokenizer_internal {
namespace {

using nlohmann::json;

// Lines of a text file, without their '\n'.
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

int32_t FindToken(const std::string& content, const std::vector<AddedToken>& added, const BpeModel& model) {
  for (const AddedToken& a : added) {
    if (a.content == content) return a.id;
  }
  return model.TokenId(content);
}

// BOS/EOS/add_bos: tokenizer_config.json / special_tokens_map.json first, then the format's defaults.
struct SpecialDefaults {
  std::optional<std::string> bos;
  std::optional<std::string> eos;
  int32_t template_bos = -1;  // tokenizer.json post_processor's leading special token
  bool add_bos = false;
};

absl::Status ResolveSpecials(const HfTokenizerConfig& config, const SpecialDefaults& defaults,
                             const std::string& dir, const BpeModel& model, BpeTokenizerSpec* spec) {
  const std::optional<std::string> bos = config.bos_token ? config.bos_token : defaults.bos;
  const std::optional<std::string> eos = config.eos_token ? config.eos_token : defaults.eos;
  spec->bos_id = bos ? FindToken(*bos, spec->added_tokens, model) : defaults.template_bos;
  spec->eos_id = eos ? FindToken(*eos, spec->added_tokens, model) : -1;
  if (config.bos_token && spec->bos_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": bos_token '", *config.bos_token, "' (tokenizer config) is not a token"));
  }
  if (config.eos_token && spec->eos_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": eos_token '", *config.eos_token, "' (tokenizer config) is not a token"));
  }
  spec->add_bos = config.add_bos_token.value_or(defaults.add_bos);
  if (spec->add_bos && spec->bos_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": BOS is to be added by default but no BOS token is defined"));
  }
  return absl::OkStatus();
}

// Merges the config's added tokens into `added` (those of tokenizer.json win on the same id).
void MergeAddedTokens(const std::vector<AddedToken>& extra, std::vector<AddedToken>* added) {
  for (const AddedToken& t : extra) {
    const bool present =
        std::any_of(added->begin(), added->end(), [&t](const AddedToken& a) { return a.id == t.id; });
    if (!present) added->push_back(t);
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Finish(BpeModel model, BpeTokenizerSpec spec,
                                                  const std::vector<std::string>& files,
                                                  const std::string& main_path) {
  SCORED_ASSIGN_OR_RETURN(spec.fingerprint, FingerprintFiles(files));
  auto t = BpeTokenizer::Create(std::move(model), std::move(spec));
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(main_path, ": ", t.status().message()));
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

// Converts a byte-level (GPT-2 alphabet) token to its bytes; a token outside the alphabet (e.g. an
// added token that also sits in the vocabulary) is kept as its UTF-8 text.
std::string ToBytes(const std::string& token) {
  std::string bytes;
  return ByteLevelToBytes(token, &bytes) ? bytes : token;
}

// ---- tokenizer.json -------------------------------------------------------------------------------

struct PipelineConfig {
  bool byte_level = false;
  bool add_prefix_space = false;
  // Split(Isolated) regexes and ByteLevel(use_regex)'s GPT-2 pattern, in the order the Sequence has them.
  std::vector<std::string> split_patterns;
  bool nfc = false;
  bool prepend = false;  // legacy normalizer Prepend('▁') / Metaspace prepend
  bool prepend_first_only = false;
  bool prepend_unless_present = false;
  bool metaspace = false;        // Replace(' ' -> '▁') / Metaspace pre-tokenizer
  bool spaces_replaced = false;  // the normalizer Replace(' ' -> '▁'): no ' ' reaches the pre-tokenizer
  bool metaspace_split = false;
  BpeTokenizerSpec::Digits digits = BpeTokenizerSpec::Digits::kNone;
  int32_t template_bos = -1;
  std::vector<DecoderStep> decoder;  // has_decoder false: no decoder
  bool has_decoder = false;
  // The general pipeline (BpeTokenizerSpec::general_pipeline), for what the forms above do not cover.
  bool general = false;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
};

absl::Status Unsupported(const std::string& path, const std::string& what, const json& j) {
  return UnsupportedJson(path, what, j);
}

std::string TypeOf(const json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool BoolField(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

absl::Status ParseNormalizer(const json& j, const std::string& path, PipelineConfig* p) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return Unsupported(path, "normalizer", j);
    for (const json& n : *it) SCORED_RETURN_IF_ERROR(ParseNormalizer(n, path, p));
    return absl::OkStatus();
  }
  if (type == "NFC") {
    p->nfc = true;
    return absl::OkStatus();
  }
  if (type == "Prepend" && j.value("prepend", std::string()) == kMetaspace) {
    p->prepend = true;
    return absl::OkStatus();
  }
  if (type == "Replace" && j.contains("pattern") && j["pattern"].is_object() &&
      j["pattern"].value("String", std::string("?")) == " " &&
      j.value("content", std::string()) == kMetaspace) {
    p->metaspace = true;
    p->spaces_replaced = true;
    return absl::OkStatus();
  }
  return Unsupported(path, "normalizer", j);
}

// A Split on the literal " " (not inverted) that runs after a normalizer replaced every ' ' by '▁'
// (Gemma's tokenizer.json): it finds no delimiter, so under every behavior it keeps the text whole.
bool IsNoOpSpaceSplit(const json& j, const PipelineConfig& p) {
  static const char* const kBehaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                           "Contiguous"};
  const auto pattern = j.find("pattern");
  if (!p.spaces_replaced || pattern == j.end() || !pattern->is_object() ||
      pattern->value("String", std::string("?")) != " " || BoolField(j, "invert", false)) {
    return false;
  }
  const std::string behavior = j.value("behavior", std::string());
  return std::any_of(std::begin(kBehaviors), std::end(kBehaviors),
                     [&behavior](const char* b) { return behavior == b; });
}

absl::Status ParsePreTokenizer(const json& j, const std::string& path, PipelineConfig* p) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return Unsupported(path, "pre_tokenizer", j);
    for (const json& n : *it) SCORED_RETURN_IF_ERROR(ParsePreTokenizer(n, path, p));
  } else if (type == "Digits") {
    // Only first (before ByteLevel / Split, as SmolLM2 has it): after them it would cut their pieces.
    if (p->byte_level || !p->split_patterns.empty() || p->metaspace ||
        p->digits != BpeTokenizerSpec::Digits::kNone) {
      return Unsupported(path, "pre_tokenizer (Digits after another pre-tokenizer)", j);
    }
    p->digits = BoolField(j, "individual_digits", false) ? BpeTokenizerSpec::Digits::kIndividual
                                                         : BpeTokenizerSpec::Digits::kRuns;
  } else if (type == "ByteLevel") {
    if (p->byte_level) return Unsupported(path, "pre_tokenizer (a second ByteLevel)", j);
    // The library prefixes every piece that reaches ByteLevel; this pipeline prefixes the text before its
    // splits, the same only when no Split comes first.
    if (BoolField(j, "add_prefix_space", false) && !p->split_patterns.empty()) {
      return Unsupported(path, "pre_tokenizer (ByteLevel add_prefix_space after a Split)", j);
    }
    p->byte_level = true;
    p->add_prefix_space = BoolField(j, "add_prefix_space", false);
    if (BoolField(j, "use_regex", true)) p->split_patterns.push_back(kGpt2Pattern);
  } else if (type == "Split" && IsNoOpSpaceSplit(j, *p)) {
    // Gemma's Split(" ", MergedWithPrevious) after its Replace(' ' -> '▁') normalizer: nothing to split.
  } else if (type == "Split") {
    const auto pattern = j.find("pattern");
    // After ByteLevel it would split byte-level characters, not text.
    if (pattern == j.end() || !pattern->is_object() || !pattern->contains("Regex") ||
        !(*pattern)["Regex"].is_string() || j.value("behavior", std::string()) != "Isolated" ||
        BoolField(j, "invert", false) || p->byte_level) {
      return Unsupported(path, "pre_tokenizer", j);
    }
    p->split_patterns.push_back((*pattern)["Regex"].get<std::string>());
  } else if (type == "Metaspace") {
    if (j.value("replacement", std::string(kMetaspace)) != kMetaspace) {
      return Unsupported(path, "pre_tokenizer", j);
    }
    p->metaspace = true;
    p->metaspace_split = BoolField(j, "split", true);
    const std::string scheme =
        j.value("prepend_scheme", BoolField(j, "add_prefix_space", true) ? "always" : "never");
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return Unsupported(path, "pre_tokenizer", j);
    }
    p->prepend = scheme != "never";
    p->prepend_first_only = scheme == "first";
    p->prepend_unless_present = true;
  } else {
    return Unsupported(path, "pre_tokenizer", j);
  }
  return absl::OkStatus();
}

// The decoder (decoder.h). It must undo what the model's alphabet stands for: ByteLevel first for a
// byte-level vocabulary (stored as bytes, which the rest of the chain then works on), none for any other.
absl::Status ParseDecoder(const json& root, const std::string& path, PipelineConfig* p) {
  const json j = root.value("decoder", json());
  p->has_decoder = !j.is_null();
  SCORED_RETURN_IF_ERROR(ParseDecoderSteps(j, path, &p->decoder));
  const auto byte_level = std::find_if(p->decoder.begin(), p->decoder.end(), [](const DecoderStep& s) {
    return s.kind == DecoderStep::Kind::kByteLevel;
  });
  if (p->byte_level && (p->decoder.empty() || byte_level != p->decoder.begin())) {
    return Unsupported(path, "decoder (not ByteLevel first after a ByteLevel pre_tokenizer)", j);
  }
  if (p->byte_level && std::find_if(byte_level + 1, p->decoder.end(), [](const DecoderStep& s) {
                         return s.kind == DecoderStep::Kind::kByteLevel;
                       }) != p->decoder.end()) {
    return Unsupported(path, "decoder (a second ByteLevel)", j);
  }
  if (!p->byte_level && byte_level != p->decoder.end()) {
    return Unsupported(path, "decoder (ByteLevel without a ByteLevel pre_tokenizer)", j);
  }
  return absl::OkStatus();
}

// Post-processors: only where the pipeline adds a leading special token (BOS) is read; ByteLevel
// adds nothing to ids. Others (BertProcessing, RobertaProcessing, ...) are UNIMPLEMENTED, naming them.
absl::Status ParsePostProcessor(const json& j, const std::string& path, PipelineConfig* p) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
    for (const json& d : j["processors"]) SCORED_RETURN_IF_ERROR(ParsePostProcessor(d, path, p));
  } else if (type == "TemplateProcessing") {
    const auto single = j.find("single");
    if (single == j.end() || !single->is_array() || single->empty()) return absl::OkStatus();
    const json& first = (*single)[0];
    if (!first.is_object() || !first.contains("SpecialToken")) return absl::OkStatus();
    const std::string name = first["SpecialToken"].value("id", std::string());
    const auto specials = j.find("special_tokens");
    if (specials == j.end() || !specials->is_object() || !specials->contains(name)) return absl::OkStatus();
    const json& ids = (*specials)[name].value("ids", json::array());
    if (ids.is_array() && ids.size() == 1 && ids[0].is_number_integer()) {
      p->template_bos = ids[0].get<int32_t>();
    }
  } else if (type != "ByteLevel") {
    return Unsupported(path, "post_processor", j);
  }
  return absl::OkStatus();
}

// The forms of ParseNormalizer / ParsePreTokenizer, which run on their own fast paths. UNIMPLEMENTED (a Split
// regex or Digits without ByteLevel, a BPE with neither ByteLevel nor metaspace, ...) sends the file to the
// general pipeline, which reads those too.
absl::Status ParseLegacyPipeline(const json& root, const std::string& path, PipelineConfig* p) {
  SCORED_RETURN_IF_ERROR(ParseNormalizer(root.value("normalizer", json()), path, p));
  SCORED_RETURN_IF_ERROR(ParsePreTokenizer(root.value("pre_tokenizer", json()), path, p));
  SCORED_RETURN_IF_ERROR(ParsePostProcessor(root.value("post_processor", json()), path, p));
  if (p->byte_level && (p->metaspace || p->prepend)) {
    return absl::UnimplementedError(path + ": byte-level combined with metaspace is not supported");
  }
  if (!p->byte_level && !p->split_patterns.empty()) {
    return absl::UnimplementedError(path + ": a Split regex without ByteLevel is not supported");
  }
  if (!p->byte_level && p->digits != BpeTokenizerSpec::Digits::kNone) {
    return absl::UnimplementedError(path + ": a Digits pre_tokenizer without ByteLevel is not supported");
  }
  if (!p->byte_level && !p->metaspace) {
    return absl::UnimplementedError(
        path + ": a BPE without ByteLevel or metaspace ('▁' for spaces) handling is not supported");
  }
  return ParseDecoder(root, path, p);
}

// The general pipeline: the normalizer and pre-tokenizer as steps (pipeline_json.h).
absl::Status ParseGeneralPipeline(const json& root, const std::string& path, PipelineConfig* p) {
  p->general = true;
  SCORED_RETURN_IF_ERROR(ParseNormalizerSteps(root.value("normalizer", json()), path, &p->normalizer));
  SCORED_RETURN_IF_ERROR(
      ParsePreTokenizerSteps(root.value("pre_tokenizer", json()), path, &p->pre_tokenizer));
  SCORED_RETURN_IF_ERROR(ParsePostProcessor(root.value("post_processor", json()), path, p));
  p->byte_level =
      std::any_of(p->pre_tokenizer.begin(), p->pre_tokenizer.end(),
                  [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Kind::kByteLevel; });
  return ParseDecoder(root, path, p);
}

// The legacy forms when they cover the file (unchanged fast paths), else the general pipeline; a type neither
// implements is UNIMPLEMENTED, named by the general pipeline's parser.
absl::Status ParsePipeline(const json& root, const std::string& path, PipelineConfig* p) {
  PipelineConfig legacy;
  const absl::Status status = ParseLegacyPipeline(root, path, &legacy);
  if (status.ok()) {
    *p = std::move(legacy);
    return absl::OkStatus();
  }
  if (!absl::IsUnimplemented(status)) return status;
  return ParseGeneralPipeline(root, path, p);
}

// model.continuing_subword_prefix and end_of_word_suffix (null or absent: none) into `options`, as bytes for
// a byte-level vocabulary (which is stored as bytes).
absl::Status ReadAffixes(const json& m, const std::string& path, bool byte_level,
                         BpeModel::Options* options) {
  const std::pair<const char*, std::string*> kAffixes[] = {
      {"continuing_subword_prefix", &options->continuing_subword_prefix},
      {"end_of_word_suffix", &options->end_of_word_suffix}};
  for (const auto& [key, affix] : kAffixes) {
    const auto it = m.find(key);
    if (it == m.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.", key, " ", it->dump(), " is not a string"));
    }
    *affix = byte_level ? ToBytes(it->get<std::string>()) : it->get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJsonImpl(const std::string& dir) {
  const std::string path = JoinPath(dir, "tokenizer.json");
  SCORED_ASSIGN_OR_RETURN(const json root, ReadJsonFile(path));
  if (!root.is_object()) return absl::InvalidArgumentError(path + ": not a JSON object");
  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    return absl::InvalidArgumentError(path + ": no 'model' object");
  }
  const json& m = *model_it;
  const std::string model_type = TypeOf(m);
  if (model_type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat(path, ": model.type '", model_type, "' is not supported (BPE only)"));
  }
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": model.dropout ", m["dropout"].dump(), " is not supported (BPE dropout)"));
  }
  PipelineConfig p;
  // A pipeline this loader does not implement is reported after the vocabulary and merges are checked (a
  // malformed file is named as such first).
  const absl::Status pipeline = ParsePipeline(root, path, &p);
  if (!pipeline.ok() && !absl::IsUnimplemented(pipeline)) return pipeline;

  // Vocabulary.
  const auto vocab_it = m.find("vocab");
  if (vocab_it == m.end() || !vocab_it->is_object()) {
    return absl::InvalidArgumentError(path + ": model.vocab must be an object");
  }
  std::vector<std::string> tokens;
  for (const auto& item : vocab_it->items()) {
    if (!item.value().is_number_integer() || item.value().get<int64_t>() < 0 ||
        item.value().get<int64_t>() > (1 << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.vocab['", item.key(), "'] is not a valid id"));
    }
    const size_t id = item.value().get<size_t>();
    if (tokens.size() <= id) tokens.resize(id + 1);
    tokens[id] = p.byte_level ? ToBytes(item.key()) : item.key();
  }
  // Merges: "a b" strings or [a, b] pairs.
  std::vector<std::pair<std::string, std::string>> merges;
  if (const auto it = m.find("merges"); it != m.end() && !it->is_null()) {
    if (!it->is_array()) return absl::InvalidArgumentError(path + ": model.merges must be an array");
    merges.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      std::string a, b;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": model.merges[", i, "] '", s, "' is not 'a b'"));
        }
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return absl::InvalidArgumentError(absl::StrCat(path, ": model.merges[", i, "] is malformed"));
      }
      if (p.byte_level) {
        a = ToBytes(a);
        b = ToBytes(b);
      }
      merges.emplace_back(std::move(a), std::move(b));
    }
  }
  BpeModel::Options options;
  options.alphabet = p.byte_level ? BpeModel::Alphabet::kBytes : BpeModel::Alphabet::kChars;
  options.byte_fallback = BoolField(m, "byte_fallback", false);
  options.fuse_unk = BoolField(m, "fuse_unk", false);
  options.ignore_merges = BoolField(m, "ignore_merges", false);
  SCORED_RETURN_IF_ERROR(ReadAffixes(m, path, p.byte_level, &options));
  if (const auto it = m.find("unk_token"); it != m.end() && it->is_string()) {
    const auto found = vocab_it->find(it->get<std::string>());
    if (found == vocab_it->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.unk_token '", it->get<std::string>(), "' is not in the vocab"));
    }
    options.unk_id = found->get<int32_t>();
  }
  auto model = BpeModel::CreateFromMerges(std::move(tokens), merges, options);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  SCORED_RETURN_IF_ERROR(pipeline);

  BpeTokenizerSpec spec;
  spec.kind = p.byte_level ? "hf-bpe-bytelevel" : "hf-bpe-metaspace";
  if (const auto it = root.find("added_tokens"); it != root.end() && it->is_array()) {
    for (const json& e : *it) {
      SCORED_ASSIGN_OR_RETURN(AddedToken t, ParseAddedToken(e, path));
      if (!e.contains("id") || !e["id"].is_number_integer() || e["id"].get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": added token '", t.content, "' has no valid id"));
      }
      t.id = e["id"].get<int32_t>();
      spec.added_tokens.push_back(std::move(t));
    }
  }
  SCORED_ASSIGN_OR_RETURN(const HfTokenizerConfig config, ReadHfTokenizerConfig(dir));
  MergeAddedTokens(config.added_tokens, &spec.added_tokens);
  spec.nfc = p.nfc;
  spec.split_patterns = p.split_patterns;
  spec.add_prefix_space = p.add_prefix_space;
  spec.digits = p.digits;
  spec.metaspace_prepend = p.prepend;
  spec.metaspace_prepend_first_only = p.prepend_first_only;
  spec.metaspace_prepend_unless_present = p.prepend_unless_present;
  spec.metaspace_split = p.metaspace_split;
  spec.decoder = p.decoder;
  spec.has_decoder = p.has_decoder;
  spec.general_pipeline = p.general;
  spec.normalizer = p.normalizer;
  spec.pre_tokenizer = p.pre_tokenizer;
  if (p.general && !p.normalizer.empty()) {
    // The library matches these in the normalized text; this pipeline matches every added token in the raw
    // one.
    for (const AddedToken& a : spec.added_tokens) {
      if (a.normalized) {
        return absl::UnimplementedError(
            absl::StrCat(path, ": added token '", a.content,
                         "' with normalized true under a normalizer is not supported"));
      }
    }
  }
  SpecialDefaults defaults;
  defaults.template_bos = p.template_bos;
  defaults.add_bos = p.template_bos >= 0;
  // Without a tokenizer config, the conventional end token of the family where present:
  // "</s>" for metaspace (SentencePiece-derived) vocabularies, "<|endoftext|>" for byte-level ones.
  const std::string conventional_eos = p.byte_level ? "<|endoftext|>" : "</s>";
  if (FindToken(conventional_eos, spec.added_tokens, *model) >= 0) defaults.eos = conventional_eos;
  SCORED_RETURN_IF_ERROR(ResolveSpecials(config, defaults, dir, *model, &spec));
  std::vector<std::string> files = {path};
  files.insert(files.end(), config.files_read.begin(), config.files_read.end());
  return Finish(std::move(model).value(), std::move(spec), files, path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& dir) {
  try {
    return LoadHfTokenizerJsonImpl(dir);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(JoinPath(dir, "tokenizer.json"), ": unexpected JSON structure: ", e.what()));
  }
}

// ---- vocab.json + merges.txt -----------------------------------------------------------------------

namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadVocabMergesImpl(const std::string& dir) {
  const std::string vocab_path = JoinPath(dir, "vocab.json");
  const std::string merges_path = JoinPath(dir, "merges.txt");
  SCORED_ASSIGN_OR_RETURN(const json vocab, ReadJsonFile(vocab_path));
  if (!vocab.is_object()) return absl::InvalidArgumentError(vocab_path + ": not a JSON object");
  std::vector<std::string> tokens;
  for (const auto& item : vocab.items()) {
    if (!item.value().is_number_integer() || item.value().get<int64_t>() < 0 ||
        item.value().get<int64_t>() > (1 << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_path, ": entry '", item.key(), "' is not a valid id"));
    }
    const size_t id = item.value().get<size_t>();
    if (tokens.size() <= id) tokens.resize(id + 1);
    tokens[id] = ToBytes(item.key());
  }
  SCORED_ASSIGN_OR_RETURN(const std::string merges_text, ReadFileBytes(merges_path));
  std::vector<std::pair<std::string, std::string>> merges;
  int line_no = 0;
  for (std::string_view line : SplitLines(merges_text)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    const size_t space = line.find(' ', 1);
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, ": line ", line_no, ": expected two tokens separated by one space"));
    }
    merges.emplace_back(ToBytes(std::string(line.substr(0, space))),
                        ToBytes(std::string(line.substr(space + 1))));
  }
  BpeModel::Options options;
  options.alphabet = BpeModel::Alphabet::kBytes;
  auto model = BpeModel::CreateFromMerges(std::move(tokens), merges, options);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(merges_path, ": ", model.status().message()));
  }
  SCORED_ASSIGN_OR_RETURN(const HfTokenizerConfig config, ReadHfTokenizerConfig(dir));
  BpeTokenizerSpec spec;
  spec.kind = "hf-bpe-bytelevel";
  spec.added_tokens = config.added_tokens;
  // Rule: a Qwen2 tokenizer class selects Qwen2's pre-tokenizer (NFC, single digits); any other
  // folder gets GPT-2's pattern, as transformers' GPT2Tokenizer.
  const bool qwen2 = config.tokenizer_class.rfind("Qwen2", 0) == 0;
  spec.nfc = qwen2;
  spec.split_patterns = {qwen2 ? kQwen2Pattern : kGpt2Pattern};
  SpecialDefaults defaults;
  const std::string eot = "<|endoftext|>";
  if (model->TokenId(eot) >= 0 || std::any_of(spec.added_tokens.begin(), spec.added_tokens.end(),
                                              [&](const AddedToken& a) { return a.content == eot; })) {
    // GPT2Tokenizer's defaults: <|endoftext|> is BOS and EOS (and matched as a special token);
    // Qwen2Tokenizer's default EOS is the same token.
    if (!qwen2) defaults.bos = eot;
    defaults.eos = eot;
    const int32_t id = FindToken(eot, spec.added_tokens, *model);
    MergeAddedTokens({AddedToken{id, eot, true, false, false}}, &spec.added_tokens);
  }
  SCORED_RETURN_IF_ERROR(ResolveSpecials(config, defaults, dir, *model, &spec));
  std::vector<std::string> files = {vocab_path, merges_path};
  files.insert(files.end(), config.files_read.begin(), config.files_read.end());
  return Finish(std::move(model).value(), std::move(spec), files, vocab_path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadVocabMerges(const std::string& dir) {
  try {
    return LoadVocabMergesImpl(dir);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(JoinPath(dir, "vocab.json"), ": unexpected JSON structure: ", e.what()));
  }
}

// ---- tiktoken ----------------------------------------------------------------------------------------

bool LooksLikeTiktoken(const std::string& bytes) {
  const size_t eol = bytes.find('\n');
  const std::string_view line = std::string_view(bytes).substr(0, eol);
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 >= line.size()) return false;
  for (size_t i = 0; i < space; ++i) {
    const char c = line[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) {
      return false;
    }
  }
  for (size_t i = space + 1; i < line.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i])) && line[i] != '\r') return false;
  }
  return true;
}

namespace {

// Llama-3's special tokens, ids num_ranks + i (the reference tokenizer's order).
std::vector<AddedToken> Llama3Specials(int32_t num_ranks) {
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|reserved_special_token_2|>",
                                    "<|reserved_special_token_3|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|reserved_special_token_4|>",
                                    "<|eot_id|>"};
  constexpr int kNumSpecial = 256;
  for (int i = 5; names.size() < kNumSpecial; ++i) {
    names.push_back(absl::StrCat("<|reserved_special_token_", i, "|>"));
  }
  std::vector<AddedToken> specials;
  for (int i = 0; i < kNumSpecial; ++i) {
    specials.push_back(AddedToken{num_ranks + i, names[i], true, false, false});
  }
  return specials;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTiktoken(const std::string& dir) {
  const std::string path = JoinPath(dir, "tokenizer.model");
  SCORED_ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(path));
  std::vector<std::string> tokens;
  int line_no = 0;
  for (std::string_view line : SplitLines(text)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    std::string token;
    char* end = nullptr;
    const std::string rank_text(space == std::string_view::npos ? "" : line.substr(space + 1));
    const long rank = std::strtol(rank_text.c_str(), &end, 10);
    if (space == std::string_view::npos || rank_text.empty() || *end != '\0' || rank < 0 ||
        rank > (1 << 24) || !absl::Base64Unescape(absl::string_view(line.data(), space), &token) ||
        token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": line ", line_no, ": expected '<base64 token> <rank>'"));
    }
    if (tokens.size() <= static_cast<size_t>(rank)) tokens.resize(rank + 1);
    if (!tokens[rank].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": line ", line_no, ": rank ", rank, " appears twice"));
    }
    tokens[rank] = std::move(token);
  }
  if (tokens.empty()) return absl::InvalidArgumentError(path + ": no tokens");
  const int32_t num_ranks = static_cast<int32_t>(tokens.size());
  BpeModel::Options options;
  options.alphabet = BpeModel::Alphabet::kBytes;
  options.ignore_merges = true;  // tiktoken emits a piece that is itself a token directly
  auto model = BpeModel::CreateFromRanks(std::move(tokens), options);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  SCORED_ASSIGN_OR_RETURN(const HfTokenizerConfig config, ReadHfTokenizerConfig(dir));
  BpeTokenizerSpec spec;
  spec.kind = "tiktoken";
  spec.added_tokens = config.added_tokens.empty() ? Llama3Specials(num_ranks) : config.added_tokens;
  spec.split_patterns = {kLlama3Pattern};
  SpecialDefaults defaults;
  defaults.bos = "<|begin_of_text|>";
  defaults.eos = "<|end_of_text|>";
  defaults.add_bos = true;  // Llama-3 convention: begin_of_text starts every sequence
  SCORED_RETURN_IF_ERROR(ResolveSpecials(config, defaults, dir, *model, &spec));
  std::vector<std::string> files = {path};
  files.insert(files.end(), config.files_read.begin(), config.files_read.end());
  return Finish(std::move(model).value(), std::move(spec), files, path);
}

}  // namespace tokenizer_internal
}  // namespace scored

#include "engine/model/toolkit_quant.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/dtype.h"
#include "engine/base/json_util.h"
#include "engine/base/status_macros.h"
#include "engine/model/raw_read.h"
#include "engine/model/tensor_checks.h"

namespace scored {
namespace {

using json_util::Find;
using json_util::Json;
using raw_read::Load;

// AutoAWQ's GEMM packing: nibble n of a word holds column 8c + kAwqOrder[n]; kAwqNibble is the inverse
// (the nibble of column 8c + j).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

absl::Status Unsupported(absl::string_view source, absl::string_view field, const std::string& value,
                         absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": quantization_config field '", field, "' is ", value, ": ", why));
}

std::string ShapeStr(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

absl::Status ParseGptq(const Json& j, absl::string_view src, ToolkitQuantConfig* c) {
  c->method = ToolkitQuantConfig::Method::kGptq;
  SCORED_ASSIGN_OR_RETURN(int64_t bits, json_util::GetInt(j, "bits", src));
  if (bits != 4 && bits != 8) {
    return Unsupported(src, "bits", absl::StrCat(bits), "GPTQ is implemented for 4 and 8 bits only");
  }
  c->bits = static_cast<int>(bits);
  SCORED_ASSIGN_OR_RETURN(c->group_size, json_util::GetInt(j, "group_size", src, -1));
  if (c->group_size != -1 && c->group_size <= 0) {
    return Unsupported(src, "group_size", absl::StrCat(c->group_size), "expected -1 or a positive size");
  }
  SCORED_ASSIGN_OR_RETURN(c->desc_act, json_util::GetBool(j, "desc_act", src, false));
  // GPTQModel writes `checkpoint_format` (older releases and transformers' GPTQConfig) or `format`.
  const char* key = Find(j, "checkpoint_format") != nullptr ? "checkpoint_format" : "format";
  SCORED_ASSIGN_OR_RETURN(std::string format, json_util::GetString(j, key, src, std::string("gptq")));
  if (format == "gptq") {
    c->zero_point_minus_one = true;
  } else if (format != "gptq_v2") {
    return Unsupported(src, key, absl::StrCat("'", format, "'"),
                       "only the 'gptq' (v1) and 'gptq_v2' checkpoint formats are implemented");
  }
  SCORED_ASSIGN_OR_RETURN(std::string pack_dtype,
                          json_util::GetString(j, "pack_dtype", src, std::string("int32")));
  if (pack_dtype != "int32" && pack_dtype != "torch.int32") {
    return Unsupported(src, "pack_dtype", absl::StrCat("'", pack_dtype, "'"),
                       "only int32 packing is implemented");
  }
  const Json* dynamic = Find(j, "dynamic");
  if (dynamic != nullptr && !dynamic->empty()) {
    return Unsupported(src, "dynamic", dynamic->dump(), "per-module GPTQ overrides are not implemented");
  }
  c->label = absl::StrCat("gptq-", c->zero_point_minus_one ? "v1" : "v2");
  return absl::OkStatus();
}

absl::Status ParseAwq(const Json& j, absl::string_view src, ToolkitQuantConfig* c) {
  c->method = ToolkitQuantConfig::Method::kAwq;
  const char* bits_key = Find(j, "bits") != nullptr ? "bits" : "w_bit";
  SCORED_ASSIGN_OR_RETURN(int64_t bits, json_util::GetInt(j, bits_key, src, 4));
  if (bits != 4) return Unsupported(src, bits_key, absl::StrCat(bits), "AWQ is implemented for 4 bits only");
  c->bits = 4;
  const char* gs_key = Find(j, "group_size") != nullptr ? "group_size" : "q_group_size";
  SCORED_ASSIGN_OR_RETURN(c->group_size, json_util::GetInt(j, gs_key, src, 128));
  if (c->group_size != -1 && c->group_size <= 0) {
    return Unsupported(src, gs_key, absl::StrCat(c->group_size), "expected -1 or a positive size");
  }
  SCORED_ASSIGN_OR_RETURN(bool zero_point, json_util::GetBool(j, "zero_point", src, true));
  if (!zero_point) {
    return Unsupported(src, "zero_point", "false", "AWQ without zero points is not implemented");
  }
  // The storage layout: `version` (AutoAWQ) or `format` (transformers 5); `backend` only picks a kernel,
  // except "llm-awq", the original repository's own packing.
  const char* format_key = Find(j, "format") != nullptr ? "format" : "version";
  SCORED_ASSIGN_OR_RETURN(std::string format, json_util::GetString(j, format_key, src, std::string("gemm")));
  if (absl::AsciiStrToLower(format) != "gemm") {
    return Unsupported(src, format_key, absl::StrCat("'", format, "'"),
                       "only AutoAWQ's GEMM packing is implemented (not GEMV, GEMV_fast, llm-awq)");
  }
  SCORED_ASSIGN_OR_RETURN(std::string backend, json_util::GetString(j, "backend", src, std::string("auto")));
  if (backend == "llm-awq") {
    return Unsupported(src, "backend", "'llm-awq'",
                       "llm-awq's packing is not implemented (AutoAWQ GEMM only)");
  }
  c->label = "awq-gemm";
  return absl::OkStatus();
}

// `q` is the object holding quant_algo: config.json's quantization_config or hf_quant_config.json's
// "quantization".
absl::Status ParseModelOpt(const Json& q, absl::string_view src, ToolkitQuantConfig* c) {
  SCORED_ASSIGN_OR_RETURN(std::string algo, json_util::GetString(q, "quant_algo", src));
  if (algo == "NVFP4") {
    SCORED_ASSIGN_OR_RETURN(int64_t group, json_util::GetInt(q, "group_size", src, 16));
    if (group != 16)
      return Unsupported(src, "group_size", absl::StrCat(group), "NVFP4 blocks are 16 elements");
    c->method = ToolkitQuantConfig::Method::kModelOptNvfp4;
    c->bits = 4;
    c->label = "modelopt-nvfp4";
  } else if (algo == "FP8") {
    c->method = ToolkitQuantConfig::Method::kModelOptFp8;
    c->bits = 8;
    c->label = "modelopt-fp8";
  } else {
    return Unsupported(src, "quant_algo", absl::StrCat("'", algo, "'"),
                       "only ModelOpt FP8 (per-tensor weights, static per-tensor activations) and NVFP4 are "
                       "implemented");
  }
  const Json* kv = Find(q, "kv_cache_quant_algo");
  if (kv != nullptr && !kv->is_null()) {
    if (!kv->is_string() || kv->get<std::string>() != "FP8") {
      return Unsupported(
          src, "kv_cache_quant_algo", kv->dump(),
          "only FP8 (static per-tensor K / V scales) is implemented (not NVFP4, NVFP4_AFFINE, INT8)");
    }
    c->kv_cache_fp8 = true;
  }
  // config.json's form of the same (modelopt/torch/export/convert_hf_config.py): kv_cache_scheme {"type":
  // "float", "num_bits": 8, "dynamic": false} for FP8, the algorithm's name as a string for the others.
  const Json* scheme = Find(q, "kv_cache_scheme");
  if (scheme != nullptr && !scheme->is_null()) {
    const bool fp8 = scheme->is_object() && scheme->value("type", "") == "float" &&
                     scheme->value("num_bits", 0) == 8 && !scheme->value("dynamic", true);
    if (!fp8) {
      return Unsupported(src, "kv_cache_scheme", scheme->dump(),
                         "only FP8 (type float, 8 bits, static per-tensor K / V scales) is implemented");
    }
    c->kv_cache_fp8 = true;
  }
  return absl::OkStatus();
}

// transformers' FineGrainedFP8Config (quant_method "fp8"): dynamic activations, [br, bc] weight blocks.
absl::Status ParseNativeFp8(const Json& j, absl::string_view src, ToolkitQuantConfig* c) {
  SCORED_ASSIGN_OR_RETURN(std::string scheme, json_util::GetString(j, "activation_scheme", src, "dynamic"));
  if (absl::AsciiStrToLower(scheme) != "dynamic") {
    return Unsupported(
        src, "activation_scheme", absl::StrCat("'", scheme, "'"),
        "only dynamic FP8 activations (per token and weight block of columns) are implemented");
  }
  SCORED_ASSIGN_OR_RETURN(std::string fmt, json_util::GetString(j, "scale_fmt", src, "float"));
  if (fmt != "float") {
    return Unsupported(src, "scale_fmt", absl::StrCat("'", fmt, "'"), "only float (F32 / BF16) scales");
  }
  const Json* block = Find(j, "weight_block_size");
  const bool pair = block != nullptr && block->is_array() && block->size() == 2 &&
                    (*block)[0].is_number_integer() && (*block)[1].is_number_integer() &&
                    (*block)[0].get<int64_t>() > 0 && (*block)[1].get<int64_t>() > 0;
  if (!pair) {
    return Unsupported(
        src, "weight_block_size", block == nullptr ? "absent" : block->dump(),
        "block FP8 with two positive block sizes, e.g. [128, 128], is implemented (not per tensor)");
  }
  c->block_rows = (*block)[0].get<int64_t>();
  c->block_cols = (*block)[1].get<int64_t>();
  if (const Json* m = Find(j, "modules_to_convert"); m != nullptr && !m->is_null()) {
    return Unsupported(src, "modules_to_convert", m->dump(), "use modules_to_not_convert");
  }
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    const Json* list = Find(j, key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) return json_util::TypeError(src, key, "a list of module names", *list);
    for (const Json& name : *list) {
      if (!name.is_string()) return json_util::TypeError(src, key, "a list of module names", *list);
      c->not_converted.push_back(name.get<std::string>());
    }
  }
  c->method = ToolkitQuantConfig::Method::kNativeFp8Block;
  c->bits = 8;
  c->label = absl::StrCat("fp8-block-", c->block_rows, "x", c->block_cols);
  return absl::OkStatus();
}

// A tensor of `store`, checked for dtype and shape, recorded in `consumed`.
absl::StatusOr<TensorView> TakeTensor(const TensorStore& store, const std::string& name,
                                      const std::vector<int64_t>& shape, std::initializer_list<DType> dtypes,
                                      std::vector<std::string>* consumed) {
  SCORED_ASSIGN_OR_RETURN(TensorView t, store.Get(name));
  consumed->push_back(name);
  SCORED_RETURN_IF_ERROR(CheckDType(t, dtypes));
  if (!shape.empty() && t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", name, "' has shape ",
                                                   ShapeStr(t.shape), ", expected ", ShapeStr(shape)));
  }
  return t;
}

// A new host tensor of `nbytes` zero bytes, owned by `buffers`.
TensorView NewTensor(const TensorView& from, std::string name, DType dtype, std::vector<int64_t> shape,
                     TranscodedBuffers* buffers) {
  TensorView t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = t.NumElements() * DTypeSize(dtype);
  t.file = from.file;
  buffers->push_back(std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(t.nbytes), 0));
  t.data = buffers->back()->data();
  return t;
}

// [rows, cols] -> [cols, rows] for elements of `elem` bytes.
void Transpose(const uint8_t* src, int64_t rows, int64_t cols, int64_t elem, uint8_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(dst + (c * rows + r) * elem, src + (r * cols + c) * elem, elem);
  }
}

// The zero points z[g * out + o] (as the library reads them) into the compressed-tensors layout: the
// [ceil(out*b/32), groups] I32 tensor whose column g is the bit stream of z[g][0..out) (unsigned, the
// same representation as the weights). Sets w->symmetric (and no tensor) when every z is 2^(b-1).
void SetZeroPoints(const std::vector<uint32_t>& z, int64_t groups, const TensorView& from, LinearWeight* w,
                   TranscodedBuffers* buffers) {
  const int b = w->num_bits;
  const int64_t out = w->out_features;
  w->symmetric = true;
  for (uint32_t v : z) w->symmetric = w->symmetric && v == (1u << (b - 1));
  if (w->symmetric) return;
  const int64_t words = (out * b + 31) / 32;
  w->weight_zero_point = NewTensor(from, from.name + " (transcoded)", DType::kI32, {words, groups}, buffers);
  uint32_t* zp = reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(w->weight_zero_point.data));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const int64_t bit = o * b;
      zp[(bit >> 5) * groups + g] |= z[g * out + o] << (bit & 31);
    }
  }
}

// Strategy, scales (transposed to [out, groups]) and g_idx, shared by GPTQ and AWQ.
absl::Status SetGroupsAndScales(const ToolkitQuantConfig& c, const TensorView& scales,
                                const TensorView* g_idx, int64_t groups, LinearWeight* w,
                                TranscodedBuffers* buffers) {
  const int64_t out = w->out_features, in = w->in_features;
  w->weight_scale = NewTensor(scales, scales.name + " (transposed)", scales.dtype, {out, groups}, buffers);
  Transpose(scales.data, groups, out, DTypeSize(scales.dtype), const_cast<uint8_t*>(w->weight_scale.data));
  w->strategy = c.group_size < 0 ? QuantStrategy::kChannel : QuantStrategy::kGroup;
  w->group_size = c.group_size < 0 ? 0 : c.group_size;
  if (g_idx == nullptr) return absl::OkStatus();
  bool trivial = true;
  for (int64_t k = 0; k < in; ++k) {
    const int32_t g = Load<int32_t>(g_idx->data, k);
    if (g < 0 || g >= groups) {
      return absl::InvalidArgumentError(absl::StrCat(g_idx->file, ": tensor '", g_idx->name, "'[", k,
                                                     "] = ", g, " outside [0, ", groups, ")"));
    }
    trivial = trivial && g == (c.group_size < 0 ? 0 : k / c.group_size);
  }
  if (!trivial) {  // desc_act: GPTQ's activation order; groups == ceil(in / group_size) > 1 here
    w->actorder_group = true;
    w->weight_g_idx = *g_idx;
  }
  return absl::OkStatus();
}

absl::Status LoadGptq(const ToolkitQuantConfig& c, const TensorStore& store, LinearWeight* w,
                      std::vector<std::string>* consumed, TranscodedBuffers* buffers) {
  const std::string& p = w->module;
  const int b = c.bits, per_word = 32 / b;
  const int64_t out = w->out_features, in = w->in_features;
  const int64_t groups = c.group_size < 0 ? 1 : (in + c.group_size - 1) / c.group_size;
  if (in % per_word != 0 || out % per_word != 0 || (c.group_size > 0 && in % c.group_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ": GPTQ ", b, "-bit with [out, in] = [", out, ", ", in, "] and group_size ", c.group_size,
        " is not implemented (in and out must be multiples of ", per_word, ", in of the group size)"));
  }
  SCORED_ASSIGN_OR_RETURN(TensorView qweight,
                          TakeTensor(store, p + ".qweight", {in / per_word, out}, {DType::kI32}, consumed));
  SCORED_ASSIGN_OR_RETURN(
      TensorView qzeros, TakeTensor(store, p + ".qzeros", {groups, out / per_word}, {DType::kI32}, consumed));
  SCORED_ASSIGN_OR_RETURN(TensorView scales, TakeTensor(store, p + ".scales", {groups, out},
                                                        {DType::kF16, DType::kBF16, DType::kF32}, consumed));
  std::optional<TensorView> g_idx;
  if (store.Has(p + ".g_idx")) {
    SCORED_ASSIGN_OR_RETURN(g_idx, TakeTensor(store, p + ".g_idx", {in}, {DType::kI32}, consumed));
  } else if (c.desc_act) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": desc_act is true but ", p, ".g_idx is missing"));
  }
  w->format = WeightFormat::kPackQuantized;
  w->num_bits = b;
  // qweight's column o is row o of compressed-tensors' weight_packed: the same LSB-first bit stream.
  w->weight_packed =
      NewTensor(qweight, qweight.name + " (transposed)", DType::kI32, {out, in / per_word}, buffers);
  Transpose(qweight.data, in / per_word, out, 4, const_cast<uint8_t*>(w->weight_packed.data));
  const uint32_t mask = (1u << b) - 1;
  const uint32_t add = c.zero_point_minus_one ? 1 : 0;
  std::vector<uint32_t> z(static_cast<size_t>(groups * out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = Load<uint32_t>(qzeros.data, g * (out / per_word) + o / per_word);
      const uint32_t stored = (word >> ((o % per_word) * b)) & mask;
      if (stored + add > mask) {
        return absl::InvalidArgumentError(absl::StrCat(
            qzeros.file, ": tensor '", qzeros.name, "' group ", g, " column ", o, ": stored zero point ",
            stored, " reads as ", stored + add, " in the 'gptq' (v1) checkpoint format, outside the ", b,
            "-bit range (a v1 zero point of 0 cannot be stored; not implemented)"));
      }
      z[static_cast<size_t>(g * out + o)] = stored + add;
    }
  }
  SetZeroPoints(z, groups, qzeros, w, buffers);
  // Only the transcoded copies are read from here on: the source pages leave the RSS.
  for (const TensorView* t : {&qweight, &qzeros, &scales}) store.ReleaseResidentPages(*t);
  return SetGroupsAndScales(c, scales, g_idx ? &*g_idx : nullptr, groups, w, buffers);
}

absl::Status LoadAwq(const ToolkitQuantConfig& c, const TensorStore& store, LinearWeight* w,
                     std::vector<std::string>* consumed, TranscodedBuffers* buffers) {
  const std::string& p = w->module;
  const int64_t out = w->out_features, in = w->in_features;
  const int64_t groups = c.group_size < 0 ? 1 : in / c.group_size;
  if (out % 8 != 0 || in % 8 != 0 || (c.group_size > 0 && in % c.group_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": AWQ with [out, in] = [", out, ", ", in,
                                                   "] and group_size ", c.group_size,
                                                   " is not implemented (multiples of 8 and of the "
                                                   "group size expected)"));
  }
  SCORED_ASSIGN_OR_RETURN(TensorView qweight,
                          TakeTensor(store, p + ".qweight", {in, out / 8}, {DType::kI32}, consumed));
  SCORED_ASSIGN_OR_RETURN(TensorView qzeros,
                          TakeTensor(store, p + ".qzeros", {groups, out / 8}, {DType::kI32}, consumed));
  SCORED_ASSIGN_OR_RETURN(TensorView scales, TakeTensor(store, p + ".scales", {groups, out},
                                                        {DType::kF16, DType::kBF16, DType::kF32}, consumed));
  w->format = WeightFormat::kPackQuantized;
  w->num_bits = 4;
  w->weight_packed = NewTensor(qweight, qweight.name + " (repacked)", DType::kI32, {out, in / 8}, buffers);
  uint32_t* wp = reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(w->weight_packed.data));
  for (int64_t k = 0; k < in; ++k) {
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = Load<uint32_t>(qweight.data, k * (out / 8) + o / 8);
      const uint32_t q = (word >> (4 * kAwqNibble[o % 8])) & 15u;
      wp[o * (in / 8) + k / 8] |= q << (4 * (k % 8));
    }
  }
  std::vector<uint32_t> z(static_cast<size_t>(groups * out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = Load<uint32_t>(qzeros.data, g * (out / 8) + o / 8);
      z[static_cast<size_t>(g * out + o)] = (word >> (4 * kAwqNibble[o % 8])) & 15u;
    }
  }
  SetZeroPoints(z, groups, qzeros, w, buffers);
  // Only the transcoded copies are read from here on: the source pages leave the RSS.
  for (const TensorView* t : {&qweight, &qzeros, &scales}) store.ReleaseResidentPages(*t);
  return SetGroupsAndScales(c, scales, nullptr, groups, w, buffers);
}

// A per-tensor F32/BF16/F16 scale stored as [] or [1]: the view, reshaped to [1]; must be finite and > 0.
absl::StatusOr<TensorView> TakeScalarScale(const TensorStore& store, const std::string& name,
                                           std::vector<std::string>* consumed) {
  SCORED_ASSIGN_OR_RETURN(TensorView t,
                          TakeTensor(store, name, {}, {DType::kF32, DType::kBF16, DType::kF16}, consumed));
  if (t.NumElements() != 1 || t.shape.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", name, "' has shape ",
                                                   ShapeStr(t.shape),
                                                   ", expected [] or [1] (ModelOpt FP8 is per tensor; "
                                                   "per-channel scales are not implemented)"));
  }
  t.shape = {1};
  float v = 0.0f;
  SCORED_RETURN_IF_ERROR(TensorToFloat(t, &v, 1));
  if (!(v > 0.0f) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.file, ": tensor '", name, "' is ", v, ", expected a finite scale > 0"));
  }
  return t;
}

// A float32 divisor g for which the compressed-tensors NVFP4 decode bf16(e2m1 * fp32(fp32(s) / g)) equals
// ModelOpt's bf16(e2m1 * fp32(fp32(s) * multiplier)) for every e2m1 value and every block-scale code s that
// `scale` holds (so every element of the weight decodes the same); nullopt when no float within 64 ulps of
// 1 / multiplier does (fp32(s / g) and fp32(s * m) can differ by an ulp, which the bf16 rounding hides
// unless it sits on a bf16 rounding boundary).
std::optional<float> ExactDivisor(float multiplier, const TensorView& scale) {
  bool used[256] = {};
  for (int64_t i = 0; i < scale.nbytes; ++i) used[scale.data[i] & 0x7f] = true;  // the sign only flips
  static constexpr float kE2m1[] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float first = 1.0f / multiplier;
  for (int step = 0; step <= 64; ++step) {
    for (int sign : {1, -1}) {
      uint32_t bits;
      std::memcpy(&bits, &first, 4);
      bits = static_cast<uint32_t>(static_cast<int64_t>(bits) + sign * step);
      float g;
      std::memcpy(&g, &bits, 4);
      bool ok = std::isfinite(g) && g > 0.0f;
      for (int code = 1; ok && code < 0x7f; ++code) {  // 0 decodes to 0 either way; 0x7f is NaN
        if (!used[code]) continue;
        const float v = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
        const float ours = v / g, theirs = v * multiplier;
        for (float e : kE2m1) ok = ok && FloatToBf16(e * ours) == FloatToBf16(e * theirs);
      }
      if (ok) return g;
    }
  }
  return std::nullopt;
}

// ModelOpt NVFP4: P.weight U8 [out, in/2] (element 2i in the low nibble), P.weight_scale F8_E4M3 [out,
// in/16], P.weight_scale_2 F32 [] (a multiplier: ModelOpt's NVFP4QTensor.dequantize computes bf16(e2m1 *
// fp32(fp32(scale) * weight_scale_2)), with code 8 read as +0), P.input_scale F32 [] (FP4 activations: run
// weight-only, like compressed-tensors' W4A4). When a divisor gives the same value for every element
// (ExactDivisor) the module stays NVFP4 (nibble 8 rewritten to 0 so that zero is +0, as ModelOpt has it);
// otherwise it is decoded at load to dense BF16, the same values.
absl::Status LoadModelOptNvfp4(const TensorStore& store, LinearWeight* w, std::vector<std::string>* consumed,
                               TranscodedBuffers* buffers) {
  const std::string& p = w->module;
  const int64_t out = w->out_features, in = w->in_features;
  if (in % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": in_features ", in, " is not a multiple of 16"));
  }
  SCORED_ASSIGN_OR_RETURN(TensorView packed,
                          TakeTensor(store, p + ".weight", {out, in / 2}, {DType::kU8}, consumed));
  SCORED_ASSIGN_OR_RETURN(TensorView scale,
                          TakeTensor(store, p + ".weight_scale", {out, in / 16}, {DType::kF8E4M3}, consumed));
  SCORED_ASSIGN_OR_RETURN(TensorView scale2, TakeScalarScale(store, p + ".weight_scale_2", consumed));
  float multiplier = 0.0f;
  SCORED_RETURN_IF_ERROR(TensorToFloat(scale2, &multiplier, 1));
  if (store.Has(p + ".input_scale")) {
    SCORED_ASSIGN_OR_RETURN(TensorView ignored, TakeScalarScale(store, p + ".input_scale", consumed));
    (void)ignored;
    w->w4a4_run_weight_only = true;
  }
  w->num_bits = 4;
  const std::optional<float> divisor = ExactDivisor(multiplier, scale);
  if (divisor.has_value()) {
    w->format = WeightFormat::kNvfp4PackQuantized;
    w->strategy = QuantStrategy::kGroup;
    w->group_size = 16;
    w->weight_scale = scale;
    w->weight_packed =
        NewTensor(packed, packed.name + " (+0 for code 8)", DType::kU8, {out, in / 2}, buffers);
    uint8_t* dst = const_cast<uint8_t*>(w->weight_packed.data);
    for (int64_t i = 0; i < packed.nbytes; ++i) {
      uint8_t b = packed.data[i];
      if ((b & 0x0f) == 0x08) b &= 0xf0;
      if ((b & 0xf0) == 0x80) b &= 0x0f;
      dst[i] = b;
    }
    w->weight_global_scale = NewTensor(scale2, scale2.name + " (as a divisor)", DType::kF32, {1}, buffers);
    std::memcpy(const_cast<uint8_t*>(w->weight_global_scale.data), &*divisor, 4);
    store.ReleaseResidentPages(packed);
    return absl::OkStatus();
  }
  w->format = WeightFormat::kDense;
  w->weight = NewTensor(packed, packed.name + " (decoded to BF16)", DType::kBF16, {out, in}, buffers);
  uint16_t* dst = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(w->weight.data));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < in; ++k) {
      const uint8_t byte = packed.data[o * (in / 2) + k / 2];
      const uint8_t nibble = (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
      const float block = Fp8E4M3ToFloat(scale.data[o * (in / 16) + k / 16]) * multiplier;
      const float e2m1 = nibble == 8 ? 0.0f : E2M1ToFloat(nibble);
      dst[o * in + k] = FloatToBf16(e2m1 * block);
    }
  }
  for (const TensorView* t : {&packed, &scale}) store.ReleaseResidentPages(*t);
  return absl::OkStatus();
}

// Whether `module` is named by modules_to_not_convert as transformers' should_convert_module reads it: the
// name starts with a pattern (re.match, here taken literally: no regex pattern is expected in these lists)
// or ends with one.
bool NotConverted(const ToolkitQuantConfig& c, const std::string& module) {
  for (const std::string& n : c.not_converted) {
    if (absl::StartsWith(module, n) || absl::EndsWith(module, n)) return true;
  }
  return false;
}

absl::Status LoadNativeFp8(const ToolkitQuantConfig& c, const TensorStore& store, LinearWeight* w,
                           std::vector<std::string>* consumed) {
  const std::string& p = w->module;
  if (NotConverted(c, p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.source, ": ", p, " is in modules_to_not_convert but stored quantized (", p, ".weight_scale_inv)"));
  }
  const int64_t out = w->out_features, in = w->in_features;
  SCORED_ASSIGN_OR_RETURN(w->weight, TakeTensor(store, p + ".weight", {out, in}, {DType::kF8E4M3}, consumed));
  const int64_t rows = (out + c.block_rows - 1) / c.block_rows, cols = (in + c.block_cols - 1) / c.block_cols;
  SCORED_ASSIGN_OR_RETURN(TensorView scale, TakeTensor(store, p + ".weight_scale_inv", {rows, cols},
                                                       {DType::kF32, DType::kBF16}, consumed));
  std::vector<float> values(static_cast<size_t>(scale.NumElements()));
  SCORED_RETURN_IF_ERROR(TensorToFloat(scale, values.data(), scale.NumElements()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(values[i] > 0.0f) || !std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(scale.file, ": tensor '", scale.name, "' holds ",
                                                     values[i], " at ", i, ", expected finite scales > 0"));
    }
  }
  w->weight_scale = scale;
  w->format = WeightFormat::kFloatQuantized;
  w->num_bits = 8;
  w->strategy = QuantStrategy::kBlock;
  w->block_rows = c.block_rows;
  w->block_cols = c.block_cols;
  w->w8a8_dynamic_fp8 = true;
  w->act_group_size = c.block_cols;
  return absl::OkStatus();
}

absl::Status LoadModelOptFp8(const TensorStore& store, LinearWeight* w, std::vector<std::string>* consumed) {
  const std::string& p = w->module;
  SCORED_ASSIGN_OR_RETURN(w->weight, TakeTensor(store, p + ".weight", {w->out_features, w->in_features},
                                                {DType::kF8E4M3}, consumed));
  SCORED_ASSIGN_OR_RETURN(w->weight_scale, TakeScalarScale(store, p + ".weight_scale", consumed));
  w->format = WeightFormat::kFloatQuantized;
  w->num_bits = 8;
  w->strategy = QuantStrategy::kTensor;
  if (store.Has(p + ".input_scale")) {
    SCORED_ASSIGN_OR_RETURN(w->input_scale, TakeScalarScale(store, p + ".input_scale", consumed));
    w->static_input_fp8 = true;
  }
  return absl::OkStatus();
}

}  // namespace

bool IsToolkitQuantMethod(absl::string_view quantization_config_json) {
  const Json j = Json::parse(quantization_config_json, nullptr, /*allow_exceptions=*/false);
  const Json* m = Find(j, "quant_method");
  if (m == nullptr || !m->is_string()) return false;
  const std::string s = absl::AsciiStrToLower(m->get<std::string>());
  return s == "gptq" || s == "awq" || s == "modelopt" || s == "fp8";
}

absl::StatusOr<ToolkitQuantConfig> ParseToolkitQuantConfig(absl::string_view json_text,
                                                           absl::string_view source) {
  SCORED_ASSIGN_OR_RETURN(Json j, json_util::ParseObject(json_text, source));
  ToolkitQuantConfig c;
  c.source = std::string(source);
  const Json* hf_quant = Find(j, "quantization");  // hf_quant_config.json
  if (hf_quant != nullptr && hf_quant->is_object()) {
    SCORED_RETURN_IF_ERROR(ParseModelOpt(*hf_quant, source, &c));
    return c;
  }
  SCORED_ASSIGN_OR_RETURN(std::string method, json_util::GetString(j, "quant_method", source));
  method = absl::AsciiStrToLower(method);
  if (method == "gptq") {
    SCORED_RETURN_IF_ERROR(ParseGptq(j, source, &c));
  } else if (method == "awq") {
    SCORED_RETURN_IF_ERROR(ParseAwq(j, source, &c));
  } else if (method == "modelopt") {
    SCORED_RETURN_IF_ERROR(ParseModelOpt(j, source, &c));
  } else if (method == "fp8") {
    SCORED_RETURN_IF_ERROR(ParseNativeFp8(j, source, &c));
  } else {
    return Unsupported(source, "quant_method", absl::StrCat("'", method, "'"),
                       "supported: compressed-tensors, gptq, awq, modelopt, fp8");
  }
  return c;
}

absl::Status LoadModelOptKvScales(const TensorStore& store, const std::string& attn, TensorView* k_scale,
                                  TensorView* v_scale, std::vector<std::string>* consumed,
                                  TranscodedBuffers* buffers, int* defaulted) {
  for (const char* bias : {".k_proj.k_bias", ".v_proj.v_bias"}) {
    if (store.Has(attn + bias)) {
      return absl::InvalidArgumentError(absl::StrCat(
          attn, bias,
          ": an affine (biased) FP8 K / V cache is not implemented (static per-tensor scales only)"));
    }
  }
  const std::pair<const char*, TensorView*> scales[] = {{".k_proj.k_scale", k_scale},
                                                        {".v_proj.v_scale", v_scale}};
  for (const auto& [suffix, out] : scales) {
    const std::string name = attn + suffix;
    if (store.Has(name)) {
      SCORED_ASSIGN_OR_RETURN(*out, TakeScalarScale(store, name, consumed));
      continue;
    }
    TensorView from;
    *out = NewTensor(from, name + " (not stored: 1.0, ModelOpt's default FP8 K / V scale)", DType::kF32, {1},
                     buffers);
    const float one = 1.0f;
    std::memcpy(const_cast<uint8_t*>(out->data), &one, sizeof(one));
    ++*defaulted;
  }
  return absl::OkStatus();
}

bool ToolkitModuleQuantized(const ToolkitQuantConfig& config, const TensorStore& store,
                            const std::string& module) {
  if (config.method == ToolkitQuantConfig::Method::kModelOptFp8 ||
      config.method == ToolkitQuantConfig::Method::kModelOptNvfp4) {
    return store.Has(module + ".weight_scale");
  }
  if (config.method == ToolkitQuantConfig::Method::kNativeFp8Block)
    return store.Has(module + ".weight_scale_inv");
  return store.Has(module + ".qweight");
}

absl::Status LoadToolkitLinear(const ToolkitQuantConfig& config, const TensorStore& store, LinearWeight* w,
                               std::vector<std::string>* consumed, TranscodedBuffers* buffers) {
  switch (config.method) {
    case ToolkitQuantConfig::Method::kGptq:
      return LoadGptq(config, store, w, consumed, buffers);
    case ToolkitQuantConfig::Method::kAwq:
      return LoadAwq(config, store, w, consumed, buffers);
    case ToolkitQuantConfig::Method::kModelOptFp8:
      return LoadModelOptFp8(store, w, consumed);
    case ToolkitQuantConfig::Method::kModelOptNvfp4:
      return LoadModelOptNvfp4(store, w, consumed, buffers);
    case ToolkitQuantConfig::Method::kNativeFp8Block:
      return LoadNativeFp8(config, store, w, consumed);
  }
  return absl::InternalError("unknown toolkit method");
}

}  // namespace scored

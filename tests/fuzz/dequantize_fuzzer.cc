// Fuzzes LinearWeight::DequantizeRows behind the loader that guards it: each input describes a tiny
// one-layer Llama checkpoint in one compressed-tensors format (pack-quantized 2..8 bits, int-quantized,
// nvfp4, float-quantized; tensor/channel/group/block strategies; symmetric or not; actorder g_idx; scale
// dtype; odd shapes whose packed fields straddle words), optionally with one tensor dropped, retyped,
// reshaped or added; the remaining bytes fill every tensor (scales, zero points, g_idx and codes alike),
// integer tensors sometimes with edge values only (INT32_MIN, INT32_MAX, -1, 0, 1, INT8_MIN, INT8_MAX).
// The checkpoint is written to a scratch folder and loaded with ModelWeights::Load.
//
// Contract checked (engine/model/weights.h): Load either rejects the checkpoint with an error naming the
// problem, or every linear layer decodes all its rows with no sanitizer report (DequantizeRows trusts what
// Load validated: shapes, dtypes, g_idx range), and bad row ranges give OUT_OF_RANGE.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/weights.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Tensor {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  std::string bytes;
};

int64_t DTypeBytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I64") return 8;
  return 1;  // F8_E4M3, I8, U8
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tensor bytes come from the fuzzer's pool, cycled; zeros when the pool is empty.
class Pool {
 public:
  explicit Pool(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  uint8_t Next() {
    if (bytes_.empty()) return 0;
    const uint8_t b = bytes_[pos_];
    pos_ = (pos_ + 1) % bytes_.size();
    return b;
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
};

// Integer tensors (codes, zero points, g_idx) in `extreme` mode hold only edge values, which random
// bytes rarely produce.
bool g_extreme = false;

void Fill(Tensor* t, Pool* pool) {
  int64_t n = DTypeBytes(t->dtype);
  for (int64_t d : t->shape) n *= d;
  t->bytes.resize(static_cast<size_t>(n));
  for (char& c : t->bytes) c = static_cast<char>(pool->Next());
  if (!g_extreme || (t->dtype != "I32" && t->dtype != "I8")) return;
  const int64_t size = DTypeBytes(t->dtype);
  for (size_t i = 0; i + static_cast<size_t>(size) <= t->bytes.size(); i += static_cast<size_t>(size)) {
    const int32_t edges[] = {INT32_MIN, INT32_MAX, -1, 0, 1, INT8_MIN, INT8_MAX};
    int32_t v = edges[pool->Next() % 7];
    if (size == 1) v = static_cast<int8_t>(v == INT32_MIN ? INT8_MIN : v == INT32_MAX ? INT8_MAX : v);
    std::memcpy(&t->bytes[i], &v, static_cast<size_t>(size));
  }
}

std::string Safetensors(const std::vector<Tensor>& tensors) {
  std::vector<std::string> entries;
  int64_t offset = 0;
  std::string body;
  for (const Tensor& t : tensors) {
    entries.push_back(absl::StrCat("\"", t.name, "\":{\"dtype\":\"", t.dtype, "\",\"shape\":[",
                                   absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
                                   offset + static_cast<int64_t>(t.bytes.size()), "]}"));
    offset += static_cast<int64_t>(t.bytes.size());
    body += t.bytes;
  }
  const std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  std::string file(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return file + header + body;
}

enum Format { kPack = 0, kInt = 1, kNvfp4 = 2, kFp8 = 3 };

struct Params {
  Format format = kPack;
  int bits = 4;
  int strategy = 0;  // 0 tensor, 1 channel, 2 group (pack/int) or block (fp8)
  int64_t group_size = 16;
  bool symmetric = true;
  bool actorder = false;
  bool raw_g_idx = false;
  std::string scale_dtype = "BF16";
  std::string zp_dtype = "I32";  // int-quantized only
  int64_t block_rows = 8, block_cols = 8;
  int activations = 0;  // 0 none; nvfp4: 1 W4A4; fp8: 1 per token, 2 per group of 16
  bool quantize_head = false;
  int64_t hidden = 16, head_dim = 8, intermediate = 16, vocab = 8;
};

std::string WeightsJson(const Params& p) {
  switch (p.format) {
    case kPack:
    case kInt: {
      const char* st[] = {"tensor", "channel", "group"};
      return absl::StrCat(
          "{\"type\":\"int\",\"num_bits\":", p.format == kPack ? p.bits : 8,
          ",\"symmetric\":", p.symmetric ? "true" : "false", ",\"strategy\":\"", st[p.strategy],
          "\",\"group_size\":", p.strategy == 2 ? absl::StrCat(p.group_size) : std::string("null"),
          ",\"actorder\":", p.actorder && p.format == kPack ? "\"group\"" : "null", ",\"dynamic\":false}");
    }
    case kNvfp4:
      return "{\"type\":\"float\",\"num_bits\":4,\"symmetric\":true,\"strategy\":\"tensor_group\","
             "\"group_size\":16,\"dynamic\":false}";
    case kFp8: {
      const char* st[] = {"tensor", "channel", "block"};
      return absl::StrCat(
          "{\"type\":\"float\",\"num_bits\":8,\"symmetric\":true,\"strategy\":\"", st[p.strategy],
          "\",\"block_structure\":",
          p.strategy == 2 ? absl::StrCat("[", p.block_rows, ",", p.block_cols, "]") : std::string("null"),
          ",\"dynamic\":false}");
    }
  }
  return "null";
}

std::string ActivationsJson(const Params& p) {
  if (p.format == kNvfp4 && p.activations == 1) {
    return "{\"type\":\"float\",\"num_bits\":4,\"symmetric\":true,\"strategy\":\"tensor_group\","
           "\"group_size\":16,\"dynamic\":\"local\"}";
  }
  if (p.format == kFp8 && p.activations == 1) {
    return "{\"type\":\"float\",\"num_bits\":8,\"symmetric\":true,\"strategy\":\"token\",\"dynamic\":true}";
  }
  if (p.format == kFp8 && p.activations == 2) {
    return "{\"type\":\"float\",\"num_bits\":8,\"symmetric\":true,\"strategy\":\"group\",\"group_size\":16,"
           "\"dynamic\":true}";
  }
  return "null";
}

std::string ConfigJson(const Params& p) {
  const char* formats[] = {"pack-quantized", "int-quantized", "nvfp4-pack-quantized", "float-quantized"};
  const std::string quant = absl::StrCat(
      "{\"quant_method\":\"compressed-tensors\",\"format\":\"", formats[p.format],
      "\",\"quantization_status\":\"compressed\",\"ignore\":", p.quantize_head ? "[]" : "[\"lm_head\"]",
      ",\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"format\":\"", formats[p.format],
      "\",\"weights\":", WeightsJson(p), ",\"input_activations\":", ActivationsJson(p), "}}}");
  return absl::StrCat(
      "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":", p.hidden,
      ",\"intermediate_size\":", p.intermediate,
      ",\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":",
      p.head_dim, ",\"vocab_size\":", p.vocab,
      ",\"max_position_embeddings\":64,\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":false,"
      "\"quantization_config\":",
      quant, "}");
}

// The tensors of one linear layer as compressed-tensors stores them for `p`.
void AddLinear(const Params& p, const std::string& m, int64_t out, int64_t in, Pool* pool,
               std::vector<Tensor>* ts) {
  auto add = [&](const std::string& suffix, const std::string& dtype, std::vector<int64_t> shape) {
    ts->push_back(Tensor{m + "." + suffix, dtype, std::move(shape), {}});
    Fill(&ts->back(), pool);
    return &ts->back();
  };
  std::vector<int64_t> scale_shape = {1};
  int64_t groups = 1;
  if (p.strategy == 1) scale_shape = {out, 1};
  if (p.strategy == 2 && p.format != kFp8) {
    groups = CeilDiv(in, p.group_size);
    scale_shape = {out, groups};
  }
  if (p.strategy == 2 && p.format == kFp8) {
    scale_shape = {CeilDiv(out, p.block_rows), CeilDiv(in, p.block_cols)};
  }
  switch (p.format) {
    case kPack: {
      add("weight_packed", "I32", {out, CeilDiv(in * p.bits, 32)});
      Tensor* shape = add("weight_shape", "I64", {2});
      const int64_t dims[2] = {out, in};
      shape->bytes.assign(reinterpret_cast<const char*>(dims), sizeof(dims));
      add("weight_scale", p.scale_dtype, scale_shape);
      if (!p.symmetric)
        add("weight_zero_point", "I32",
            {CeilDiv(out * p.bits, 32), scale_shape.size() == 2 ? scale_shape[1] : 1});
      if (p.actorder && p.strategy == 2) {
        Tensor* g = add("weight_g_idx", "I32", {in});
        if (!p.raw_g_idx) {
          for (int64_t k = 0; k < in; ++k) {
            const int32_t v =
                static_cast<int32_t>(static_cast<uint8_t>(g->bytes[static_cast<size_t>(4 * k)]) % groups);
            g->bytes.replace(static_cast<size_t>(4 * k), 4, reinterpret_cast<const char*>(&v), 4);
          }
        }
      }
      break;
    }
    case kInt:
      add("weight", "I8", {out, in});
      add("weight_scale", p.scale_dtype, scale_shape);
      if (!p.symmetric) add("weight_zero_point", p.zp_dtype, scale_shape);
      break;
    case kNvfp4:
      add("weight_packed", "U8", {out, in / 2});
      add("weight_scale", "F8_E4M3", {out, in / 16});
      add("weight_global_scale", "F32", {1});
      if (p.activations == 1) add("input_global_scale", "F32", {1});
      break;
    case kFp8:
      add("weight", "F8_E4M3", {out, in});
      add("weight_scale", p.scale_dtype, scale_shape);
      break;
  }
}

std::vector<const scored::LinearWeight*> Linears(const scored::ModelWeights& w) {
  std::vector<const scored::LinearWeight*> out;
  for (const scored::LayerWeights& l : w.layers()) {
    for (const scored::LinearWeight* x :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      out.push_back(x);
    }
  }
  out.push_back(&w.lm_head());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  Params p;
  p.format = static_cast<Format>(fdp.ConsumeIntegralInRange<int>(0, 3));
  p.bits = fdp.ConsumeIntegralInRange<int>(2, 8);
  p.strategy = fdp.ConsumeIntegralInRange<int>(0, 2);
  p.group_size = fdp.PickValueInArray<int64_t>({8, 16, 32});
  p.symmetric = fdp.ConsumeBool();
  p.actorder = fdp.ConsumeBool();
  p.raw_g_idx = fdp.ConsumeBool();
  p.scale_dtype = fdp.PickValueInArray<const char*>({"F32", "F16", "BF16"});
  p.zp_dtype = fdp.PickValueInArray<const char*>({"I8", "I32"});
  p.block_rows = fdp.PickValueInArray<int64_t>({3, 8, 16});
  p.block_cols = fdp.PickValueInArray<int64_t>({3, 8, 16});
  p.activations = fdp.ConsumeIntegralInRange<int>(0, 2);
  p.quantize_head = fdp.ConsumeBool();
  p.hidden = fdp.PickValueInArray<int64_t>({16, 32});
  p.head_dim = fdp.PickValueInArray<int64_t>({8, 16});
  p.intermediate = fdp.PickValueInArray<int64_t>({16, 24, 40});
  p.vocab = fdp.PickValueInArray<int64_t>({8, 13});
  const int perturb = fdp.ConsumeIntegralInRange<int>(0, 15);
  const uint8_t perturb_at = fdp.ConsumeIntegral<uint8_t>();
  g_extreme = fdp.ConsumeIntegralInRange<int>(0, 7) == 7;
  Pool pool(fdp.ConsumeRemainingBytes<uint8_t>());

  std::vector<Tensor> ts;
  auto dense = [&](const std::string& name, std::vector<int64_t> shape) {
    ts.push_back(Tensor{name, "BF16", std::move(shape), {}});
    Fill(&ts.back(), &pool);
  };
  const int64_t h = p.hidden, q_out = 2 * p.head_dim, kv_out = p.head_dim, inter = p.intermediate;
  dense("model.embed_tokens.weight", {p.vocab, h});
  dense("model.norm.weight", {h});
  dense("model.layers.0.input_layernorm.weight", {h});
  dense("model.layers.0.post_attention_layernorm.weight", {h});
  const std::string l = "model.layers.0.";
  AddLinear(p, l + "self_attn.q_proj", q_out, h, &pool, &ts);
  AddLinear(p, l + "self_attn.k_proj", kv_out, h, &pool, &ts);
  AddLinear(p, l + "self_attn.v_proj", kv_out, h, &pool, &ts);
  AddLinear(p, l + "self_attn.o_proj", h, q_out, &pool, &ts);
  AddLinear(p, l + "mlp.gate_proj", inter, h, &pool, &ts);
  AddLinear(p, l + "mlp.up_proj", inter, h, &pool, &ts);
  AddLinear(p, l + "mlp.down_proj", h, inter, &pool, &ts);
  if (p.quantize_head) {
    AddLinear(p, "lm_head", p.vocab, h, &pool, &ts);
  } else {
    dense("lm_head.weight", {p.vocab, h});
  }

  // One hostile edit of the otherwise well-formed checkpoint.
  Tensor& victim = ts[perturb_at % ts.size()];
  switch (perturb) {
    case 1:
      ts.erase(ts.begin() + static_cast<std::ptrdiff_t>(perturb_at % ts.size()));
      break;
    case 2:
      victim.dtype = victim.dtype == "I32" ? "F32" : victim.dtype == "F32" ? "I32" : "I8";
      Fill(&victim, &pool);
      break;
    case 3:
      victim.shape[0] += 1;
      Fill(&victim, &pool);
      break;
    case 4:
      if (victim.shape.back() > 0) victim.shape.back() -= 1;
      Fill(&victim, &pool);
      break;
    case 5:
      victim.shape.push_back(1);
      break;
    case 6:
      ts.push_back(Tensor{"model.layers.0.mlp.extra.weight", "F32", {2}, std::string(8, '\0')});
      break;
    default:
      break;
  }

  const std::string& dir = scored::fuzz::ScratchDir();
  FUZZ_CHECK(scored::fuzz::WriteFile(dir + "/config.json", ConfigJson(p)), dir);
  FUZZ_CHECK(scored::fuzz::WriteFile(dir + "/model.safetensors", Safetensors(ts)), dir);
  absl::StatusOr<std::unique_ptr<scored::ModelWeights>> w = scored::ModelWeights::Load(dir);
  if (!w.ok()) {
    FUZZ_CHECK(scored::fuzz::CodeIsOneOf(w.status(), absl::StatusCode::kInvalidArgument,
                                         absl::StatusCode::kNotFound, absl::StatusCode::kDataLoss),
               w.status().ToString());
    return 0;
  }
  std::vector<float> out;
  for (const scored::LinearWeight* lw : Linears(**w)) {
    out.assign(static_cast<size_t>(lw->NumElements()), 0.0f);  // [out_features, in_features]
    const absl::Status s = lw->DequantizeRows(0, lw->out_features, out.data());
    FUZZ_CHECK(s.ok(), s.ToString());
    const absl::Status half = lw->DequantizeRows(lw->out_features / 2, lw->out_features, out.data());
    FUZZ_CHECK(half.ok(), half.ToString());
    FUZZ_CHECK(
        lw->DequantizeRows(0, lw->out_features + 1, out.data()).code() == absl::StatusCode::kOutOfRange,
        lw->module);
    FUZZ_CHECK(lw->DequantizeRows(-1, 0, out.data()).code() == absl::StatusCode::kOutOfRange, lw->module);
    FUZZ_CHECK(lw->StoredBytes() >= 0, lw->module);
  }
  FUZZ_CHECK(!(*w)->summary().ToString().empty(), "summary");
  return 0;
}

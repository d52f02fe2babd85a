// Tensor-parallel slices and per-rank LinearWeight views (see shard_plan.h for the layout and the rules).
#include "engine/model/shard_plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_quants.h"
#include "engine/model/raw_read.h"

namespace scored {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string SliceText(const LinearWeight& w, const LinearSlice& s) {
  return absl::StrCat(w.module, ": ", ShardKindName(s.kind), " slice [", s.begin, ", ", s.end, ")");
}

// Bytes of one row of a tensor whose first dimension is its rows.
int64_t RowBytes(const TensorView& t) {
  return t.shape.empty() || t.shape[0] == 0 ? 0 : t.nbytes / t.shape[0];
}

// Rows [r0, r1) of t: a view into the same bytes.
TensorView RowsView(const TensorView& t, int64_t r0, int64_t r1) {
  TensorView v = t;
  const int64_t row_bytes = RowBytes(t);
  v.data = t.data + r0 * row_bytes;
  v.shape[0] = r1 - r0;
  v.nbytes = (r1 - r0) * row_bytes;
  return v;
}

// Registers `bytes` as an owned tensor of `s` shaped like `like` with a new shape.
TensorView AddOwned(ShardedLinear* s, const TensorView& like, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes) {
  TensorView t;
  t.name = like.name;
  t.dtype = like.dtype;
  t.shape = std::move(shape);
  t.file = like.file;
  t.nbytes = static_cast<int64_t>(bytes.size());
  s->owned_bytes += t.nbytes;
  s->owned.push_back(std::move(bytes));
  t.data = s->owned.back().data();
  return t;
}

// Columns `cols` (in this order) of a 2-D tensor [rows, cols_total] of fixed-size elements: owned copy.
TensorView GatherColumns(ShardedLinear* s, const TensorView& t, const std::vector<int64_t>& cols) {
  const int64_t rows = t.shape[0];
  const int64_t total = t.shape[1];
  const int64_t esize = DTypeSize(t.dtype);
  const int64_t n = static_cast<int64_t>(cols.size());
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * n * esize));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = t.data + r * total * esize;  // [total] elements
    uint8_t* dst = bytes.data() + r * n * esize;      // [n] elements
    // Runs of consecutive columns are copied at once.
    int64_t j = 0;
    while (j < n) {
      int64_t run = 1;
      while (j + run < n && cols[static_cast<size_t>(j + run)] == cols[static_cast<size_t>(j)] + run) ++run;
      std::memcpy(dst + j * esize, src + cols[static_cast<size_t>(j)] * esize,
                  static_cast<size_t>(run * esize));
      j += run;
    }
  }
  return AddOwned(s, t, {rows, n}, std::move(bytes));
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// ORs the `bits`-wide value v into bit position `bit` of a zero-initialised little-endian word array.
void StorePackedField(uint8_t* words, int64_t bit, int bits, uint32_t v) {
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  const uint64_t field = static_cast<uint64_t>(v) << shift;
  uint32_t w0 = raw_read::Load<uint32_t>(words, word);
  w0 |= static_cast<uint32_t>(field);
  std::memcpy(words + word * 4, &w0, 4);
  if (shift + bits > 32) {
    uint32_t w1 = raw_read::Load<uint32_t>(words, word + 1);
    w1 |= static_cast<uint32_t>(field >> 32);
    std::memcpy(words + (word + 1) * 4, &w1, 4);
  }
}

// weight_packed [out, ceil(in*b/32)] int32: the fields of input columns [c0, c1) of every row, re-packed
// from bit 0 of each row. Word-aligned starts copy words.
TensorView PackedColumns(ShardedLinear* s, const TensorView& packed, int b, int64_t c0, int64_t c1) {
  const int64_t rows = packed.shape[0];
  const int64_t src_words = packed.shape[1];
  const int64_t n = c1 - c0;
  const int64_t dst_words = CeilDiv(n * b, 32);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * dst_words * 4), 0);
  const bool aligned = (c0 * b) % 32 == 0;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = packed.data + r * src_words * 4;  // [src_words] int32
    uint8_t* dst = bytes.data() + r * dst_words * 4;       // [dst_words] int32
    if (aligned) {
      std::memcpy(dst, src + (c0 * b / 32) * 4, static_cast<size_t>(dst_words * 4));
      // The last word may carry fields of columns >= c1: clear them (they are never read, but the
      // shard then holds only its own values).
      const int64_t tail_bits = (n * b) % 32;
      if (tail_bits != 0) {
        uint32_t last = raw_read::Load<uint32_t>(dst, dst_words - 1);
        last &= (uint32_t{1} << tail_bits) - 1;
        std::memcpy(dst + (dst_words - 1) * 4, &last, 4);
      }
      continue;
    }
    for (int64_t k = 0; k < n; ++k) {
      StorePackedField(dst, k * b, b, raw_read::LoadPackedField(src, (c0 + k) * b, b));
    }
  }
  return AddOwned(s, packed, {rows, dst_words}, std::move(bytes));
}

// Field of row o in column g of a zero-point tensor packed along `out`: [ceil(out*b/32), groups] int32,
// column g being a packed word sequence.
uint32_t LoadZpField(const uint8_t* data, int64_t groups, int64_t o, int64_t g, int b) {
  const int64_t bit = o * b;
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  uint64_t v = raw_read::Load<uint32_t>(data, word * groups + g);
  if (shift + b > 32)
    v |= static_cast<uint64_t>(raw_read::Load<uint32_t>(data, (word + 1) * groups + g)) << 32;
  return static_cast<uint32_t>((v >> shift) & ((uint64_t{1} << b) - 1));
}

void StoreZpField(uint8_t* data, int64_t groups, int64_t o, int64_t g, int b, uint32_t v) {
  const int64_t bit = o * b;
  const int64_t word = bit >> 5;
  const int shift = static_cast<int>(bit & 31);
  const uint64_t field = static_cast<uint64_t>(v) << shift;
  uint32_t w0 = raw_read::Load<uint32_t>(data, word * groups + g);
  w0 |= static_cast<uint32_t>(field);
  std::memcpy(data + (word * groups + g) * 4, &w0, 4);
  if (shift + b > 32) {
    uint32_t w1 = raw_read::Load<uint32_t>(data, (word + 1) * groups + g);
    w1 |= static_cast<uint32_t>(field >> 32);
    std::memcpy(data + ((word + 1) * groups + g) * 4, &w1, 4);
  }
}

// Rows [r0, r1) of a zero-point tensor packed along `out`: a view when r0 starts a word, else re-packed.
TensorView PackedZpRows(ShardedLinear* s, const TensorView& zp, int b, int64_t r0, int64_t r1) {
  const int64_t groups = zp.shape[1];
  const int64_t n = r1 - r0;
  const int64_t words = CeilDiv(n * b, 32);
  if ((r0 * b) % 32 == 0) {
    const int64_t w0 = r0 * b / 32;
    return RowsView(zp, w0, w0 + words);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(words * groups * 4), 0);
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      StoreZpField(bytes.data(), groups, o, g, b, LoadZpField(zp.data, groups, r0 + o, g, b));
    }
  }
  return AddOwned(s, zp, {words, groups}, std::move(bytes));
}

bool HasGroupColumns(const LinearWeight& w) {
  return w.strategy == QuantStrategy::kGroup && w.weight_scale.shape.size() == 2;
}

// Row-parallel scale / zero point / g_idx of a group-strategy weight for input columns [c0, c1).
void ShardGroupParams(const LinearWeight& full, int64_t c0, int64_t c1, ShardedLinear* s) {
  LinearWeight& v = s->view;
  std::vector<int64_t> groups;
  if (full.weight_g_idx.present()) {
    std::map<int32_t, int32_t> used;  // global group -> local group, ascending
    for (int64_t k = c0; k < c1; ++k) used.emplace(raw_read::Load<int32_t>(full.weight_g_idx.data, k), 0);
    int32_t next = 0;
    for (auto& [g, local] : used) {
      local = next++;
      groups.push_back(g);
    }
    std::vector<uint8_t> gidx(static_cast<size_t>((c1 - c0) * 4));
    for (int64_t k = c0; k < c1; ++k) {
      const int32_t local = used[raw_read::Load<int32_t>(full.weight_g_idx.data, k)];
      std::memcpy(gidx.data() + (k - c0) * 4, &local, 4);
    }
    v.weight_g_idx = AddOwned(s, full.weight_g_idx, {c1 - c0}, std::move(gidx));
  } else {
    groups = Range(c0 / full.group_size, CeilDiv(c1, full.group_size));
  }
  v.weight_scale = GatherColumns(s, full.weight_scale, groups);
  if (full.weight_zero_point.present())
    v.weight_zero_point = GatherColumns(s, full.weight_zero_point, groups);
}

absl::Status CheckRange(const LinearWeight& w, const LinearSlice& s) {
  const bool rows = s.kind != ShardKind::kRowParallel;
  const int64_t limit = rows ? w.out_features : w.in_features;
  if (s.begin < 0 || s.begin >= s.end || s.end > limit) {
    return absl::OutOfRangeError(absl::StrCat(SliceText(w, s), " is empty or outside [0, ", limit, ") (",
                                              rows ? "out_features" : "in_features", ")"));
  }
  return absl::OkStatus();
}

// A slice [b, e) of a dimension cut in blocks of `block` elements is expressible when it starts on a
// block boundary (local index i maps to block b/block + i/block) or lies inside one block.
bool BlockAligned(int64_t b, int64_t e, int64_t block) {
  return b % block == 0 || b / block == (e - 1) / block;
}

}  // namespace

const char* ShardKindName(ShardKind kind) {
  switch (kind) {
    case ShardKind::kReplicated:
      return "replicated";
    case ShardKind::kColumnParallel:
      return "column-parallel";
    case ShardKind::kRowParallel:
      return "row-parallel";
    case ShardKind::kVocabParallel:
      return "vocab-parallel";
  }
  return "?";
}

absl::StatusOr<ShardPlan> ShardPlan::Create(const ModelConfig& c, int tp_size, int tp_rank) {
  if (tp_size < 1) return absl::InvalidArgumentError(absl::StrCat("tp ", tp_size, " must be >= 1"));
  if (tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(absl::StrCat("tp rank ", tp_rank, " outside [0, ", tp_size, ")"));
  }
  // The layout below is that of the dense Llama block; a family whose blocks it does not describe (experts,
  // ...) says so in its traits. A hand-built config without a family is the Llama layout.
  if (tp_size > 1 && c.family != nullptr && !c.family->tensor_parallel) {
    return absl::UnimplementedError(
        absl::StrCat("tensor parallelism is not implemented for ", c.family->architecture));
  }
  const int64_t tp = tp_size, r = tp_rank;
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.intermediate_size <= 0 ||
      c.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "model config has a non-positive head count, head_dim, "
        "intermediate_size or vocab_size");
  }
  if (c.num_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads ", c.num_heads, " is not divisible by tp ", tp));
  }
  if (c.num_kv_heads >= tp && c.num_kv_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_key_value_heads ", c.num_kv_heads, " is not divisible by tp ", tp));
  }
  if (c.num_kv_heads < tp && tp % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tp ", tp, " is not a multiple of num_key_value_heads ",
                                                   c.num_kv_heads, " (needed to replicate kv heads)"));
  }
  if (c.intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("intermediate_size ", c.intermediate_size, " is not divisible by tp ", tp));
  }
  if (c.moe() && c.moe_intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.family != nullptr && c.family->moe.policy == MoePolicy::kMixtral ? "intermediate_size "
                                                                           : "moe_intermediate_size ",
        c.moe_intermediate_size, " (each expert's) is not divisible by tp ", tp));
  }
  if (c.shared_expert_intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared_expert_intermediate_size ",
                                                   c.shared_expert_intermediate_size,
                                                   " is not divisible by tp ", tp));
  }
  ShardPlan p;
  p.tp_size = tp_size;
  p.tp_rank = tp_rank;
  p.vocab_size = c.vocab_size;
  p.vocab_per_rank = CeilDiv(c.vocab_size, tp);
  if ((tp - 1) * p.vocab_per_rank >= c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", c.vocab_size, " leaves a rank of tp ", tp, " without vocabulary rows"));
  }
  const int64_t d = c.head_dim;
  p.num_heads_local = c.num_heads / tp;
  p.q_head_begin = r * p.num_heads_local;
  if (c.num_kv_heads >= tp) {
    p.num_kv_heads_local = c.num_kv_heads / tp;
    p.kv_head_begin = r * p.num_kv_heads_local;
    p.kv_replicas = 1;
  } else {
    p.num_kv_heads_local = 1;
    p.kv_replicas = tp / c.num_kv_heads;
    p.kv_head_begin = r / p.kv_replicas;
  }
  p.intermediate_local = c.intermediate_size / tp;
  const int64_t q0 = p.q_head_begin * d, q1 = q0 + p.num_heads_local * d;
  const int64_t k0 = p.kv_head_begin * d, k1 = k0 + p.num_kv_heads_local * d;
  const int64_t i0 = r * p.intermediate_local, i1 = i0 + p.intermediate_local;
  p.q = {ShardKind::kColumnParallel, q0, q1};
  p.k = {ShardKind::kColumnParallel, k0, k1};
  p.v = {ShardKind::kColumnParallel, k0, k1};
  p.o = {ShardKind::kRowParallel, q0, q1};
  p.gate = {ShardKind::kColumnParallel, i0, i1};
  p.up = {ShardKind::kColumnParallel, i0, i1};
  p.down = {ShardKind::kRowParallel, i0, i1};
  p.moe_intermediate_local = c.moe_intermediate_size / tp;
  p.shared_intermediate_local = c.shared_expert_intermediate_size / tp;
  const int64_t e0 = r * p.moe_intermediate_local, e1 = e0 + p.moe_intermediate_local;
  const int64_t s0 = r * p.shared_intermediate_local, s1 = s0 + p.shared_intermediate_local;
  p.router = {ShardKind::kReplicated, 0, c.num_experts};
  p.expert_gate = {ShardKind::kColumnParallel, e0, e1};
  p.expert_up = {ShardKind::kColumnParallel, e0, e1};
  p.expert_down = {ShardKind::kRowParallel, e0, e1};
  p.shared_gate = {ShardKind::kColumnParallel, s0, s1};
  p.shared_up = {ShardKind::kColumnParallel, s0, s1};
  p.shared_down = {ShardKind::kRowParallel, s0, s1};
  p.shared_expert_gate = {ShardKind::kReplicated, 0, 1};
  p.delta_net = {ShardKind::kReplicated, 0, 0};
  p.vocab_begin = r * p.vocab_per_rank;
  p.vocab_end = std::min(p.vocab_begin + p.vocab_per_rank, c.vocab_size);
  p.lm_head = {ShardKind::kVocabParallel, p.vocab_begin, p.vocab_end};
  if (tp == 1) {
    for (LinearSlice* s : {&p.q, &p.k, &p.v, &p.o, &p.gate, &p.up, &p.down, &p.lm_head, &p.expert_gate,
                           &p.expert_up, &p.expert_down, &p.shared_gate, &p.shared_up, &p.shared_down}) {
      s->kind = ShardKind::kReplicated;
    }
  }
  return p;
}

const LinearSlice& ShardPlan::ForLinear(LinearRole role) const {
  switch (role) {
    case LinearRole::kQ:
      return q;
    case LinearRole::kK:
      return k;
    case LinearRole::kV:
      return v;
    case LinearRole::kO:
      return o;
    case LinearRole::kGate:
      return gate;
    case LinearRole::kUp:
      return up;
    case LinearRole::kDown:
      return down;
    case LinearRole::kLmHead:
      return lm_head;
    case LinearRole::kRouter:
      return router;
    case LinearRole::kExpertGate:
      return expert_gate;
    case LinearRole::kExpertUp:
      return expert_up;
    case LinearRole::kExpertDown:
      return expert_down;
    case LinearRole::kSharedGate:
      return shared_gate;
    case LinearRole::kSharedUp:
      return shared_up;
    case LinearRole::kSharedDown:
      return shared_down;
    case LinearRole::kSharedExpertGate:
      return shared_expert_gate;
    case LinearRole::kDeltaQkv:
    case LinearRole::kDeltaZ:
    case LinearRole::kDeltaB:
    case LinearRole::kDeltaA:
    case LinearRole::kDeltaOut:
    case LinearRole::kLatentQA:
    case LinearRole::kLatentQB:
    case LinearRole::kLatentKvA:
    case LinearRole::kLatentKvB:
      return delta_net;  // replicated: families with these refuse --tp > 1 (FamilyTraits::tensor_parallel)
  }
  return lm_head;
}

absl::Status CheckShardable(const LinearWeight& w, const LinearSlice& s, int tp_rank) {
  (void)tp_rank;
  if (s.kind == ShardKind::kReplicated) return absl::OkStatus();
  SCORED_RETURN_IF_ERROR(CheckRange(w, s));
  if (s.kind != ShardKind::kRowParallel) {
    if (w.strategy == QuantStrategy::kBlock && w.format != WeightFormat::kDense &&
        !BlockAligned(s.begin, s.end, w.block_rows)) {
      return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), " of out_features ", w.out_features,
                                                     " crosses a ", w.block_rows,
                                                     "-row scale block without starting on one"));
    }
    return absl::OkStatus();
  }
  // Row-parallel.
  const bool at_end = s.end == w.in_features;
  switch (w.format) {
    case WeightFormat::kDense:
      return absl::OkStatus();
    case WeightFormat::kGgmlBlocks: {  // whole blocks per rank
      const GgmlTypeInfo* t = FindGgmlType(w.ggml_type);
      const int64_t b = t != nullptr ? t->block_size : 1;
      if (s.begin % b != 0 || s.end % b != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(SliceText(w, s), ": the split of in_features ", w.in_features, " is not on a ",
                         GgufTypeName(w.ggml_type), " block boundary (", b, " columns)"));
      }
      return absl::OkStatus();
    }
    case WeightFormat::kPackQuantized:
    case WeightFormat::kNaiveQuantized:
      if (HasGroupColumns(w) && !w.weight_g_idx.present() &&
          (s.begin % w.group_size != 0 || (!at_end && s.end % w.group_size != 0))) {
        return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), ": the split of in_features ",
                                                       w.in_features, " is not on a multiple of group_size ",
                                                       w.group_size));
      }
      return absl::OkStatus();
    case WeightFormat::kMxfp4PackQuantized:
      if (s.begin % 32 != 0 || s.end % 32 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), ": the split of in_features ",
                                                       w.in_features,
                                                       " is not on a multiple of 32 "
                                                       "(one mxfp4 scale per 32 columns)"));
      }
      return absl::OkStatus();
    case WeightFormat::kNvfp4PackQuantized:
      if (s.begin % 16 != 0 || s.end % 16 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), ": the split of in_features ",
                                                       w.in_features,
                                                       " is not on a multiple of 16 "
                                                       "(one nvfp4 scale per 16 columns)"));
      }
      return absl::OkStatus();
    case WeightFormat::kFloatQuantized:
      if (w.strategy == QuantStrategy::kBlock && !BlockAligned(s.begin, s.end, w.block_cols)) {
        return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), " of in_features ", w.in_features,
                                                       " crosses a ", w.block_cols,
                                                       "-column scale block without starting on one"));
      }
      if (w.w8a8_dynamic_fp8 && w.act_group_size > 0 &&
          (s.begin % w.act_group_size != 0 || (!at_end && s.end % w.act_group_size != 0))) {
        return absl::InvalidArgumentError(absl::StrCat(SliceText(w, s), ": the split of in_features ",
                                                       w.in_features, " is not on a multiple of the ",
                                                       w.act_group_size, "-column activation scale group"));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardedLinear> ShardLinear(const LinearWeight& full, const LinearSlice& slice, int tp_rank) {
  SCORED_RETURN_IF_ERROR(CheckShardable(full, slice, tp_rank));
  ShardedLinear s;
  s.slice = slice;
  s.view = full;
  LinearWeight& v = s.view;
  if (slice.kind == ShardKind::kReplicated) return s;

  if (slice.kind != ShardKind::kRowParallel) {
    // Output rows [r0, r1): every per-row tensor is a contiguous run of rows.
    const int64_t r0 = slice.begin, r1 = slice.end;
    v.out_features = r1 - r0;
    if (full.bias.present()) v.bias = RowsView(full.bias, r0, r1);
    switch (full.format) {
      case WeightFormat::kDense:
        v.weight = RowsView(full.weight, r0, r1);
        break;
      case WeightFormat::kPackQuantized:
        v.weight_packed = RowsView(full.weight_packed, r0, r1);
        if (full.strategy != QuantStrategy::kTensor) v.weight_scale = RowsView(full.weight_scale, r0, r1);
        if (full.weight_zero_point.present()) {
          v.weight_zero_point = PackedZpRows(&s, full.weight_zero_point, full.num_bits, r0, r1);
        }
        break;
      case WeightFormat::kNaiveQuantized:
        v.weight = RowsView(full.weight, r0, r1);
        if (full.strategy != QuantStrategy::kTensor) {
          v.weight_scale = RowsView(full.weight_scale, r0, r1);
          if (full.weight_zero_point.present())
            v.weight_zero_point = RowsView(full.weight_zero_point, r0, r1);
        }
        break;
      case WeightFormat::kNvfp4PackQuantized:
      case WeightFormat::kMxfp4PackQuantized:
        v.weight_packed = RowsView(full.weight_packed, r0, r1);
        v.weight_scale = RowsView(full.weight_scale, r0, r1);
        break;
      case WeightFormat::kGgmlBlocks:
        v.weight_packed = RowsView(full.weight_packed, r0, r1);
        break;
      case WeightFormat::kFloatQuantized:
        v.weight = RowsView(full.weight, r0, r1);
        if (full.strategy == QuantStrategy::kChannel) v.weight_scale = RowsView(full.weight_scale, r0, r1);
        if (full.strategy == QuantStrategy::kBlock) {
          v.weight_scale = RowsView(full.weight_scale, r0 / full.block_rows, (r1 - 1) / full.block_rows + 1);
        }
        break;
    }
    return s;
  }

  // Row-parallel: input columns [c0, c1) of every row, copied.
  const int64_t c0 = slice.begin, c1 = slice.end;
  v.in_features = c1 - c0;
  s.adds_bias = tp_rank == 0;
  if (!s.adds_bias) v.bias = TensorView();
  switch (full.format) {
    case WeightFormat::kDense:
      v.weight = GatherColumns(&s, full.weight, Range(c0, c1));
      break;
    case WeightFormat::kPackQuantized:
      v.weight_packed = PackedColumns(&s, full.weight_packed, full.num_bits, c0, c1);
      if (HasGroupColumns(full)) ShardGroupParams(full, c0, c1, &s);
      break;
    case WeightFormat::kNaiveQuantized:
      v.weight = GatherColumns(&s, full.weight, Range(c0, c1));
      if (HasGroupColumns(full)) ShardGroupParams(full, c0, c1, &s);
      s.act_amax_all_reduce = full.w8a8_dynamic_int8;  // int8 activations: the token's range over all ranks
      break;
    case WeightFormat::kNvfp4PackQuantized:
      v.weight_packed = GatherColumns(&s, full.weight_packed, Range(c0 / 2, c1 / 2));
      v.weight_scale = GatherColumns(&s, full.weight_scale, Range(c0 / 16, c1 / 16));
      break;
    case WeightFormat::kMxfp4PackQuantized:
      v.weight_packed = GatherColumns(&s, full.weight_packed, Range(c0 / 2, c1 / 2));
      v.weight_scale = GatherColumns(&s, full.weight_scale, Range(c0 / 32, c1 / 32));
      break;
    case WeightFormat::kGgmlBlocks: {  // whole blocks (CheckSlice): their bytes
      const GgmlTypeInfo* t = FindGgmlType(full.ggml_type);
      v.weight_packed =
          GatherColumns(&s, full.weight_packed,
                        Range(c0 / t->block_size * t->type_size, c1 / t->block_size * t->type_size));
      break;
    }
    case WeightFormat::kFloatQuantized:
      v.weight = GatherColumns(&s, full.weight, Range(c0, c1));
      if (full.strategy == QuantStrategy::kBlock) {
        v.weight_scale =
            GatherColumns(&s, full.weight_scale, Range(c0 / full.block_cols, (c1 - 1) / full.block_cols + 1));
      }
      s.act_amax_all_reduce = full.w8a8_dynamic_fp8 && full.act_group_size == 0;
      break;
  }
  return s;
}

absl::StatusOr<TensorView> ShardEmbedding(const TensorView& embed, const ShardPlan& plan) {
  if (embed.shape.size() != 2 || embed.shape[0] != plan.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding '", embed.name, "' is not [vocab_size ", plan.vocab_size, ", hidden]"));
  }
  return RowsView(embed, plan.vocab_begin, plan.vocab_end);
}

ModelConfig LocalConfig(const ModelConfig& config, const ShardPlan& plan) {
  ModelConfig local = config;
  local.num_heads = plan.num_heads_local;
  local.num_kv_heads = plan.num_kv_heads_local;
  local.intermediate_size = plan.intermediate_local;
  local.moe_intermediate_size = plan.moe_intermediate_local;
  local.shared_expert_intermediate_size = plan.shared_intermediate_local;
  local.vocab_size = plan.vocab_per_rank;
  return local;
}

absl::Status ValidateTensorParallel(const ModelWeights& weights, int tp_size) {
  for (int r = 0; r < tp_size; ++r) {
    SCORED_ASSIGN_OR_RETURN(const ShardPlan plan, ShardPlan::Create(weights.config(), tp_size, r));
    for (const LayerWeights& l : weights.layers()) {
      absl::Status status;
      ForEachLinear(l, [&](const LinearWeight& w, LinearRole role) {
        if (status.ok()) status = CheckShardable(w, plan.ForLinear(role), r);
      });
      SCORED_RETURN_IF_ERROR(status);
    }
    SCORED_RETURN_IF_ERROR(CheckShardable(weights.lm_head(), plan.lm_head, r));
  }
  return absl::OkStatus();
}

}  // namespace scored

#include "tierkv/sequence.h"

#include <cstring>
#include <string>

#include "kernels/fp16.h"

namespace tierkv {

Sequence::Sequence(const ModelConfig& c, int next_position, KvDType dtype)
    : layers_(c.n_layers),
      heads_(c.n_kv_heads),
      head_dim_(c.head_dim()),
      pos_(next_position),
      dtype_(dtype),
      slots_(static_cast<size_t>(c.n_layers) * c.n_kv_heads) {}

uint64_t Sequence::bytes() const {
  uint64_t b = 0;
  for (const Rows& r : slots_) b += r.k.size() + r.v.size() + r.pos.size() * sizeof(int32_t);
  return b;
}

void Sequence::Reserve(size_t rows) {
  const size_t row_bytes = static_cast<size_t>(head_dim_) * KvDTypeSize(dtype_);
  for (Rows& r : slots_) {
    r.k.reserve(rows * row_bytes);
    r.v.reserve(rows * row_bytes);
    r.pos.reserve(rows);
  }
}

namespace {

// Appends `count` rows of `hd` elements of `from` (row i at src + i*stride
// elements; stride 0: hd) to `dst` as elements of `to`.
void AppendRows(const void* src, KvDType from, size_t count, size_t stride, int hd, KvDType to,
                std::vector<uint8_t>* dst) {
  const size_t n = static_cast<size_t>(hd);
  if (stride == 0) stride = n;
  const size_t in_size = KvDTypeSize(from), out_size = KvDTypeSize(to);
  const size_t at = dst->size();
  dst->resize(at + count * n * out_size);
  uint8_t* out = dst->data() + at;
  const auto* in = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; ++i, out += n * out_size, in += stride * in_size) {
    if (from == to) {
      std::memcpy(out, in, n * out_size);
    } else if (to == KvDType::kF16) {
      kernels::FloatToHalfN(reinterpret_cast<const float*>(in), reinterpret_cast<uint16_t*>(out), n);
    } else {
      kernels::HalfToFloatN(reinterpret_cast<const uint16_t*>(in), reinterpret_cast<float*>(out), n);
    }
  }
}

}  // namespace

Status Sequence::AddPrefix(int layer, const LayerPrefix& prefix) {
  if (layer < 0 || layer >= layers_) return Status::InvalidArgument("sequence: layer " + std::to_string(layer));
  if (prefix.heads.empty()) return Status::Ok();
  if (static_cast<int>(prefix.heads.size()) != heads_) {
    return Status::InvalidArgument("sequence: layer " + std::to_string(layer) + " has " +
                                   std::to_string(prefix.heads.size()) + " heads, the model " +
                                   std::to_string(heads_));
  }
  for (int h = 0; h < heads_; ++h) {
    const KvRows& in = prefix.heads[h];
    Rows& r = Slot(layer, h);
    AppendRows(in.k, in.dtype, in.count, in.k_stride, head_dim_, dtype_, &r.k);
    AppendRows(in.v, in.dtype, in.count, in.v_stride, head_dim_, dtype_, &r.v);
    for (size_t i = 0; i < in.count; ++i) {
      r.pos.push_back(in.positions ? in.positions[i] : static_cast<int32_t>(i));
    }
  }
  return Status::Ok();
}

Status Sequence::AddComputed(std::span<const PrefillResult::LayerKv> kv, KvDType dtype, int n_tokens,
                             int first_position) {
  if (static_cast<int>(kv.size()) != layers_) {
    return Status::InvalidArgument("sequence: computed K/V of " + std::to_string(kv.size()) +
                                   " layers, the model has " + std::to_string(layers_));
  }
  const size_t kvd = static_cast<size_t>(heads_) * head_dim_;
  const size_t es = KvDTypeSize(dtype);
  for (int l = 0; l < layers_; ++l) {
    if (kv[l].k.size() != n_tokens * kvd * es || kv[l].v.size() != n_tokens * kvd * es) {
      return Status::InvalidArgument("sequence: layer " + std::to_string(l) + "'s computed K/V size");
    }
    for (int h = 0; h < heads_; ++h) {
      Rows& r = Slot(l, h);
      const size_t off = static_cast<size_t>(h) * head_dim_ * es;
      AppendRows(kv[l].k.data() + off, dtype, n_tokens, kvd, head_dim_, dtype_, &r.k);
      AppendRows(kv[l].v.data() + off, dtype, n_tokens, kvd, head_dim_, dtype_, &r.v);
      for (int i = 0; i < n_tokens; ++i) r.pos.push_back(first_position + i);
    }
  }
  return Status::Ok();
}

PrefillOptions Sequence::StepOptions() const {
  PrefillOptions po;
  po.start_pos = pos_;
  po.capture_kv = true;
  po.kv_dtype = dtype_;
  po.logits = LogitsMode::kLast;
  po.before_attention = [this](const LayerView& v, LayerPrefix* p) -> Status {
    bool any = false;
    for (int h = 0; h < heads_; ++h) any = any || !Slot(v.layer, h).pos.empty();
    if (!any) return Status::Ok();  // nothing before these tokens: no prefix
    p->heads.resize(heads_);
    for (int h = 0; h < heads_; ++h) {
      const Rows& r = Slot(v.layer, h);
      p->heads[h] = KvRows{r.k.data(), r.v.data(), dtype_, r.pos.size(), 0, 0, r.pos.data()};
    }
    return Status::Ok();
  };
  return po;
}

Result<std::vector<float>> Sequence::Step(const Model& model, std::span<const int32_t> tokens) {
  ASSIGN_OR_RETURN(PrefillResult r, model.Prefill(tokens, StepOptions()));
  RETURN_IF_ERROR(AddComputed(r.kv, r.kv_dtype, r.n_tokens, pos_));
  pos_ += r.n_tokens;
  return std::move(r.logits);
}

Result<std::vector<std::vector<float>>> Sequence::StepBatch(const Model& model,
                                                           std::span<Sequence* const> seqs,
                                                           std::span<const int32_t> tokens) {
  if (seqs.size() != tokens.size()) {
    return Status::InvalidArgument("step batch: " + std::to_string(seqs.size()) + " sequences, " +
                                   std::to_string(tokens.size()) + " tokens");
  }
  std::vector<BatchItem> items(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) items[i] = {tokens.subspan(i, 1), seqs[i]->StepOptions()};
  ASSIGN_OR_RETURN(std::vector<PrefillResult> r, model.PrefillBatch(items));
  std::vector<std::vector<float>> logits(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    RETURN_IF_ERROR(seqs[i]->AddComputed(r[i].kv, r[i].kv_dtype, r[i].n_tokens, seqs[i]->pos_));
    seqs[i]->pos_ += r[i].n_tokens;
    logits[i] = std::move(r[i].logits);
  }
  return logits;
}

}  // namespace tierkv

// The step message of tensor parallelism and the two sides that use it (see model_runner.h):
// rank 0 sends, then runs; a follower receives, then runs the same call.
#include "engine/model_runner.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "kv/paged_kv_attention.h"

namespace mimo {
namespace {

enum class TpOp : int32_t { kStop = 0, kForward = 1, kMtpForward = 2 };

// What rank 0 sends before each step; followers mirror its model calls exactly.
struct TpCommand {
  TpOp op = TpOp::kStop;
  uint64_t kv_id = 0;            // which of rank 0's caches
  std::vector<int64_t> kv_spec;  // its KvCacheSpec (a follower builds storage on first sight)
  std::vector<int64_t> kv_plan;  // the step's KvStepPlan
  std::vector<int32_t> tokens;   // [T]
  std::vector<int> logit_rows;   // empty: every row
  bool want_logits = false;
  int mtp_index = 0;         // kMtpForward
  std::vector<float> hprev;  // kMtpForward: [T, hidden]
};

// ---- KvCacheSpec and KvStepPlan as words.
constexpr int64_t kSpecVersion = 2;

std::vector<int64_t> EncodeSpec(const KvCacheSpec& s) {
  const PagedKvOptions& o = s.options;
  int32_t scale_bits = 0;
  std::memcpy(&scale_bits, &o.fp8_scale, sizeof scale_bits);
  std::vector<int64_t> w = {kSpecVersion,
                            s.num_layers,
                            o.block_size,
                            static_cast<int64_t>(o.kv_dtype),
                            static_cast<int64_t>(o.fp8_scale_mode),
                            scale_bits,
                            o.strict_backend,
                            s.num_full_blocks,
                            s.num_swa_blocks,
                            s.num_mtp_blocks,
                            static_cast<int64_t>(o.attention_backend.size())};
  for (char c : o.attention_backend) w.push_back(c);
  return w;
}

StatusOr<KvCacheSpec> DecodeSpec(const std::vector<int64_t>& w) {
  if (w.size() < 11 || w[0] != kSpecVersion || w.size() != 11 + static_cast<size_t>(w[10])) {
    return InvalidArgument("malformed KV cache spec from rank 0");
  }
  KvCacheSpec s;
  PagedKvOptions& o = s.options;
  s.num_layers = static_cast<int>(w[1]);
  o.block_size = static_cast<int>(w[2]);
  o.kv_dtype = static_cast<DType>(w[3]);
  o.fp8_scale_mode = static_cast<Fp8ScaleMode>(w[4]);
  const int32_t scale_bits = static_cast<int32_t>(w[5]);
  std::memcpy(&o.fp8_scale, &scale_bits, sizeof scale_bits);
  o.strict_backend = w[6] != 0;
  s.num_full_blocks = w[7];
  s.num_swa_blocks = w[8];
  s.num_mtp_blocks = w[9];
  for (int64_t i = 0; i < w[10]; ++i) o.attention_backend.push_back(static_cast<char>(w[11 + i]));
  return s;
}

std::vector<int64_t> EncodePlan(const KvStepPlan& p) {
  std::vector<int64_t> w = {p.batch.num_tokens, static_cast<int64_t>(p.batch.chunks.size())};
  for (const SequenceChunk& c : p.batch.chunks) {
    w.insert(w.end(), {c.seq_id, c.token_begin, c.num_tokens, c.start_pos});
  }
  w.push_back(static_cast<int64_t>(p.groups.size()));
  for (const KvGroupStep& g : p.groups) {
    w.insert(w.end(), g.slots.begin(), g.slots.end());
    w.push_back(static_cast<int64_t>(g.attention.seqs.size()));
    for (const AttentionSequence& s : g.attention.seqs) {
      w.insert(w.end(),
               {s.query_begin, s.num_queries, s.start_pos, s.table_begin, s.num_table_blocks});
    }
    w.push_back(static_cast<int64_t>(g.attention.block_tables.size()));
    w.insert(w.end(), g.attention.block_tables.begin(), g.attention.block_tables.end());
  }
  return w;
}

StatusOr<KvStepPlan> DecodePlan(const std::vector<int64_t>& w) {
  size_t i = 0;
  bool short_read = false;
  auto next = [&]() -> int64_t {
    if (i < w.size()) return w[i++];
    short_read = true;
    return 0;
  };
  // A count read from the message, bounded by the words left (a corrupt count fails, no
  // allocation of its size).
  auto count = [&](int64_t per_item) -> int64_t {
    const int64_t n = next();
    if (n < 0 || n * per_item > static_cast<int64_t>(w.size() - i)) short_read = true;
    return short_read ? 0 : n;
  };
  KvStepPlan p;
  p.batch.num_tokens = static_cast<int>(count(1));  // each group has a slot per row
  p.batch.chunks.resize(count(4));
  for (SequenceChunk& c : p.batch.chunks) {
    c.seq_id = static_cast<int>(next());
    c.token_begin = static_cast<int>(next());
    c.num_tokens = static_cast<int>(next());
    c.start_pos = static_cast<int>(next());
  }
  p.groups.resize(count(1));
  for (KvGroupStep& g : p.groups) {
    g.slots.resize(short_read ? 0 : p.batch.num_tokens);
    for (int64_t& s : g.slots) s = next();
    g.attention.num_tokens = p.batch.num_tokens;
    g.attention.seqs.resize(count(5));
    for (AttentionSequence& s : g.attention.seqs) {
      s.query_begin = static_cast<int>(next());
      s.num_queries = static_cast<int>(next());
      s.start_pos = static_cast<int>(next());
      s.table_begin = static_cast<int>(next());
      s.num_table_blocks = static_cast<int>(next());
    }
    g.attention.block_tables.resize(count(1));
    for (int32_t& b : g.attention.block_tables) b = static_cast<int32_t>(next());
  }
  if (short_read || i != w.size()) return InvalidArgument("malformed step plan from rank 0");
  return p;
}

// ---- the message: one header broadcast (sizes), then one payload broadcast.
struct Header {
  int32_t op = 0, num_tokens = 0, num_logit_rows = 0, want_logits = 0, mtp_index = 0, pad = 0;
  int64_t kv_id = 0, num_spec = 0, num_plan = 0, num_hprev = 0, payload_bytes = 0;
};

class Writer {
 public:
  template <typename T>
  void Put(const std::vector<T>& v) {
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    bytes.insert(bytes.end(), b, b + v.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  void Get(std::vector<T>* v, int64_t n) {
    v->resize(n);
    std::memcpy(v->data(), b_.data() + off_, n * sizeof(T));
    off_ += n * sizeof(T);
  }

 private:
  const std::vector<uint8_t>& b_;
  size_t off_ = 0;
};

void Send(Communicator& comm, const TpCommand& c) {
  Header h;
  h.op = static_cast<int32_t>(c.op);
  h.num_tokens = static_cast<int32_t>(c.tokens.size());
  h.num_logit_rows = static_cast<int32_t>(c.logit_rows.size());
  h.want_logits = c.want_logits;
  h.mtp_index = c.mtp_index;
  h.kv_id = static_cast<int64_t>(c.kv_id);
  h.num_spec = static_cast<int64_t>(c.kv_spec.size());
  h.num_plan = static_cast<int64_t>(c.kv_plan.size());
  h.num_hprev = static_cast<int64_t>(c.hprev.size());
  Writer w;
  w.Put(c.kv_spec);
  w.Put(c.kv_plan);
  w.Put(c.tokens);
  w.Put(c.logit_rows);
  w.Put(c.hprev);
  h.payload_bytes = static_cast<int64_t>(w.bytes.size());
  comm.Broadcast(&h, sizeof h, 0, "step header");
  if (h.payload_bytes > 0) comm.Broadcast(w.bytes.data(), w.bytes.size(), 0, "step plan");
}

TpCommand Receive(Communicator& comm) {
  Header h;
  comm.Broadcast(&h, sizeof h, 0, "next step", /*idle=*/true);
  std::vector<uint8_t> bytes(h.payload_bytes);
  if (h.payload_bytes > 0) comm.Broadcast(bytes.data(), bytes.size(), 0, "step plan");
  TpCommand c;
  c.op = static_cast<TpOp>(h.op);
  c.kv_id = static_cast<uint64_t>(h.kv_id);
  c.want_logits = h.want_logits != 0;
  c.mtp_index = h.mtp_index;
  Reader r(bytes);
  r.Get(&c.kv_spec, h.num_spec);
  r.Get(&c.kv_plan, h.num_plan);
  r.Get(&c.tokens, h.num_tokens);
  r.Get(&c.logit_rows, h.num_logit_rows);
  r.Get(&c.hprev, h.num_hprev);
  return c;
}

// Rank 0: the step goes to the followers before rank 0 runs it.
void LeadStep(MimoV2Model& model, TpOp op, const KvCache& cache, const KvStepPlan& plan,
              const int32_t* tokens, const std::vector<int>& logit_rows, bool want_logits,
              int mtp_index, const float* hprev) {
  TpCommand c;
  c.op = op;
  c.kv_id = cache.id();
  c.kv_spec = EncodeSpec(cache.spec());
  c.kv_plan = EncodePlan(plan);
  c.tokens.assign(tokens, tokens + plan.batch.num_tokens);
  c.logit_rows = logit_rows;
  c.want_logits = want_logits;
  c.mtp_index = mtp_index;
  if (hprev) {
    c.hprev.assign(hprev, hprev + int64_t{plan.batch.num_tokens} * model.config().hidden_size);
  }
  Send(*model.communicator(), c);
}

}  // namespace

void RunForward(MimoV2Model& model, ExecContext& ctx, KvCache& cache, const KvStepPlan& plan,
                const int32_t* tokens, const ForwardOutputs& out) {
  if (model.tp_leader()) {
    LeadStep(model, TpOp::kForward, cache, plan, tokens, out.logit_rows, out.logits != nullptr, 0,
             nullptr);
  }
  model.Forward(ctx, plan, tokens, cache.attention(), out);
}

void RunMtpForward(MimoV2Model& model, ExecContext& ctx, int mtp_layer, KvCache& cache,
                   const KvStepPlan& plan, const float* hprev, const int32_t* tokens,
                   const MtpOutputs& out) {
  if (model.tp_leader()) {
    MIMO_CHECK(out.head == nullptr,
               "tensor parallel: MTP logits over a draft vocabulary are not supported");
    LeadStep(model, TpOp::kMtpForward, cache, plan, tokens, out.logit_rows, out.logits != nullptr,
             mtp_layer, hprev);
  }
  model.MtpForward(ctx, mtp_layer, plan, hprev, tokens, cache.attention(), out);
}

void StopTpFollowers(MimoV2Model& model) {
  if (!model.tp_leader()) return;
  TpCommand c;
  c.op = TpOp::kStop;
  Send(*model.communicator(), c);
}

Status RunTpFollower(MimoV2Model& model, ExecContext& ctx) {
  Communicator* comm = model.communicator();
  if (!comm || comm->leader()) return Internal("RunTpFollower on rank 0 or without MPI");
  std::map<uint64_t, std::unique_ptr<PagedKvAttention>> caches;  // by rank 0's cache id
  std::vector<float> logits;
  const int64_t V = model.config().vocab_size;
  // The storage of rank 0's cache c.kv_id (built on first sight) and the step's plan.
  auto step = [&](const TpCommand& c, KvStepPlan* plan) -> PagedKvAttention& {
    auto it = caches.find(c.kv_id);
    if (it == caches.end()) {
      auto spec = DecodeSpec(c.kv_spec);
      if (!spec.ok()) comm->Abort(2, spec.status().message());
      ModelConfig kc = model.config();
      kc.layers = model.KvLayerConfigs();
      if (spec->num_layers > static_cast<int>(kc.layers.size())) {
        comm->Abort(2, "rank 0's KV cache has more layers than this rank's model");
      }
      kc.layers.resize(spec->num_layers);
      auto kv = PagedKvAttention::CreateFromSpec(kc, *spec);
      if (!kv.ok()) comm->Abort(2, "KV cache: " + kv.status().message());
      it = caches.emplace(c.kv_id, std::move(kv).value()).first;
    }
    auto p = DecodePlan(c.kv_plan);
    if (!p.ok()) comm->Abort(2, p.status().message());
    if (p->groups.size() != it->second->group_layout().groups.size() ||
        static_cast<size_t>(p->batch.num_tokens) != c.tokens.size()) {
      comm->Abort(2, "the step plan from rank 0 does not fit this rank's KV cache");
    }
    *plan = std::move(p).value();
    return *it->second;
  };
  // The logits buffer when rank 0 asked for logits (the vocabulary-parallel lm_head fills it).
  auto logits_for = [&](const TpCommand& c) -> float* {
    if (!c.want_logits) return nullptr;
    const int64_t rows =
        c.logit_rows.empty() ? static_cast<int64_t>(c.tokens.size()) : c.logit_rows.size();
    logits.resize(rows * V);
    return logits.data();
  };
  for (;;) {
    TpCommand c = Receive(*comm);
    KvStepPlan plan;
    switch (c.op) {
      case TpOp::kStop:
        return Status::Ok();
      case TpOp::kForward: {
        PagedKvAttention& kv = step(c, &plan);
        ForwardOutputs out;
        out.logit_rows = c.logit_rows;
        out.logits = logits_for(c);
        model.Forward(ctx, plan, c.tokens.data(), kv, out);
        break;
      }
      case TpOp::kMtpForward: {
        PagedKvAttention& kv = step(c, &plan);
        MtpOutputs out;
        out.logit_rows = c.logit_rows;
        out.logits = logits_for(c);
        model.MtpForward(ctx, c.mtp_index, plan, c.hprev.data(), c.tokens.data(), kv, out);
        break;
      }
      default:
        comm->Abort(2, "unknown step message from rank 0");
    }
  }
}

}  // namespace mimo

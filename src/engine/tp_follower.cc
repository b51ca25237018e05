// RunTpFollower: receive a step, import its slot plan, run the same model call as rank 0.
#include "engine/tp_follower.h"

#include <map>
#include <memory>
#include <vector>

#include "kv/paged_kv_attention.h"

namespace mimo {

Status RunTpFollower(MimoV2Model& model, ExecContext& ctx) {
  Communicator* comm = model.communicator();
  if (!comm || comm->leader()) return Internal("RunTpFollower on rank 0 or without MPI");
  std::map<uint64_t, std::unique_ptr<PagedKvAttention>> caches;  // by rank 0's cache id
  std::vector<float> logits, hidden;
  const int64_t V = model.config().vocab_size;
  auto cache = [&](const TpCommand& c) -> PagedKvAttention& {
    auto it = caches.find(c.kv_id);
    if (it == caches.end()) comm->Abort(2, "step for a KV cache rank 0 never described");
    const Status st = it->second->ImportStep(c.batch, c.kv_words);
    if (!st.ok()) comm->Abort(2, st.message());
    return *it->second;
  };
  // The logits buffer when rank 0 asked for logits (the vocabulary-parallel lm_head fills it).
  auto logits_for = [&](const TpCommand& c) -> float* {
    if (!c.want_logits) return nullptr;
    const int64_t rows = c.logit_rows.empty() ? c.batch.num_tokens : c.logit_rows.size();
    logits.resize(rows * V);
    return logits.data();
  };
  for (;;) {
    TpCommand c = ReceiveTpCommand(*comm);
    switch (c.op) {
      case TpOp::kStop:
        return Status::Ok();
      case TpOp::kNewKv: {
        auto spec = DecodePagedKvSpec(c.kv_words);
        if (!spec.ok()) comm->Abort(2, spec.status().message());
        ModelConfig kc = model.config();
        kc.layers = model.KvLayerConfigs();
        if (spec->num_layers > static_cast<int>(kc.layers.size())) {
          comm->Abort(2, "rank 0's KV cache has more layers than this rank's model");
        }
        kc.layers.resize(spec->num_layers);
        auto kv = PagedKvAttention::CreateFollower(kc, *spec);
        if (!kv.ok()) comm->Abort(2, "KV cache: " + kv.status().message());
        caches[c.kv_id] = std::move(kv).value();
        break;
      }
      case TpOp::kForward: {
        PagedKvAttention& kv = cache(c);
        ForwardOutputs out;
        out.logit_rows = c.logit_rows;
        out.logits = logits_for(c);
        model.Forward(ctx, c.batch, c.tokens.data(), kv, out);
        break;
      }
      case TpOp::kMtpForward: {
        PagedKvAttention& kv = cache(c);
        MtpOutputs out;
        out.logit_rows = c.logit_rows;
        out.logits = logits_for(c);
        model.MtpForward(ctx, c.mtp_index, c.batch, c.hprev.data(), c.tokens.data(), kv, out);
        break;
      }
      default:
        comm->Abort(2, "unknown step message from rank 0");
    }
  }
}

}  // namespace mimo

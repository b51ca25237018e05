// Running the model's steps on every rank. In one process these only call the model. Under tensor
// parallelism rank 0 (the leader) first sends each step to ranks 1..N-1 (the followers): the KV
// cache's spec and id, the step's plan (KvStepPlan: slots and block tables), the input ids and
// the wanted rows. Each follower runs the same model call on its slices, over storage of its own
// laid out like rank 0's cache (RunTpFollower); it needs no block manager, scheduler or sampler.
// The model itself never decides who runs a step: inside one it only all-gathers
// (model/tensor_parallel.h).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/mimo_v2.h"

namespace mimo {

// model.Forward(ctx, plan, tokens, cache.attention(), out), on every rank.
void RunForward(MimoV2Model& model, ExecContext& ctx, KvCache& cache, const KvStepPlan& plan,
                const int32_t* tokens, const ForwardOutputs& out);
// model.MtpForward(ctx, mtp_layer, plan, hprev, tokens, cache.attention(), out), on every rank.
// Tensor parallel: out.head must be null (the followers hold vocabulary slices of lm_head only).
void RunMtpForward(MimoV2Model& model, ExecContext& ctx, int mtp_layer, KvCache& cache,
                   const KvStepPlan& plan, const float* hprev, const int32_t* tokens,
                   const MtpOutputs& out);

// A follower rank: runs rank 0's steps until rank 0 calls StopTpFollowers. A follower that cannot
// build a cache or read a step stops the whole job with an error naming its rank.
Status RunTpFollower(MimoV2Model& model, ExecContext& ctx);
// Rank 0, once, when the job is done (no step may follow). A no-op in one process.
void StopTpFollowers(MimoV2Model& model);

}  // namespace mimo

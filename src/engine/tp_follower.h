// The follower side of tensor/expert parallelism: ranks 1..N-1 hold their slices of the model and
// run exactly the model calls rank 0 makes, on the step plans it broadcasts (model/
// tensor_parallel.h), with KV caches whose blocks mirror rank 0's. Rank 0 owns HTTP, tokenizer,
// scheduler and sampling; followers need none of them.
#pragma once

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/mimo_v2.h"

namespace mimo {

// Runs until rank 0 stops the followers (its model is destroyed or StopFollowers is called).
// A follower that cannot build a cache or import a step stops the whole job with an error
// naming its rank.
Status RunTpFollower(MimoV2Model& model, ExecContext& ctx);

}  // namespace mimo

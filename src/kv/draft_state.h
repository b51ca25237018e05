// What a drafter keeps per sequence beside the paged pools, owned by the KvCache with the
// sequence it belongs to: DFlash's draft-layer K/V over the last window of committed positions
// and the target features not yet appended to it; MTP's main hidden states of the positions its
// depths still compute. KvCache::FreeSequence frees it (finished, cancelled, preempted), so a
// speculator never tracks a request's lifetime, and KvCache::draft_state_bytes() counts it.
#pragma once

#include <cstdint>

namespace mimo {

class DraftState {
 public:
  virtual ~DraftState() = default;
  virtual int64_t bytes() const = 0;  // memory held, for the engine's stats
};

}  // namespace mimo

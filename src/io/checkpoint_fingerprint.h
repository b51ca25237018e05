// A 64-bit fingerprint of a checkpoint directory's weights, for caches whose bytes depend on
// them (the prefix cache's disk tier): config.json's bytes and, for every *.safetensors file in
// name order, its name, size and first and last MiB (the first holds its JSON header). An edited,
// re-quantized or replaced shard changes it; copying or moving the directory does not.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace mimo {

// Errors: the directory or a file in it cannot be read.
StatusOr<uint64_t> CheckpointFingerprint(const std::string& dir);

}  // namespace mimo

// GrammarWalker: random walks through a Grammar that take only allowed tokens, the way a model
// with arbitrary weights would sample under the mask. Used by tests (every walk must yield valid
// output), by `mimo grammar-walk` and by `mimo bench grammar` (a realistic mix of mask states).
// To end in a bounded number of tokens, each step is, with probability `steer`, the candidate
// token that most shortens the rest of the grammar (MinBytesToEnd), and always so after
// `steer_after` tokens; candidates are the allowed one-byte tokens plus a few random ones.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace mimo {

struct WalkOptions {
  uint64_t seed = 1;
  int max_tokens = 4096;
  int steer_after = 256;
  double steer = 0.25;
  int random_candidates = 16;
};

struct WalkResult {
  std::vector<int32_t> tokens;  // the EOS id last when the walk ended on it
  std::string text;             // bytes of the non-EOS tokens
  bool terminated = false;      // ended with the grammar complete (EOS accepted or no way on)
  bool stuck = false;           // a mask allowed nothing (a grammar bug)
  int64_t mask_ns_total = 0;    // time in FillNextTokenMask
  std::vector<int32_t> mask_ns; // per step
};

class GrammarWalker {
 public:
  // eos_ids: the ids the walk ends with (at least one).
  static WalkResult Walk(std::shared_ptr<const Grammar> grammar, const WalkOptions& options,
                         std::span<const int32_t> eos_ids);
};

}  // namespace mimo

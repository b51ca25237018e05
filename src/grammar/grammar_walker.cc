// Random walks under grammar masks.
#include "grammar/grammar_walker.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <random>

#include "core/check.h"
#include "grammar/grammar_matcher.h"

namespace mimo {
namespace {

// The k-th set bit of mask (k < popcount).
int32_t NthSetBit(const std::vector<uint32_t>& mask, int64_t k) {
  for (size_t w = 0; w < mask.size(); ++w) {
    const int c = std::popcount(mask[w]);
    if (k >= c) {
      k -= c;
      continue;
    }
    uint32_t bits = mask[w];
    for (int64_t i = 0; i < k; ++i) bits &= bits - 1;
    return static_cast<int32_t>(w * 32 + std::countr_zero(bits));
  }
  return -1;
}

}  // namespace

WalkResult GrammarWalker::Walk(std::shared_ptr<const Grammar> grammar, const WalkOptions& o,
                               std::span<const int32_t> eos_ids) {
  MIMO_CHECK(!eos_ids.empty(), "Walk needs an EOS id");
  const TokenVocabulary& vocab = grammar->vocab();
  GrammarMatcher m(grammar);
  std::mt19937_64 rng(o.seed);
  std::vector<uint32_t> mask(vocab.mask_words());
  // One-byte tokens: from any state the shortest completion is reachable through them.
  std::vector<int32_t> single;
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.maskable(id) && vocab.bytes(id).size() == 1) single.push_back(id);
  WalkResult r;
  for (int step = 0; step < o.max_tokens && !m.IsTerminated(); ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    m.FillNextTokenMask(mask.data(), eos_ids);
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0).count();
    r.mask_ns_total += ns;
    r.mask_ns.push_back(static_cast<int32_t>(std::min<int64_t>(ns, INT32_MAX)));
    int64_t allowed = 0;
    for (uint32_t w : mask) allowed += std::popcount(w);
    if (allowed == 0) {
      r.stuck = true;
      return r;
    }
    auto is_allowed = [&](int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; };
    // An eos id ends the walk even where it is also ordinary text (as in the engine).
    auto is_eos = [&](int32_t id) { return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end(); };
    int32_t pick = -1;
    const bool steer = step >= o.steer_after || std::uniform_real_distribution<>(0, 1)(rng) < o.steer;
    if (steer) {
      for (int32_t e : eos_ids) {
        if (e >= 0 && e < vocab.size() && is_allowed(e)) pick = e;  // ending is the shortest way
      }
      if (pick < 0) {
        std::vector<int32_t> candidates;
        for (int32_t id : single)
          if (is_allowed(id)) candidates.push_back(id);
        for (int i = 0; i < o.random_candidates; ++i)
          candidates.push_back(NthSetBit(mask, std::uniform_int_distribution<int64_t>(0, allowed - 1)(rng)));
        std::shuffle(candidates.begin(), candidates.end(), rng);
        int64_t best = -1;
        for (int32_t id : candidates) {
          if (is_eos(id) || !vocab.maskable(id) || !m.AcceptToken(id)) continue;
          const int64_t d = m.MinBytesToEnd();
          m.Rollback(1);
          if (best < 0 || d < best) {
            best = d;
            pick = id;
          }
        }
      }
    }
    if (pick < 0) pick = NthSetBit(mask, std::uniform_int_distribution<int64_t>(0, allowed - 1)(rng));
    MIMO_CHECK(m.AcceptToken(pick), "an allowed token %d was refused", pick);
    r.tokens.push_back(pick);
    if (!is_eos(pick) && vocab.maskable(pick)) r.text.append(vocab.bytes(pick));
  }
  r.terminated = m.IsTerminated();
  return r;
}

}  // namespace mimo

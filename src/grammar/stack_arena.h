// StackArena: the stacks of a running PushdownAutomaton, stored as a tree of nodes (state, count,
// parent) so that the many stacks of an ambiguous grammar share their common bottoms. A set of
// stacks (StackSet) is always kept closed: calls entered, finished rules returned from, so that
// every node that can consume the next byte is in it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/pushdown_automaton.h"

namespace mimo {

struct StackNode {
  int32_t state;
  int32_t count;   // text states: characters started; 0 otherwise
  int32_t parent;  // -1: the bottom of the stack
};

struct StackSet {
  std::vector<int32_t> nodes;  // node ids, closed
  // A stack finished its bottom frame: for a matcher, the grammar may end here; for a mask
  // precomputation, the frame being studied returned and its caller would continue.
  bool complete = false;
  void Clear() {
    nodes.clear();
    complete = false;
  }
};

// Not thread-safe; one per matcher (or per precomputation).
class StackArena {
 public:
  explicit StackArena(const PushdownAutomaton* pda) : pda_(pda) {}

  const StackNode& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  // Interned nodes (equal content -> same id) are created while interning is on; scratch nodes
  // (interning off) may be dropped again with Truncate, which must not cut interned ones.
  void set_interning(bool on) { interning_ = on; }
  void Truncate(size_t n);
  int32_t Make(int32_t state, int32_t count, int32_t parent);

  bool IsFinal(const StackNode& n) const;
  // Adds `node` and everything its closure reaches to `out`.
  void Close(int32_t node, StackSet* out);
  // Advances every node of `in` (closed) by byte b into `out` (cleared first, closed).
  void Step(const StackSet& in, uint8_t b, StackSet* out);
  // Advances one node by byte b, adding the closed results to `out`.
  void StepNode(int32_t node, uint8_t b, StackSet* out);
  // Fewest bytes that complete the stack of `node` (its frame and every frame below).
  int64_t DistanceToEnd(int32_t node) const;

 private:
  struct Key {
    int32_t state, count, parent;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = static_cast<uint32_t>(k.state) * 0x9E3779B97F4A7C15ull;
      h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.count)) << 32 |
            static_cast<uint32_t>(k.parent)) * 0xC2B2AE3D27D4EB4Full;
      return h ^ (h >> 29);
    }
  };

  const PushdownAutomaton* pda_;
  std::vector<StackNode> nodes_;
  std::unordered_map<Key, int32_t, KeyHash> interned_;
  size_t num_interned_ = 0;  // nodes_[0, num_interned_) may be in interned_
  bool interning_ = false;
};

}  // namespace mimo

// Closure and byte steps over stack sets.
#include "grammar/stack_arena.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

void StackArena::Truncate(size_t n) {
  MIMO_CHECK(n >= num_interned_, "Truncate would drop interned nodes");
  nodes_.resize(n);
}

int32_t StackArena::Make(int32_t state, int32_t count, int32_t parent) {
  if (interning_) {
    MIMO_CHECK(nodes_.size() == num_interned_, "interned node after scratch nodes");
    auto [it, fresh] = interned_.emplace(Key{state, count, parent}, static_cast<int32_t>(nodes_.size()));
    if (fresh) {
      nodes_.push_back({state, count, parent});
      ++num_interned_;
    }
    return it->second;
  }
  nodes_.push_back({state, count, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

bool StackArena::IsFinal(const StackNode& n) const {
  const PdaState& st = pda_->state(n.state);
  if (st.text < 0) return st.final;
  if (!st.final) return false;
  const PdaTextRule& tr = pda_->text_rule(st.text);
  return n.count - tr.dfa->pending(st.local) >= tr.min_chars;
}

void StackArena::Close(int32_t id, StackSet* out) {
  const StackNode n = nodes_[id];
  for (int32_t other : out->nodes) {
    if (other == id) return;
    const StackNode& o = nodes_[other];
    if (o.state == n.state && o.count == n.count && o.parent == n.parent) return;
  }
  out->nodes.push_back(id);
  const PdaState& st = pda_->state(n.state);
  if (st.text < 0) {
    for (const PdaCall& c : pda_->calls(st)) {
      const int32_t parent = c.tail ? n.parent : Make(c.ret, 0, n.parent);
      Close(Make(pda_->rule(c.rule).start, 0, parent), out);
    }
  }
  if (IsFinal(n)) {
    if (n.parent < 0) {
      out->complete = true;
    } else {
      Close(n.parent, out);
    }
  }
}

void StackArena::StepNode(int32_t id, uint8_t b, StackSet* out) {
  const StackNode n = nodes_[id];
  const PdaState& st = pda_->state(n.state);
  if (!st.consumes) return;
  if (st.text < 0) {
    const int32_t t = pda_->NextGeneral(st, b);
    if (t >= 0) Close(Make(t, 0, n.parent), out);
    return;
  }
  const PdaTextRule& tr = pda_->text_rule(st.text);
  const int32_t r = tr.dfa->Next(st.local, b);
  if (r < 0) return;
  int32_t k = n.count + tr.dfa->Starts(st.local, b);
  if (tr.max_chars < 0) k = std::min(k, tr.count_cap);
  if (!tr.Alive(r, k)) return;
  // The terminator with too few characters: this string cannot end, nor go on.
  if (r == tr.dfa->end() && k - tr.dfa->pending(r) < tr.min_chars) return;
  Close(Make(tr.first_state + r, k, n.parent), out);
}

void StackArena::Step(const StackSet& in, uint8_t b, StackSet* out) {
  out->Clear();
  for (int32_t id : in.nodes) StepNode(id, b, out);
}

int64_t StackArena::DistanceToEnd(int32_t id) const {
  int64_t total = 0;
  for (int32_t cur = id; cur >= 0; cur = nodes_[cur].parent) {
    const StackNode& n = nodes_[cur];
    const PdaState& st = pda_->state(n.state);
    total += st.dist;
    if (st.text >= 0) {
      const PdaTextRule& tr = pda_->text_rule(st.text);
      const int64_t have = n.count - tr.dfa->pending(st.local);
      if (have < tr.min_chars) total += tr.min_chars - have;
    }
  }
  return total;
}

}  // namespace mimo

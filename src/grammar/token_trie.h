// TokenTrie: the byte strings of a set of tokens as a trie laid out in preorder (children in byte
// order), so that a walk visits shared prefixes once and skips every token with a rejected prefix
// by jumping to `subtree_end`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mimo {

// Immutable after Build; safe to share between threads.
class TokenTrie {
 public:
  // entries: (id, bytes). Entries with empty bytes are skipped; equal byte strings share a node.
  static TokenTrie Build(std::vector<std::pair<int32_t, std::string>> entries);

  int32_t num_nodes() const { return static_cast<int32_t>(byte_.size()); }
  // Node 0 is the root (the empty prefix, depth 0). Every other node n adds byte(n) to the prefix
  // of its parent, the nearest earlier node of depth depth(n) - 1.
  uint8_t byte(int32_t n) const { return byte_[n]; }
  int32_t depth(int32_t n) const { return depth_[n]; }
  // One past the last node of n's subtree (n itself included).
  int32_t subtree_end(int32_t n) const { return subtree_end_[n]; }
  // Tokens spelled exactly by node n: ids()[token_begin(n), token_begin(n + 1)); the tokens of
  // n's whole subtree: ids()[token_begin(n), token_begin(subtree_end(n))).
  int32_t token_begin(int32_t n) const { return token_begin_[n]; }
  std::span<const int32_t> ids() const { return ids_; }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<uint8_t> byte_;          // [num_nodes]
  std::vector<uint16_t> depth_;        // [num_nodes]
  std::vector<int32_t> subtree_end_;   // [num_nodes]
  std::vector<int32_t> token_begin_;   // [num_nodes + 1]
  std::vector<int32_t> ids_;           // [num_tokens] in preorder (lexicographic byte order)
  int32_t max_depth_ = 0;
};

}  // namespace mimo

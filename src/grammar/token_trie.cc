// TokenTrie construction: sorting the byte strings makes preorder the order of first appearance.
#include "grammar/token_trie.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

TokenTrie TokenTrie::Build(std::vector<std::pair<int32_t, std::string>> entries) {
  std::erase_if(entries, [](const auto& e) { return e.second.empty(); });
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    // Unsigned byte order, so that children come in byte order; a prefix sorts first.
    const int c = std::lexicographical_compare(
        a.second.begin(), a.second.end(), b.second.begin(), b.second.end(),
        [](char x, char y) { return static_cast<uint8_t>(x) < static_cast<uint8_t>(y); });
    if (c) return true;
    if (a.second != b.second) return false;
    return a.first < b.first;
  });
  TokenTrie t;
  t.byte_.push_back(0);
  t.depth_.push_back(0);
  t.subtree_end_.push_back(0);
  t.token_begin_.push_back(0);
  std::vector<int32_t> path = {0};  // path[d] = node of the current prefix of length d
  std::string prev;
  for (const auto& [id, bytes] : entries) {
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < bytes.size() && prev[lcp] == bytes[lcp]) ++lcp;
    // Close the nodes of the previous string below the common prefix.
    while (path.size() > lcp + 1) {
      t.subtree_end_[path.back()] = t.num_nodes();
      path.pop_back();
    }
    for (size_t d = lcp; d < bytes.size(); ++d) {
      const int32_t n = t.num_nodes();
      t.byte_.push_back(static_cast<uint8_t>(bytes[d]));
      MIMO_CHECK(d + 1 < 65536, "token longer than 65535 bytes");
      t.depth_.push_back(static_cast<uint16_t>(d + 1));
      t.subtree_end_.push_back(0);
      t.token_begin_.push_back(static_cast<int32_t>(t.ids_.size()));
      path.push_back(n);
    }
    t.max_depth_ = std::max<int32_t>(t.max_depth_, static_cast<int32_t>(bytes.size()));
    t.ids_.push_back(id);
    prev = bytes;
  }
  while (!path.empty()) {
    t.subtree_end_[path.back()] = t.num_nodes();
    path.pop_back();
  }
  t.token_begin_.push_back(static_cast<int32_t>(t.ids_.size()));
  return t;
}

}  // namespace mimo

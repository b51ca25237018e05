// TagTable: Knuth-Morris-Pratt over the tag, and one pass over the vocabulary per partial match.
#include "grammar/tag_table.h"

#include "core/check.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

std::shared_ptr<const TagTable> TagTable::Build(std::string_view tag,
                                                const TokenVocabulary& vocab) {
  MIMO_CHECK(!tag.empty(), "TagTable needs a tag");
  auto t = std::make_shared<TagTable>();
  t->tag_ = std::string(tag);
  const int32_t n = static_cast<int32_t>(tag.size());
  // fail_[i]: the longest proper border of tag[0, i).
  t->fail_.assign(n + 1, 0);
  for (int32_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && tag[i] != tag[k]) k = t->fail_[k];
    if (tag[i] == tag[k]) ++k;
    t->fail_[i + 1] = k;
  }
  t->completions_.resize(n);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.maskable(id)) continue;
    const std::string_view bytes = vocab.bytes(id);
    for (int32_t s = 0; s < n; ++s) {
      int32_t end;
      t->Advance(s, bytes, &end);
      if (end >= 0) t->completions_[s].push_back({id, end});
    }
    size_t p = 0;
    while (p < bytes.size() &&
           (bytes[p] == ' ' || bytes[p] == '\t' || bytes[p] == '\n' || bytes[p] == '\r'))
      ++p;
    const std::string_view rest = bytes.substr(p);
    if (!rest.empty() && (tag.substr(0, rest.size()) == rest || rest.substr(0, n) == tag))
      t->starters_.push_back(id);
  }
  return t;
}

int32_t TagTable::Advance(int32_t state, std::string_view bytes, int32_t* end) const {
  const int32_t n = static_cast<int32_t>(tag_.size());
  *end = -1;
  int32_t k = state;
  for (size_t i = 0; i < bytes.size(); ++i) {
    while (k > 0 && bytes[i] != tag_[k]) k = fail_[k];
    if (bytes[i] == tag_[k]) ++k;
    if (k == n) {
      if (*end < 0) *end = static_cast<int32_t>(i + 1);
      k = fail_[k];
    }
  }
  return k;
}

}  // namespace mimo

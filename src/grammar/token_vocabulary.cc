// TokenVocabulary construction from the tokenizer.
#include "grammar/token_vocabulary.h"

#include <algorithm>

#include "grammar/tag_table.h"
#include "grammar/text_dfa.h"
#include "grammar/text_profile.h"
#include "tokenizer/bpe.h"

namespace mimo {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tok,
                                                                      int32_t mask_vocab_size) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  v->size_ = mask_vocab_size > 0 ? mask_vocab_size : tok.vocab_size();
  v->bytes_.resize(v->size_);
  v->maskable_.assign(v->size_, 0);
  for (int32_t id = 0; id < std::min(tok.vocab_size(), v->size_); ++id) {
    if (!tok.IsValidId(id)) continue;
    v->bytes_[id] = std::string(tok.TokenBytes(id));
    v->maskable_[id] = !tok.IsSpecial(id) && !v->bytes_[id].empty();
  }
  v->BuildTrie();
  return v;
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromBytes(
    std::vector<std::string> bytes_by_id, std::vector<bool> excluded) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  v->size_ = static_cast<int32_t>(bytes_by_id.size());
  v->bytes_ = std::move(bytes_by_id);
  v->maskable_.assign(v->size_, 0);
  for (int32_t id = 0; id < v->size_; ++id) {
    const bool ex = id < static_cast<int32_t>(excluded.size()) && excluded[id];
    v->maskable_[id] = !ex && !v->bytes_[id].empty();
  }
  v->BuildTrie();
  return v;
}

void TokenVocabulary::BuildTrie() {
  std::vector<std::pair<int32_t, std::string>> entries;
  for (int32_t id = 0; id < size_; ++id) {
    if (maskable_[id]) entries.emplace_back(id, bytes_[id]);
  }
  trie_ = TokenTrie::Build(std::move(entries));
  rank_.assign(size_, -1);
  const auto ids = trie_.ids();
  for (size_t i = 0; i < ids.size(); ++i) rank_[ids[i]] = static_cast<int32_t>(i);
}

std::shared_ptr<const TextProfile> TokenVocabulary::ProfileFor(const TextDfa& dfa,
                                                               CompileBudget* budget) const {
  std::string key = dfa.Fingerprint();
  {
    std::lock_guard<std::mutex> lock(profiles_mu_);
    auto it = profiles_.find(key);
    if (it != profiles_.end()) return it->second;
  }
  if (budget != nullptr && !budget->ChargeTextStates(dfa.num_states()).ok()) return nullptr;
  // Built outside the lock: compiles on other threads are not held up (two threads may build
  // the same profile once each; the first stored wins).
  auto built = TextProfile::Build(dfa, trie_, size_, budget);
  if (built == nullptr) return nullptr;
  const size_t bytes = built->bytes() + key.size();
  std::lock_guard<std::mutex> lock(profiles_mu_);
  if (bytes > kMaxCachedProfileBytes) return built;  // used by this grammar only
  auto [it, fresh] = profiles_.emplace(key, built);
  if (fresh) {
    profile_order_.push_back(std::move(key));
    profile_bytes_ += bytes;
    while (profile_order_.size() > kMaxCachedProfiles ||
           profile_bytes_ > kMaxCachedProfileBytes) {
      auto old = profiles_.find(profile_order_.front());
      profile_bytes_ -= old->second->bytes() + old->first.size();
      profiles_.erase(old);
      profile_order_.pop_front();
    }
  }
  return it->second;
}

}  // namespace mimo

namespace mimo {

std::shared_ptr<const TagTable> TokenVocabulary::TagTableFor(std::string_view tag) const {
  {
    std::lock_guard<std::mutex> lock(profiles_mu_);
    auto it = tags_.find(std::string(tag));
    if (it != tags_.end()) return it->second;
  }
  auto built = TagTable::Build(tag, *this);  // outside the lock, as ProfileFor
  std::lock_guard<std::mutex> lock(profiles_mu_);
  return tags_.emplace(std::string(tag), std::move(built)).first->second;
}

}  // namespace mimo

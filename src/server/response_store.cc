// ResponseStore (see response_store.h).
#include "server/response_store.h"

namespace mimo {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

void ResponseStore::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  order_.erase(it->second.pos);
  entries_.erase(it);
}

void ResponseStore::Put(const std::string& id, StoredResponse r) {
  const size_t bytes =
      id.size() + r.response.dump().size() + r.input_items.dump().size() + r.messages.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) EraseLocked(it);
  if (max_entries_ == 0 || bytes > max_bytes_) return;
  order_.push_back(id);
  Entry e{std::move(r), bytes, std::prev(order_.end())};
  entries_.emplace(id, std::move(e));
  bytes_ += bytes;
  while (entries_.size() > max_entries_ || bytes_ > max_bytes_) {
    EraseLocked(entries_.find(order_.front()));
  }
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.value;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  EraseLocked(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace mimo

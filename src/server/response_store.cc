// ResponseStore (see response_store.h).
#include "server/response_store.h"

namespace mimo {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

namespace {

// Calls f(item id) for every item of a stored response that has one.
const OJson kNoItems = OJson::array();

// The output items of a stored response (none when it has no "output").
const OJson& OutputOf(const StoredResponse& r) {
  if (!r.response.is_object()) return kNoItems;
  auto it = r.response.find("output");
  return it == r.response.end() ? kNoItems : *it;
}

template <typename F>
void ForEachItemId(const StoredResponse& r, F f) {
  for (const OJson* list : {&r.input_items, &OutputOf(r)}) {
    if (!list->is_array()) continue;
    for (const OJson& item : *list) {
      if (item.is_object() && item.contains("id") && item["id"].is_string())
        f(item["id"].get<std::string>());
    }
  }
}

}  // namespace

void ResponseStore::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  ForEachItemId(it->second.value, [&](const std::string& item) {
    auto o = item_owner_.find(item);
    if (o != item_owner_.end() && o->second == it->first) item_owner_.erase(o);
  });
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
  ForEachItemId(r, [&](const std::string& item) { item_owner_[item] = id; });
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

std::optional<OJson> ResponseStore::FindItem(const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto o = item_owner_.find(item_id);
  if (o == item_owner_.end()) return std::nullopt;
  auto it = entries_.find(o->second);
  if (it == entries_.end()) return std::nullopt;
  std::optional<OJson> found;
  const StoredResponse& r = it->second.value;
  for (const OJson* list : {&r.input_items, &OutputOf(r)}) {
    if (!list->is_array()) continue;
    for (const OJson& item : *list) {
      if (item.is_object() && item.value("id", OJson()) == item_id) found = item;
    }
  }
  return found;
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

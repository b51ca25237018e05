// ResponseStore (see response_store.h).
#include "server/response_store.h"

#include <algorithm>

namespace mimo {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

namespace {

const OJson kNoItems = OJson::array();

// The output items of a stored response (none when it has no "output").
const OJson& OutputOf(const StoredResponse& r) {
  if (!r.response.is_object()) return kNoItems;
  auto it = r.response.find("output");
  return it == r.response.end() ? kNoItems : *it;
}

// An item an item_reference can name: one with a string id that is not itself a reference (a
// request that references an item holds the reference under the item's id; indexing it would
// make the next reference resolve to the reference).
bool IsReferable(const OJson& item) {
  if (!item.is_object()) return false;
  auto id = item.find("id");
  if (id == item.end() || !id->is_string()) return false;
  auto type = item.find("type");
  return type == item.end() || *type != "item_reference";
}

// Calls f(item) for every referable item of a stored response.
template <typename F>
void ForEachItem(const StoredResponse& r, F f) {
  for (const OJson* list : {&r.input_items, &OutputOf(r)}) {
    if (!list->is_array()) continue;
    for (const OJson& item : *list) {
      if (IsReferable(item)) f(item);
    }
  }
}

std::string IdOf(const OJson& item) { return item["id"].get<std::string>(); }

}  // namespace

void ResponseStore::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  ForEachItem(it->second.value, [&](const OJson& item) {
    auto o = item_owners_.find(IdOf(item));
    if (o == item_owners_.end()) return;
    std::erase(o->second, it->first);
    if (o->second.empty()) item_owners_.erase(o);
  });
  bytes_ -= it->second.bytes;
  order_.erase(it->second.pos);
  entries_.erase(it);
}

size_t JsonHeapBytes(const OJson& j) {
  const auto chunk = [](size_t n) -> size_t {
    return n == 0 ? 0 : std::max<size_t>(32, (n + 8 + 15) & ~size_t{15});
  };
  const auto text = [&](const std::string& s) {
    return s.capacity() > 15 ? chunk(s.capacity() + 1) : 0;  // beyond the small-string buffer
  };
  switch (j.type()) {
    case OJson::value_t::object: {
      const auto& o = j.get_ref<const OJson::object_t&>();
      size_t b = chunk(sizeof(OJson::object_t)) + chunk(o.capacity() * sizeof(*o.begin()));
      for (const auto& [k, v] : o) b += text(k) + JsonHeapBytes(v);
      return b;
    }
    case OJson::value_t::array: {
      const auto& a = j.get_ref<const OJson::array_t&>();
      size_t b = chunk(sizeof(OJson::array_t)) + chunk(a.capacity() * sizeof(OJson));
      for (const OJson& v : a) b += JsonHeapBytes(v);
      return b;
    }
    case OJson::value_t::string:
      return chunk(sizeof(std::string)) + text(j.get_ref<const std::string&>());
    case OJson::value_t::binary:
      return chunk(sizeof(OJson::binary_t)) + chunk(j.get_binary().capacity());
    default:
      return 0;  // numbers, booleans, null live in the value itself
  }
}

void ResponseStore::Put(const std::string& id, StoredResponse r) {
  // The documents, the id (twice: list and map), the entry and its map node, and the item index.
  size_t bytes = JsonHeapBytes(r.response) + JsonHeapBytes(r.input_items) +
                 JsonHeapBytes(r.messages) + 2 * (id.size() + 64) + sizeof(Entry) + 64;
  ForEachItem(r, [&](const OJson& item) { bytes += IdOf(item).size() + id.size() + 96; });
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) EraseLocked(it);
  if (max_entries_ == 0 || bytes > max_bytes_) return;
  order_.push_back(id);
  ForEachItem(r, [&](const OJson& item) {
    std::vector<std::string>& owners = item_owners_[IdOf(item)];
    if (owners.empty() || owners.back() != id) owners.push_back(id);  // once per response
  });
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
  auto o = item_owners_.find(item_id);
  if (o == item_owners_.end()) return std::nullopt;
  for (auto owner = o->second.rbegin(); owner != o->second.rend(); ++owner) {
    auto it = entries_.find(*owner);
    if (it == entries_.end()) continue;
    std::optional<OJson> found;  // the last of the response's items with that id
    ForEachItem(it->second.value, [&](const OJson& item) {
      if (item["id"] == item_id) found = item;
    });
    if (found) return found;
  }
  return std::nullopt;
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

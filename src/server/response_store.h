// The Responses API's stored responses (`store`, true by default): in memory, bounded by a
// count and by bytes - the heap bytes the kept documents really take (JsonHeapBytes), not the
// length of their text, which is ~16x less - the oldest evicted first. A stored response keeps what GET
// /v1/responses/{id} returns, its input items, and the conversation through its output as chat
// messages, which is what a request with `previous_response_id` continues from.
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/api_error.h"

namespace mimo {

struct StoredResponse {
  OJson response;     // the Response object, as returned
  OJson input_items;  // this request's input items (with ids)
  OJson messages;     // chat messages through this response's output (instructions excluded)
};

// The heap memory of a JSON document beyond its root object: every allocation its values make
// (objects' and arrays' element storage, strings longer than the small-string buffer, keys), in
// glibc malloc chunks (8 bytes of header, 16-byte rounding, 32 at least).
size_t JsonHeapBytes(const OJson& j);

class ResponseStore {
 public:
  ResponseStore(size_t max_entries, size_t max_bytes);

  // Stores (or replaces) `id`, then evicts the oldest entries past the bounds; an entry larger
  // than max_bytes alone is not kept.
  void Put(const std::string& id, StoredResponse r);
  std::optional<StoredResponse> Get(const std::string& id) const;
  // An input or output item of a stored response, by its id (the Responses API's item_reference):
  // from the newest response that holds it, so an item stays referable while any response that
  // holds it is kept. An item_reference is never itself an item (the request that references an
  // item does not become its owner), so an item can be referenced any number of times.
  std::optional<OJson> FindItem(const std::string& item_id) const;
  bool Erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    StoredResponse value;
    size_t bytes = 0;
    std::list<std::string>::iterator pos;
  };
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it);

  const size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Entry> entries_;
  // item id -> the stored responses holding it, oldest first
  std::unordered_map<std::string, std::vector<std::string>> item_owners_;
  size_t bytes_ = 0;
};

}  // namespace mimo

// The request parsers' shared helpers (see parse_context.h).
#include "server/parse_context.h"

#include <random>

namespace mimo {

OJson MergeLeadingSystemMessages(OJson messages) {
  auto is_system = [](const OJson& m) {
    return m.is_object() && m.value("role", "") == "system" && m.contains("content") &&
           m["content"].is_string();
  };
  while (messages.size() >= 2 && is_system(messages[0]) && is_system(messages[1])) {
    std::string a = messages[0]["content"], b = messages[1]["content"];
    messages[0]["content"] = a.empty() ? b : b.empty() ? a : a + "\n\n" + b;
    messages.erase(messages.begin() + 1);
  }
  return messages;
}

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

}  // namespace mimo

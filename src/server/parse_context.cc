// The request parsers' shared helpers (see parse_context.h).
#include "server/parse_context.h"

#include "core/secure_random.h"

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

std::string RandomId(const char* prefix) { return SecureRandomId(prefix); }

}  // namespace mimo

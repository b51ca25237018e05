// JSON string escaping shared by the template engine and the tool-call parser.
#include "core/json_escape.h"

namespace mimo {

void AppendJsonEscaped(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 15];
        } else {
          *out += ch;
        }
    }
  }
}

}  // namespace mimo

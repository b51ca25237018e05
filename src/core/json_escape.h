// JSON string escaping exactly as Python's json.dumps(ensure_ascii=False) writes it (the form
// tojson in chat templates and the tool-call arguments both need).
#pragma once

#include <string>
#include <string_view>

namespace mimo {

// Appends `s` JSON-escaped (no surrounding quotes): `"` `\\` and control characters are
// escaped, every other byte is copied. Escaping works byte by byte, so escaping two pieces and
// concatenating equals escaping their concatenation (the streaming parser relies on it).
void AppendJsonEscaped(std::string_view s, std::string* out);

}  // namespace mimo

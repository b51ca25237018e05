// See json_depth.h.
#include "core/json_depth.h"

namespace mimo {

int64_t JsonNestingDepth(std::string_view text, int64_t stop_above) {
  return MeasureJson(text, stop_above, INT64_MAX - 1).depth;
}

JsonShape MeasureJson(std::string_view text, int64_t stop_depth, int64_t stop_values) {
  int64_t depth = 0, deepest = 0, values = 1;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++values > stop_values) return {deepest, values};
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_depth) return {deepest, values};
        }
        break;
      case ',':
        if (++values > stop_values) return {deepest, values};
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return {deepest, values};
}

}  // namespace mimo

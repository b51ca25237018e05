// How deeply JSON text nests, found without parsing it: one pass over the bytes, no recursion,
// no allocation. Callers refuse text nested deeper than they allow *before* a JSON library builds
// (and later copies, dumps and destroys, all recursively) a document from it; see
// server/request_json.h.
#pragma once

#include <cstdint>
#include <string_view>

namespace mimo {

// The deepest nesting of '[' / '{' outside strings (a string's backslash escapes honoured), or
// stop_above + 1 as soon as the nesting passes stop_above (the scan ends there). Unbalanced or
// otherwise invalid JSON gets a number too (closing brackets below depth 0 are ignored): the
// caller's parser refuses it afterwards.
int64_t JsonNestingDepth(std::string_view text, int64_t stop_above = INT64_MAX - 1);

// True when `text` nests deeper than max_depth levels ("[[1]]" is 2 levels, "1" is 0).
inline bool JsonNestsDeeperThan(std::string_view text, int64_t max_depth) {
  return JsonNestingDepth(text, max_depth) > max_depth;
}

// The deepest nesting and an upper bound on the number of values (every value is the document,
// the first in its container, or follows a comma: 1 + '[' + '{' + ','), found in the same one
// pass; the scan stops as soon as either passes its bound (the result then says by how much
// it passed: depth stop_depth + 1, or values stop_values + 1).
struct JsonShape {
  int64_t depth = 0;
  int64_t values = 0;
};
JsonShape MeasureJson(std::string_view text, int64_t stop_depth, int64_t stop_values);

}  // namespace mimo

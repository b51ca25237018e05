// The bits every HTTP benchmark client here shares (bench serve, bench eval): the server's origin
// from a base URL and the bearer header.
#pragma once

#include <httplib.h>

#include <string>

namespace mimo::cli {

// The server's origin ("http://host:port") from a base URL; a trailing "/v1" (what every OpenAI
// client appends anyway) and trailing slashes are dropped.
inline std::string OriginOf(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url;
}

inline httplib::Headers AuthHeaders(const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return h;
}

}  // namespace mimo::cli

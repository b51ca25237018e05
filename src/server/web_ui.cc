// WebUiPaths / ServeWebAsset: the embedded chat page (see web_ui.h).
#include "server/web_ui.h"

#include <string>

namespace mimo {

const char kWebUiCsp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'";

std::string_view WebContentType(std::string_view name) {
  const auto ends = [&](std::string_view ext) { return name.ends_with(ext); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  if (ends(".txt")) return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == "/") path = "/index.html";
  if (!path.starts_with('/')) return nullptr;
  path.remove_prefix(1);
  for (const WebAsset& a : EmbeddedWebAssets()) {
    if (path == a.name) return &a;
  }
  return nullptr;
}

std::vector<std::string> WebUiPaths() {
  std::vector<std::string> paths = {"/"};
  for (const WebAsset& a : EmbeddedWebAssets()) paths.push_back(std::string("/") + a.name);
  return paths;
}

void ServeWebAsset(const HttpRequest& req, HttpResponse& res) {
  const WebAsset* a = FindWebAsset(req.path);
  if (!a) {
    res.status = 404;
    res.set_content("{\"error\":{\"message\":\"not found\"}}", "application/json");
    return;
  }
  res.set_header("Content-Security-Policy", kWebUiCsp);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");  // a rebuilt binary's page is used at once
  res.set_content(std::string(a->bytes()), WebContentType(a->name));
}

}  // namespace mimo

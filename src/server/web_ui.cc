// RegisterWebUi: serves the embedded chat page (see web_ui.h).
#include "server/web_ui.h"

#include <httplib.h>

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

void RegisterWebUi(httplib::Server& server) {
  const auto serve = [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* a = FindWebAsset(req.path);
    if (!a) {
      res.status = 404;  // the server's error handler writes the JSON error
      return;
    }
    res.set_header("Content-Security-Policy", kWebUiCsp);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-cache");  // a rebuilt binary's page is used at once
    const std::string_view type = WebContentType(a->name);
    res.set_content(a->bytes().data(), a->bytes().size(), std::string(type).c_str());
  };
  server.Get("/", serve);
  for (const WebAsset& a : EmbeddedWebAssets()) {
    std::string pattern = "/";
    for (const char* c = a.name; *c; ++c) {
      if (*c == '.') pattern += '\\';  // a regex in this cpp-httplib; names are [A-Za-z0-9_.-]
      pattern += *c;
    }
    server.Get(pattern, serve);
  }
}

}  // namespace mimo

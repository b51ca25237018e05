// The built-in chat page of `mimo serve` (GET /): the files of src/server/webui/, embedded in
// the binary at build time (cmake/embed_webui.cmake) and served with a Content-Security-Policy
// that allows this origin only. The page itself is public (it holds no secret); with --api-key
// it asks for the key and sends it on its /v1 requests.
// Thread-safety: the assets are immutable; the handlers are safe on any HTTP thread.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace mimo {

struct WebAsset {
  const char* name;           // file name in src/server/webui, served as "/<name>"
  const unsigned char* data;  // [size] bytes (plus a terminating 0 not counted)
  size_t size;
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data), size}; }
};

// Every embedded file, sorted by name. Defined in the generated webui_assets.cc.
std::span<const WebAsset> EmbeddedWebAssets();

// The asset served at `path` ("/" is index.html), or nullptr.
const WebAsset* FindWebAsset(std::string_view path);

// Content-Type for an asset name, by extension (text types carry charset=utf-8).
std::string_view WebContentType(std::string_view name);

// The Content-Security-Policy the page is served with: scripts, styles, images and fetches from
// this origin only, no inline script or style, no frames, and Trusted Types required for every
// HTML sink (so markup can never be assigned as HTML, even by mistake).
extern const char kWebUiCsp[];

// The paths the page is served at: "/" and "/<asset>" for every embedded file.
std::vector<std::string> WebUiPaths();
// Answers GET <path> for one of WebUiPaths() (whole file; a Range header is ignored).
void ServeWebAsset(const HttpRequest& req, HttpResponse& res);

}  // namespace mimo

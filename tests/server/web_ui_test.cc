// The chat page embedded at build time: every file of src/server/webui is in the binary byte for
// byte (compared with the files on disk), and lookups and content types are right.
#include "server/web_ui.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace mimo {
namespace {

const std::filesystem::path kWebUiDir = std::filesystem::path(MIMO_SOURCE_DIR) / "src/server/webui";

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(WebUi, EveryFileIsEmbeddedByteForByte) {
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::directory_iterator(kWebUiDir)) {
    if (e.is_regular_file()) on_disk.insert(e.path().filename().string());
  }
  std::set<std::string> embedded;
  for (const WebAsset& a : EmbeddedWebAssets()) {
    embedded.insert(a.name);
    EXPECT_EQ(a.data[a.size], 0) << a.name;  // the terminating 0 the generator promises
    EXPECT_EQ(a.bytes(), ReadFile(kWebUiDir / a.name)) << a.name;
  }
  EXPECT_EQ(embedded, on_disk);
  EXPECT_TRUE(embedded.count("index.html"));
  EXPECT_TRUE(embedded.count("app.js"));
}

TEST(WebUi, RootIsTheIndexAndUnknownPathsAreNotFound) {
  const WebAsset* root = FindWebAsset("/");
  ASSERT_NE(root, nullptr);
  EXPECT_STREQ(root->name, "index.html");
  ASSERT_NE(FindWebAsset("/app.js"), nullptr);
  EXPECT_STREQ(FindWebAsset("/app.js")->name, "app.js");
  EXPECT_EQ(FindWebAsset("/nope.js"), nullptr);
  EXPECT_EQ(FindWebAsset("app.js"), nullptr);
  EXPECT_EQ(FindWebAsset("/../app.js"), nullptr);
  EXPECT_EQ(FindWebAsset("/webui/app.js"), nullptr);
}

TEST(WebUi, ContentTypes) {
  EXPECT_EQ(WebContentType("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(WebContentType("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(WebContentType("app.css"), "text/css; charset=utf-8");
  EXPECT_EQ(WebContentType("favicon.svg"), "image/svg+xml");
  EXPECT_EQ(WebContentType("blob"), "application/octet-stream");
}

TEST(WebUi, CspAllowsThisOriginOnly) {
  const std::string csp = kWebUiCsp;
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self';"), std::string::npos);
  EXPECT_NE(csp.find("connect-src 'self';"), std::string::npos);
  EXPECT_NE(csp.find("require-trusted-types-for 'script'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
  EXPECT_EQ(csp.find("http"), std::string::npos);  // no other origin named
}

}  // namespace
}  // namespace mimo

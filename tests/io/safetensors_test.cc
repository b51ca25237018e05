// Safetensors reader: valid single/sharded files round-trip; every malformed file is one clear
// Status (file and tensor named), never a crash.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include "io/test_files.h"

namespace mimo {
namespace {

using namespace testing_io;  // NOLINT

std::vector<RawTensor> TwoTensors() {
  return {{"a", "F32", {2, 3}, F32Bytes({1, 2, 3, 4, 5, 6})},
          {"b", "BF16", {4}, BF16Bytes({0.5f, -1.0f, 2.0f, 3.0f})}};
}

// Opens `bytes` written to a file and returns the error message (the open must fail).
std::string OpenError(const std::string& bytes) {
  const std::string path = MakeTempDir() + "/model.safetensors";
  WriteFile(path, bytes);
  auto f = SafetensorsFile::Open(path);
  EXPECT_FALSE(f.ok());
  if (f.ok()) return "";
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  return f.status().message();
}

std::string WithHeader(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(Safetensors, ReadsValidFile) {
  const std::string path = MakeTempDir() + "/model.safetensors";
  WriteSafetensors(path, TwoTensors());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ((*f)->entries().size(), 2u);
  const SafetensorsEntry* a = (*f)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (Shape{2, 3}));
  EXPECT_EQ(static_cast<const float*>((*f)->DataOf(*a))[5], 6.0f);
  const SafetensorsEntry* b = (*f)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(BF16ToF32(static_cast<const uint16_t*>((*f)->DataOf(*b))[1]), -1.0f);
  EXPECT_EQ((*f)->Find("__metadata__"), nullptr);
}

TEST(Safetensors, TruncatedFile) {
  std::string bytes = SafetensorsBytes(TwoTensors());
  const std::string err = OpenError(bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_NE(OpenError(bytes.substr(0, 5)).find("too short"), std::string::npos);
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  std::string bytes = SafetensorsBytes(TwoTensors());
  bytes[6] = 1;  // header length += 2^48
  EXPECT_NE(OpenError(bytes).find("exceeds the file size"), std::string::npos);
}

TEST(Safetensors, CorruptJson) {
  EXPECT_NE(OpenError(WithHeader("{\"a\": {\"dtype\": \"F32\",", "")).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(OpenError(WithHeader("[1,2,3]", "")).find("not a JSON object"), std::string::npos);
}

TEST(Safetensors, UnknownDtypeNamesTensor) {
  const std::string err = OpenError(WithHeader(
      R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", std::string(8, '\0')));
  EXPECT_NE(err.find("'w'"), std::string::npos) << err;
  EXPECT_NE(err.find("F64"), std::string::npos) << err;
}

TEST(Safetensors, ByteCountMismatch) {
  const std::string err = OpenError(WithHeader(
      R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0')));
  EXPECT_NE(err.find("needs 12 bytes"), std::string::npos) << err;
}

TEST(Safetensors, OverlappingOffsets) {
  const std::string err = OpenError(WithHeader(
      R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      std::string(12, '\0')));
  EXPECT_NE(err.find("overlap"), std::string::npos) << err;
}

// Issue 44: byte ranges must tile the data area exactly, as the format and Hugging Face's reader
// require. Overlap (here one tensor inside another, not its neighbour in name order) names both
// tensors with their ranges; a hole before, between or after them names where it is.
TEST(Safetensors, DataAreaMustBeTiledExactly) {
  std::string err = OpenError(WithHeader(
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
          "c": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]}})",
      std::string(20, '\0')));
  EXPECT_NE(err.find("tensors 'a' [0, 16) and 'b' [4, 8) overlap"), std::string::npos) << err;
  err = OpenError(WithHeader(
      R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "y": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
      std::string(12, '\0')));
  EXPECT_NE(err.find("4 bytes of the data area between tensor 'x' [0, 4) and tensor 'y' [8, 12) "
                     "belong to no tensor"),
            std::string::npos)
      << err;
  err = OpenError(WithHeader(R"({"y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                             std::string(8, '\0')));
  EXPECT_NE(err.find("4 bytes of the data area before tensor 'y' [4, 8)"), std::string::npos)
      << err;
  err = OpenError(WithHeader(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                             std::string(7, '\0')));
  EXPECT_NE(err.find("3 bytes of the data area after tensor 'x' [0, 4) belong to no tensor"),
            std::string::npos)
      << err;
  // Zero-byte tensors hold nothing: they may sit anywhere in the area, even inside another.
  const std::string path = MakeTempDir() + "/model.safetensors";
  WriteFile(path, WithHeader(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                             std::string(8, '\0')));
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().message();
}

// The format disallows duplicate keys; JSON parsing keeps the last, hiding the first tensor.
TEST(Safetensors, DuplicateTensorNamesAreRefused) {
  const std::string err = OpenError(WithHeader(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      std::string(8, '\0')));
  EXPECT_NE(err.find("names 'w' twice"), std::string::npos) << err;
}

TEST(Safetensors, MalformedEntries) {
  for (
      const char* h :
      {R"({"w": 5})", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})",
       R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
       R"({"w": {"dtype": "F32", "shape": [1]}})",
       R"({"w": {"shape": [1], "data_offsets": [0, 4]}})",
       R"({"w": {"dtype": "F32", "shape": [1e30], "data_offsets": [0, 4]}})",
       R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 4]}})"}) {
    EXPECT_FALSE(OpenError(WithHeader(h, std::string(4, '\0'))).empty()) << h;
  }
}

TEST(Safetensors, HeaderParserNeverCrashesOnMutations) {
  // Byte flips and truncations of a valid image: every result is ok or a Status.
  const std::string good = SafetensorsBytes(TwoTensors());
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    auto r = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "fuzz");
    if (r.ok()) {
      for (const auto& e : *r) EXPECT_LE(e.offset + e.nbytes, b.size());
    }
  }
}

TEST(SafetensorsSet, ShardedViaIndex) {
  const std::string dir = MakeTempDir();
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", {TwoTensors()[0]});
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors", {TwoTensors()[1]});
  WriteFile(dir + "/model.safetensors.index.json",
            R"({"metadata": {"total_size": 32}, "weight_map": {
                 "a": "model-00001-of-00002.safetensors",
                 "b": "model-00002-of-00002.safetensors"}})");
  auto set = SafetensorsSet::OpenDir(dir);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ((*set)->files().size(), 2u);
  ASSERT_NE((*set)->Find("b"), nullptr);
  EXPECT_NE((*set)->Find("b")->file->path().find("00002"), std::string::npos);
  EXPECT_EQ((*set)->Names(), (std::vector<std::string>{"a", "b"}));
}

TEST(SafetensorsSet, IndexErrors) {
  const std::string dir = MakeTempDir();
  WriteSafetensors(dir + "/one.safetensors", TwoTensors());
  WriteFile(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"a": "one.safetensors", "c": "two.safetensors"}})");
  auto set = SafetensorsSet::OpenDir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("missing file"), std::string::npos);
  EXPECT_NE(set.status().message().find("two.safetensors"), std::string::npos);

  WriteFile(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"a": "one.safetensors", "zz": "one.safetensors"}})");
  set = SafetensorsSet::OpenDir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("'zz'"), std::string::npos) << set.status().message();

  WriteFile(dir + "/model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_FALSE(SafetensorsSet::OpenDir(dir).ok());
}

TEST(SafetensorsSet, DuplicateTensorAcrossFiles) {
  const std::string dir = MakeTempDir();
  WriteSafetensors(dir + "/x1.safetensors", TwoTensors());
  WriteSafetensors(dir + "/x2.safetensors", {TwoTensors()[1]});
  auto set = SafetensorsSet::OpenDir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("'b'"), std::string::npos);
}

TEST(SafetensorsSet, EmptyDirectory) {
  auto set = SafetensorsSet::OpenDir(MakeTempDir());
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace mimo

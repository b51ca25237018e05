// mask_embedding.pt reader: the torch.save files in tests/data/torch_pickle (written by torch 1.13
// through scripts/make_torch_pickle_fixtures.py) read back to exactly the bytes torch.load gives
// (expected.json, written by the same script from torch); every malformed or hostile file is one
// clear Status naming the file and the problem, never a crash or a call.
#include "io/torch_pickle.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/stored_zip.h"
#include "io/test_files.h"

namespace mimo {
namespace {

using namespace testing_io;  // NOLINT
using namespace std::string_literals;

const std::string kDir = std::string(MIMO_SOURCE_DIR) + "/tests/data/torch_pickle/";

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Hex(const std::vector<uint8_t>& b) {
  std::string out;
  for (uint8_t x : b) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", x);
    out += buf;
  }
  return out;
}

float ElementAsF32(const TorchTensor& t, size_t i) {
  uint16_t h;
  float f;
  switch (t.dtype) {
    case DType::kBF16:
      std::memcpy(&h, &t.data[2 * i], 2);
      return BF16ToF32(h);
    case DType::kF16:
      std::memcpy(&h, &t.data[2 * i], 2);
      return F16ToF32(h);
    default:
      std::memcpy(&f, &t.data[4 * i], 4);
      return f;
  }
}

const json& Expected() {
  static const json kExpected = json::parse(ReadFile(kDir + "expected.json"));
  return kExpected;
}

// Reads fixture `name` and compares it with what torch.load returned for it.
void ExpectMatchesTorch(const std::string& name) {
  SCOPED_TRACE(name);
  const json& want = Expected().at("fixtures").at(name);
  auto got = ReadMaskEmbeddingPt(kDir + name);
  ASSERT_TRUE(got.ok()) << got.status().message();
  if (want["mask_token_id"].is_null()) {
    EXPECT_FALSE(got->mask_token_id.has_value());
  } else {
    ASSERT_TRUE(got->mask_token_id.has_value());
    EXPECT_EQ(*got->mask_token_id, want["mask_token_id"].get<int64_t>());
  }
  const TorchTensor& t = got->embedding;
  EXPECT_EQ(DTypeName(t.dtype), want["dtype"].get<std::string>());
  EXPECT_EQ(t.shape, want["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(Hex(t.data), want["hex"].get<std::string>());
  const auto values = want["values"].get<std::vector<double>>();
  ASSERT_EQ(t.data.size(), values.size() * DTypeSize(t.dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(ElementAsF32(t, i), static_cast<float>(values[i])) << "element " << i;
  }
  // The in-memory entry point gives the same result.
  auto mem = ParseMaskEmbeddingPt(AsBytes(ReadFile(kDir + name)), name);
  ASSERT_TRUE(mem.ok()) << mem.status().message();
  EXPECT_EQ(mem->embedding.data, t.data);
  EXPECT_EQ(mem->mask_token_id, got->mask_token_id);
}

TEST(TorchPickle, DictBf16MatchesTorch) { ExpectMatchesTorch("dict_bf16.pt"); }
TEST(TorchPickle, BareBf16TensorHasNoMaskTokenId) { ExpectMatchesTorch("bare_bf16.pt"); }
TEST(TorchPickle, DictF32MatchesTorch) { ExpectMatchesTorch("dict_f32.pt"); }
TEST(TorchPickle, ViewWithStorageOffsetReadsItsSlice) {
  // torch saved all 100 elements of the storage; only big[5:69] comes back.
  ExpectMatchesTorch("dict_offset.pt");
}
TEST(TorchPickle, ExtraKeysAreIgnored) { ExpectMatchesTorch("dict_extra_keys.pt"); }
TEST(TorchPickle, ParameterEmbeddingReadsItsData) { ExpectMatchesTorch("dict_parameter.pt"); }
TEST(TorchPickle, TwoDimensionalShapeIsKept) { ExpectMatchesTorch("dict_2d_bf16.pt"); }
TEST(TorchPickle, ZipfileWrittenArchiveWithByteorderLittle) {
  ExpectMatchesTorch("byteorder_little.pt");
}

TEST(TorchPickle, EveryExpectedFixtureIsTested) {
  // A fixture added to the script without a test here fails this list.
  std::vector<std::string> names;
  for (const auto& item : Expected().at("fixtures").items()) names.push_back(item.key());
  EXPECT_EQ(names,
            (std::vector<std::string>{"bare_bf16.pt", "byteorder_little.pt", "dict_2d_bf16.pt",
                                      "dict_bf16.pt", "dict_extra_keys.pt", "dict_f32.pt",
                                      "dict_offset.pt", "dict_parameter.pt"}));
}

// ---------------------------------------------------------------------------------------------
// Refusals of the script's files.

// The error for fixture `name` (which must fail); checks it names the file.
std::string FixtureError(const std::string& name) {
  auto r = ReadMaskEmbeddingPt(kDir + name);
  EXPECT_FALSE(r.ok()) << name;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  EXPECT_NE(r.status().message().find(kDir + name), std::string::npos) << r.status().message();
  return r.status().message();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(TorchPickleErrors, MissingFileIsNotFound) {
  const std::string path = MakeTempDir() + "/mask_embedding.pt";
  auto r = ReadMaskEmbeddingPt(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(r.status().message(), path);
}

TEST(TorchPickleErrors, NotAZip) {
  const std::string path = MakeTempDir() + "/mask_embedding.pt";
  WriteFile(path, "this is a text file, not an archive\n");
  auto r = ReadMaskEmbeddingPt(path);
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), path);
  EXPECT_HAS(r.status().message(), "not a zip archive");
}

TEST(TorchPickleErrors, LegacyFormatIsNamed) {
  EXPECT_HAS(FixtureError("legacy.pt"), "legacy torch.save format");
}

TEST(TorchPickleErrors, TruncatedArchive) {
  const std::string full = ReadFile(kDir + "dict_bf16.pt");
  for (size_t keep : {full.size() / 2, full.size() - 1, size_t{30}, size_t{0}}) {
    auto r = ParseMaskEmbeddingPt(AsBytes(full.substr(0, keep)), "cut.pt");
    ASSERT_FALSE(r.ok()) << keep;
    EXPECT_HAS(r.status().message(), "cut.pt");
    if (keep >= 4) {
      EXPECT_HAS(r.status().message(), "truncated");
    }
  }
}

TEST(TorchPickleErrors, CompressedEntry) {
  const std::string msg = FixtureError("compressed.pt");
  EXPECT_HAS(msg, "dict_bf16/data.pkl' is compressed (method 8)");
  EXPECT_HAS(msg, "torch.save writes stored entries");
}

TEST(TorchPickleErrors, ForbiddenGlobalIsNeverCalled) {
  const std::string msg = FixtureError("forbidden_global.pt");
  EXPECT_HAS(msg, "unsupported global 'posix.system'");
  EXPECT_HAS(msg, "data.pkl byte 44");
}

TEST(TorchPickleErrors, NonContiguousTensor) {
  const std::string msg = FixtureError("noncontiguous.pt");
  EXPECT_HAS(msg, "size [16, 4] has strides [1, 16]");
  EXPECT_HAS(msg, "not contiguous");
}

TEST(TorchPickleErrors, UnsupportedStorageDtype) {
  EXPECT_HAS(FixtureError("f64.pt"), "unsupported storage class 'torch.DoubleStorage'");
}

TEST(TorchPickleErrors, BigEndianByteorder) {
  EXPECT_HAS(FixtureError("byteorder_big.pt"), "byteorder is 'big'");
}

TEST(TorchPickleErrors, CorruptStorageFailsCrc) {
  std::string bytes = ReadFile(kDir + "dict_bf16.pt");
  // The storage's local header comes first in the file; its data follows the name and the
  // (padding) extra field.
  const size_t name_at = bytes.find("dict_bf16/data/0");
  ASSERT_NE(name_at, std::string::npos);
  const size_t extra_len =
      static_cast<uint8_t>(bytes[name_at - 2]) | static_cast<uint8_t>(bytes[name_at - 1]) << 8;
  bytes[name_at + 16 + extra_len + 3] ^= 0x10;
  auto r = ParseMaskEmbeddingPt(AsBytes(bytes), "flip.pt");
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "zip entry 'dict_bf16/data/0' fails its CRC-32 check");
}

TEST(TorchPickleErrors, EveryTruncationAndByteFlipIsAStatus) {
  // Not a fuzzer, but every prefix and every single-bit change of a real file must return
  // (an error for prefixes; the CRC or a structural check catches most flips).
  const std::string full = ReadFile(kDir + "dict_bf16.pt");
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_FALSE(ParseMaskEmbeddingPt(AsBytes(full.substr(0, n)), "cut").ok()) << n;
  }
  for (size_t i = 0; i < full.size(); ++i) {
    std::string flipped = full;
    flipped[i] ^= 0x01;
    (void)ParseMaskEmbeddingPt(AsBytes(flipped), "flip");
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-made archives: a stored-zip writer (APPNOTE 4.3: local headers, central directory, EOCD;
// no ZIP64, no padding) and pickle bytes spelled out opcode by opcode, for the cases torch never
// writes.

using test::BitwiseCrc32;
using test::LE;
using test::StoredZip;

// Pickle pieces (protocol 2).
std::string Str(const std::string& s) { return "X" + LE(s.size(), 4) + s; }
std::string Int(int32_t v) { return "J" + LE(static_cast<uint32_t>(v), 4); }
std::string IntTuple(std::initializer_list<int> v) {
  std::string out = "(";
  for (int x : v) out += Int(x);
  return out + "t";
}
// _rebuild_tensor_v2(storage(class, key, numel), offset, size, stride, False, OrderedDict()).
std::string Tensor(const std::string& storage_class, const std::string& key, int numel, int offset,
                   std::initializer_list<int> size, std::initializer_list<int> stride) {
  return "ctorch._utils\n_rebuild_tensor_v2\n(" +
         ("(" + Str("storage") + "ctorch\n" + storage_class + "\n" + Str(key) + Str("cpu") +
          Int(numel) + "tQ") +
         Int(offset) + IntTuple(size) + IntTuple(stride) + "\x89" +
         "ccollections\nOrderedDict\n)R" + "tR";
}
std::string Dict(const std::string& items) { return "\x80\x02}(" + items + "u."; }

const std::string kFourF32 = F32Bytes({1.5f, -2.0f, 0.25f, 8.0f});

// The result of reading an archive of data.pkl = `pkl` plus `extra` entries, all under "arch/".
StatusOr<MaskEmbeddingFile> ParseArchive(
    const std::string& pkl, std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<std::pair<std::string, std::string>> entries = {{"arch/data.pkl", pkl}};
  for (auto& [name, data] : extra) entries.emplace_back("arch/" + name, std::move(data));
  entries.emplace_back("arch/version", "3\n");
  const std::string zip = StoredZip(entries);
  return ParseMaskEmbeddingPt(AsBytes(zip), "made.pt");
}

std::string ArchiveError(const std::string& pkl,
                         std::vector<std::pair<std::string, std::string>> extra = {}) {
  auto r = ParseArchive(pkl, std::move(extra));
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_HAS(r.status().message(), "made.pt");
  return r.status().message();
}

TEST(TorchPickleMade, WriterSanity) {
  auto r = ParseArchive(Dict(Str("mask_token_id") + Int(9) + Str("embedding") +
                             Tensor("FloatStorage", "0", 4, 0, {4}, {1})),
                        {{"data/0", kFourF32}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->mask_token_id, 9);
  EXPECT_EQ(r->embedding.dtype, DType::kF32);
  EXPECT_EQ(r->embedding.shape, std::vector<int64_t>{4});
  EXPECT_EQ(std::string(r->embedding.data.begin(), r->embedding.data.end()), kFourF32);
}

TEST(TorchPickleMade, SizeOneDimensionsMayHaveAnyStride) {
  // torch's contiguity rule: [1, 4] with strides (999, 1) is contiguous.
  auto r = ParseArchive("\x80\x02" + Tensor("FloatStorage", "0", 4, 0, {1, 4}, {999, 1}) + ".",
                        {{"data/0", kFourF32}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->mask_token_id.has_value());
  EXPECT_EQ(r->embedding.shape, (std::vector<int64_t>{1, 4}));
}

TEST(TorchPickleMade, UnsupportedOpcodeIsNamed) {
  // NEWOBJ (protocol 2): builds an arbitrary class instance.
  EXPECT_HAS(ArchiveError("\x80\x02\x81."), "unsupported pickle opcode 0x81 (NEWOBJ) at byte 2");
  // INST: the protocol-0 way to call a global.
  EXPECT_HAS(ArchiveError("\x80\x02ios\nsystem\n."), "unsupported pickle opcode 0x69 (INST)");
}

TEST(TorchPickleMade, StackGlobalIsCheckedToo) {
  EXPECT_HAS(ArchiveError("\x80\x04\x8c\x08\x62uiltins\x8c\x04\x65val\x93."),
             "unsupported global 'builtins.eval'");
}

TEST(TorchPickleMade, UntypedStorageIsRefused) {
  EXPECT_HAS(ArchiveError("\x80\x02" + Tensor("UntypedStorage", "0", 16, 0, {4}, {1}) + "."),
             "'torch.UntypedStorage' carries no element type");
}

TEST(TorchPickleMade, TruncatedPickle) {
  EXPECT_HAS(ArchiveError("\x80\x02}("), "ends without STOP");
  EXPECT_HAS(ArchiveError("\x80\x02X" + LE(16, 4) + "abc"), "BINUNICODE needs 16 argument bytes");
}

TEST(TorchPickleMade, StackAndMemoMisuse) {
  EXPECT_HAS(ArchiveError("\x80\x02R."), "REDUCE on an empty stack");
  EXPECT_HAS(ArchiveError("\x80\x02N(R."), "REDUCE on an empty stack");  // MARK is a fence
  EXPECT_HAS(ArchiveError("\x80\x02h\x05."), "memo entry 5 was never stored");
  EXPECT_HAS(ArchiveError("\x80\x02NN."), "STOP leaves 1 values");
  EXPECT_HAS(ArchiveError("\x80\x02N.N"), "1 bytes follow STOP");
  EXPECT_HAS(ArchiveError("\x80\x02Ns."), "SETITEM on an empty stack");
  EXPECT_HAS(ArchiveError("\x80\x02NNNs."), "SETITEM on a None");
  // A list that contains itself is only indices here: no cycle to leak or recurse through.
  EXPECT_HAS(ArchiveError("\x80\x02]q\x00h\x00\x61."s), "the saved object is a list");
}

TEST(TorchPickleMade, DictContentErrors) {
  const std::string tensor = Tensor("FloatStorage", "0", 4, 0, {4}, {1});
  const std::vector<std::pair<std::string, std::string>> storage = {{"data/0", kFourF32}};
  EXPECT_HAS(ArchiveError(Dict(Str("mask_token_id") + Int(1)), storage), "no 'embedding' key");
  EXPECT_HAS(ArchiveError(Dict(Str("embedding") + Str("x")), storage),
             "'embedding' is a str, expected a tensor");
  // LONG1 0xff is -1 (two's complement).
  EXPECT_HAS(ArchiveError(Dict(Str("mask_token_id") + "\x8a\x01\xff" + Str("embedding") + tensor),
                          storage),
             "'mask_token_id' is -1");
  EXPECT_HAS(
      ArchiveError(Dict(Str("mask_token_id") + Str("7") + Str("embedding") + tensor), storage),
      "'mask_token_id' is str");
  EXPECT_HAS(ArchiveError("\x80\x02N."), "the saved object is a None, expected a dict or a tensor");
}

TEST(TorchPickleMade, StorageErrors) {
  const std::string pkl = "\x80\x02" + Tensor("FloatStorage", "7", 4, 0, {4}, {1}) + ".";
  EXPECT_HAS(ArchiveError(pkl), "storage '7' has no archive entry 'arch/data/7'");
  EXPECT_HAS(ArchiveError(pkl, {{"data/7", kFourF32.substr(0, 12)}}),
             "storage '7' holds 4 F32 elements but its entry has 12 bytes");
  EXPECT_HAS(ArchiveError("\x80\x02" + Tensor("FloatStorage", "0", 4, 2, {4}, {1}) + ".",
                          {{"data/0", kFourF32}}),
             "tensor of 4 elements at storage offset 2 does not fit its storage of 4");
}

TEST(TorchPickleMade, ArchiveWithoutPickle) {
  const std::string zip = StoredZip({{"arch/version", "3\n"}});
  auto r = ParseMaskEmbeddingPt(AsBytes(zip), "made.pt");
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "no <archive>/data.pkl");
}

}  // namespace
}  // namespace mimo

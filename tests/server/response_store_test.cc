// ResponseStore's bounds (entries, bytes; oldest evicted first) and the chat helpers the
// protocols share: leading system messages merged into one prompt, reasoning tokens counted.
#include "server/response_store.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdio>
#include <vector>

#include "server/chat_turn.h"
#include "server/parse_context.h"

namespace mimo {
namespace {

StoredResponse Entry(const std::string& text) {
  return StoredResponse{OJson{{"text", text}}, OJson::array(), OJson::array()};
}

TEST(ResponseStore, KeepsAtMostMaxEntriesOldestEvictedFirst) {
  ResponseStore s(3, size_t{1} << 20);
  for (int i = 0; i < 5; ++i) s.Put("r" + std::to_string(i), Entry("x"));
  EXPECT_EQ(s.size(), 3u);
  EXPECT_FALSE(s.Get("r0"));
  EXPECT_FALSE(s.Get("r1"));
  ASSERT_TRUE(s.Get("r4"));
  EXPECT_EQ(s.Get("r4")->response["text"], "x");
  EXPECT_TRUE(s.Erase("r3"));
  EXPECT_FALSE(s.Erase("r3"));
  EXPECT_EQ(s.size(), 2u);
}

TEST(ResponseStore, KeepsWithinMaxBytes) {
  const std::string big(150, 'a');
  size_t one = 0;
  {
    ResponseStore probe(100, size_t{1} << 20);
    probe.Put("r0", Entry(big));
    one = probe.bytes();
  }
  const size_t bound = one * 5 / 2;  // room for two entries, not three
  ResponseStore s(100, bound);
  for (int i = 0; i < 5; ++i) s.Put("r" + std::to_string(i), Entry(big));
  EXPECT_LE(s.bytes(), bound);
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.Get("r4") && s.Get("r3"));
  s.Put("huge", Entry(std::string(bound, 'b')));  // larger than the bound alone: not kept
  EXPECT_FALSE(s.Get("huge"));
  EXPECT_TRUE(s.Get("r4"));
  s.Put("r4", Entry("small"));  // replacing an id updates its bytes
  EXPECT_EQ(s.Get("r4")->response["text"], "small");
  EXPECT_EQ(s.size(), 2u);
}

// A Response-like document: nested objects, arrays, short and long strings.
OJson StoredDoc(int i) {
  OJson items = OJson::array();
  for (int k = 0; k < 8; ++k) {
    items.push_back({{"id", "msg_" + std::to_string(i * 100 + k) + std::string(20, 'x')},
                     {"type", "message"},
                     {"role", k % 2 ? "assistant" : "user"},
                     {"content", OJson::array({{{"type", "output_text"},
                                                {"text", std::string(10 + 37 * k, 'a' + k)},
                                                {"annotations", OJson::array()}}})}});
  }
  return OJson::parse(OJson{{"id", "resp_" + std::to_string(i)}, {"output", items},
                            {"metadata", {{"k", "v"}}}, {"n", i}, {"ok", true}}
                          .dump());
}

// The bytes a document is counted as are the bytes the allocator hands out for it.
TEST(ResponseStore, JsonHeapBytesMatchesTheAllocator) {
  std::vector<OJson> keep;
  keep.reserve(2000);
  const size_t before = mallinfo2().uordblks;
  size_t counted = 0;
  for (int i = 0; i < 2000; ++i) {
    keep.push_back(StoredDoc(i));
    counted += JsonHeapBytes(keep.back());
  }
  const size_t used = mallinfo2().uordblks - before;
  std::printf("2000 documents: %zu bytes counted, %zu allocated (text %zu)\n", counted, used,
              2000 * keep[0].dump().size());
  EXPECT_NEAR(static_cast<double>(counted), static_cast<double>(used), 0.05 * used);
}

// The store's byte bound holds in real memory (it used to count the dumped text: ~16x less).
TEST(ResponseStore, ByteBoundIsRealMemory) {
  const size_t bound = size_t{4} << 20;
  const size_t before = mallinfo2().uordblks;
  {
    ResponseStore s(1 << 20, bound);
    for (int i = 0; i < 5000; ++i) {
      StoredResponse r{StoredDoc(i), OJson::array(), OJson::array()};
      s.Put("resp_" + std::to_string(i), std::move(r));
    }
    const size_t used = mallinfo2().uordblks - before;
    std::printf("store: %zu entries, %zu bytes counted, %zu allocated (bound %zu)\n", s.size(),
                s.bytes(), used, bound);
    EXPECT_LE(s.bytes(), bound);
    EXPECT_LE(used, bound * 11 / 10);
    EXPECT_GE(used, bound * 8 / 10);  // and it is used, not over-counted
    EXPECT_LT(s.size(), 5000u);
  }
}

TEST(ChatTurn, MergesLeadingSystemMessagesOnly) {
  const OJson in = OJson::parse(R"([
    {"role": "system", "content": "A."}, {"role": "system", "content": ""},
    {"role": "system", "content": "B."}, {"role": "user", "content": "hi"},
    {"role": "system", "content": "C."}, {"role": "user", "content": "bye"}])");
  const OJson out = MergeLeadingSystemMessages(in);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["content"], "A.\n\nB.");
  EXPECT_EQ(out[1]["role"], "user");
  EXPECT_EQ(out[2]["content"], "C.");  // a later system turn stays where it is
  EXPECT_EQ(MergeLeadingSystemMessages(OJson::array()).size(), 0u);
}

TEST(ChatTurn, CountsReasoningTokensThroughThinkEnd) {
  const int32_t kStart = 10, kEnd = 11, kCall = 12;
  PreparedTurn reasons;
  reasons.reasons = true;
  ReasoningTokenCounter c(reasons, kStart, kEnd, kCall);
  c.Add(std::vector<int32_t>{kStart, 1, 2});
  c.Add(std::vector<int32_t>{3, kEnd, 4, 5});
  EXPECT_EQ(c.count(), 3);  // <think> 1 2 3 </think>: the tags are not reasoning
  // No leading <think>: no reasoning.
  ReasoningTokenCounter none(reasons, kStart, kEnd, kCall);
  none.Add(std::vector<int32_t>{1, kStart, 2, kEnd});
  EXPECT_EQ(none.count(), 0);
  // The prompt opened the block: counted from the first token; a <tool_call> ends it.
  PreparedTurn opened;
  opened.reasons = opened.prompt_in_reasoning = true;
  ReasoningTokenCounter in(opened, kStart, kEnd, kCall);
  in.Add(std::vector<int32_t>{1, 2, kCall, 3});
  EXPECT_EQ(in.count(), 2);
  // Thinking off: nothing counts.
  ReasoningTokenCounter off(PreparedTurn{}, kStart, kEnd, kCall);
  off.Add(std::vector<int32_t>{kStart, 1, kEnd});
  EXPECT_EQ(off.count(), 0);
}

}  // namespace
}  // namespace mimo

namespace mimo {
namespace {

TEST(ResponseStore, FindsItemsOfStoredResponsesUntilEvicted) {
  ResponseStore s(1, size_t{1} << 20);
  StoredResponse r;
  r.response = OJson::parse(R"({"output": [{"id": "fc_1", "type": "function_call"}]})");
  r.input_items = OJson::parse(R"([{"id": "msg_1", "type": "message"}])");
  s.Put("resp_1", r);
  ASSERT_TRUE(s.FindItem("fc_1"));
  EXPECT_EQ((*s.FindItem("fc_1"))["type"], "function_call");
  EXPECT_EQ((*s.FindItem("msg_1"))["type"], "message");
  EXPECT_FALSE(s.FindItem("nope"));
  s.Put("resp_2", Entry("x"));  // evicts resp_1 and its items
  EXPECT_FALSE(s.FindItem("fc_1"));
  EXPECT_FALSE(s.FindItem("msg_1"));
}

// Issue 47: a request that references an item keeps the reference among its input items under the
// item's id; the reference must not shadow the item, or the second reference to it fails.
TEST(ResponseStore, AnItemCanBeReferencedAnyNumberOfTimes) {
  ResponseStore s(8, size_t{1} << 20);
  StoredResponse first;
  first.response = OJson::parse(R"({"output": [{"id": "rs_1", "type": "reasoning"}]})");
  s.Put("resp_1", first);
  StoredResponse ref;  // the next request: only a reference to rs_1
  ref.input_items = OJson::parse(R"([{"id": "rs_1", "type": "item_reference"}])");
  for (int i = 2; i < 6; ++i) {
    s.Put("resp_" + std::to_string(i), ref);
    ASSERT_TRUE(s.FindItem("rs_1")) << i;
    EXPECT_EQ((*s.FindItem("rs_1"))["type"], "reasoning") << i;
  }
  // A response holding a copy of the item keeps it referable after the first one is gone, and
  // erasing the copy leaves the first one's.
  StoredResponse copy;
  copy.input_items = OJson::parse(R"([{"id": "rs_1", "type": "reasoning", "n": 2}])");
  s.Put("resp_copy", copy);
  EXPECT_EQ((*s.FindItem("rs_1"))["n"], 2);  // the newest holder's
  EXPECT_TRUE(s.Erase("resp_copy"));
  ASSERT_TRUE(s.FindItem("rs_1"));
  EXPECT_FALSE((*s.FindItem("rs_1")).contains("n"));
  s.Put("resp_copy", copy);
  EXPECT_TRUE(s.Erase("resp_1"));
  EXPECT_EQ((*s.FindItem("rs_1"))["n"], 2);
  EXPECT_TRUE(s.Erase("resp_copy"));
  EXPECT_FALSE(s.FindItem("rs_1"));  // only references are left
}

}  // namespace
}  // namespace mimo

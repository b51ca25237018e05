// Request bodies built to hurt the server (issue 26): JSON nested thousands of levels deep in
// every field a handler copies, dumps or parses, counts that would size huge allocations, token
// ids that wrap at 2^32, and schema keywords of the wrong type. Each is a fast 400 naming the
// field (or the depth limit); the server keeps answering and its memory stays flat.
import assert from "node:assert/strict";
import fs from "node:fs";
import { after, before, describe, test } from "node:test";

import { NANO, assertOpenAiError, post, spawnServe } from "./harness.mjs";

const USER = [{ role: "user", content: "hi" }];
const DEPTH_LIMIT = 128;

// `levels` nested arrays around a number, as raw JSON text (JSON.stringify would recurse).
const nested = (levels) => "[".repeat(levels) + "1" + "]".repeat(levels);
// Objects instead of arrays: {"a":{"a":...{"a":1}...}}.
const nestedObj = (levels) => '{"a":'.repeat(levels) + "1" + "}".repeat(levels);

function rssKb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]);
}

describe("request limits: nesting, counts, token ids, schema keywords", () => {
  let server, rss0;
  const url = (p) => server.url + p;
  before(async () => {
    server = await spawnServe(["serve", "--model", NANO, "--port", "0", "--no-webui", "--no-warmup",
      "--max-model-len", "512"]);
    rss0 = rssKb(server.proc.pid);
  });
  after(async () => {
    if (!server) return;
    const grown = (rssKb(server.proc.pid) - rss0) / 1024;
    assert.ok(grown < 100, `the server's RSS grew by ${grown.toFixed(1)} MB over the file`);
    assert.equal(await server.stop(), 0, server.stderr());
  });

  // Every place a deep value can stand: [path, body text with the value spliced in, protocol].
  const places = (v) => [
    ["/v1/chat/completions", `{"messages": [{"role": "user", "content": ${v}}]}`, "messages content"],
    ["/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": ${v}}}`, "chat_template_kwargs"],
    ["/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": ${v}}}}}]}`, "tools parameters"],
    ["/v1/messages", `{"model": "mimo-v2-nano", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": ${v}}}]}, {"role": "user", "content": "go on"}]}`, "Anthropic tool_use.input"],
    ["/v1/responses", `{"input": [{"type": "message", "role": "user", "content": ${v}}]}`, "Responses input"],
    ["/tokenize", `{"prompt": "hi", "extra": ${v}}`, "/tokenize body"],
    ["/v1/completions", `{"prompt": ${v}}`, "completions prompt"],
  ];

  for (const levels of [1000, 50000, 100000]) {
    test(`${levels} levels of nesting in every field: 400 naming the depth limit`, async () => {
      for (const make of [nested, nestedObj]) {
        for (const [path, body, what] of places(make(levels))) {
          const t0 = Date.now();
          const r = await post(url(path), body);
          assert.equal(r.status, 400, `${what}: ${r.text}`);
          const message = path === "/v1/messages" ? r.json.error.message : r.json.error.message;
          assert.match(message, /nested deeper than 128 levels/, `${what}: ${r.text}`);
          assert.ok(Date.now() - t0 < 2000, `${what} took ${Date.now() - t0} ms`);
        }
      }
    });
  }

  test("a tool call's arguments string nested too deep: 400", async () => {
    const r = await post(url("/v1/chat/completions"), {
      messages: [...USER, { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function",
        function: { name: "f", arguments: nested(50000) } }] }, { role: "tool", tool_call_id: "c1", content: "ok" }],
      max_tokens: 2,
    });
    assertOpenAiError(assert, r, 400, { match: /nested deeper than 128 levels/ });
    const rr = await post(url("/v1/responses"), {
      input: [{ type: "function_call", call_id: "c1", name: "f", arguments: nestedObj(50000) },
        { type: "function_call_output", call_id: "c1", output: "ok" }],
      max_output_tokens: 16,
    });
    assert.equal(rr.status, 400, rr.text);
  });

  test("exactly 128 levels are accepted where the field allows a value", async () => {
    // {"messages": [...], "chat_template_kwargs": {"x": <126 levels>}} is 128 deep in all.
    let r = await post(url("/v1/chat/completions"),
      `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "chat_template_kwargs": {"x": ${nested(DEPTH_LIMIT - 2)}}}`);
    assert.equal(r.status, 200, r.text);
    r = await post(url("/tokenize"), `{"prompt": "hi", "extra": ${nestedObj(DEPTH_LIMIT - 1)}}`);
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.count > 0);
    // One more level is refused.
    r = await post(url("/tokenize"), `{"prompt": "hi", "extra": ${nestedObj(DEPTH_LIMIT)}}`);
    assertOpenAiError(assert, r, 400, { match: /nested deeper than 128 levels/ });
    // Brackets inside strings are not nesting.
    r = await post(url("/tokenize"), { prompt: "[".repeat(5000) + "{".repeat(5000) });
    assert.equal(r.status, 200, r.text);
  });

  test("n and best_of are bounded before anything is allocated", async () => {
    for (const [path, base] of [["/v1/chat/completions", { messages: USER }], ["/v1/completions", { prompt: "hi" }]]) {
      for (const n of [2147483647, 129, 0]) {
        const t0 = Date.now();
        const r = await post(url(path), { ...base, n, max_tokens: 1 });
        assertOpenAiError(assert, r, 400, { param: "n", match: /\[1, 128\]/ });
        assert.ok(Date.now() - t0 < 2000, `n=${n} on ${path} took ${Date.now() - t0} ms`);
      }
      assertOpenAiError(assert, await post(url(path), { ...base, best_of: 2147483647, max_tokens: 1 }), 400, { param: "best_of" });
    }
  });

  test("completions: prompts times n over 1024 choices, or over 1024 prompts: 400", async () => {
    const prompts = Array.from({ length: 16 }, () => "a");
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: prompts, n: 65, max_tokens: 1 }), 400,
      { param: "n", match: /1024/ });
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: Array.from({ length: 1025 }, () => "a"), max_tokens: 1 }), 400,
      { param: "prompt", match: /1024/ });
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: Array.from({ length: 1025 }, () => [1]), max_tokens: 1 }), 400,
      { param: "prompt" });
  });

  test("lists bounded: stop, stop_sequences, stop_token_ids, logit_bias, tools, top_logprobs", async () => {
    const chat = url("/v1/chat/completions");
    const many = (k, f) => Array.from({ length: k }, (_, i) => f(i));
    assertOpenAiError(assert, await post(chat, { messages: USER, stop: many(65, (i) => `s${i}`) }), 400, { param: "stop", match: /64/ });
    assertOpenAiError(assert, await post(chat, { messages: USER, stop_token_ids: many(1025, (i) => i) }), 400, { param: "stop_token_ids" });
    assertOpenAiError(assert, await post(chat, { messages: USER, logit_bias: Object.fromEntries(many(1025, (i) => [String(i), 1])) }), 400, { param: "logit_bias" });
    assertOpenAiError(assert, await post(chat, { messages: USER, tools: many(513, (i) => ({ type: "function", function: { name: `f${i}` } })) }), 400, { param: "tools" });
    assertOpenAiError(assert, await post(chat, { messages: USER, logprobs: true, top_logprobs: 21 }), 400, { param: "top_logprobs" });
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: "hi", logprobs: 21 }), 400, { param: "logprobs" });
    const r = await post(url("/v1/messages"), { model: "mimo-v2-nano", max_tokens: 4, messages: USER, stop_sequences: many(65, (i) => `s${i}`) });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, "error");
    assert.match(r.json.error.message, /stop_sequences/);
  });

  test("token ids are range-checked as 64-bit values", async () => {
    const wrapped = 4294967301;  // 2^32 + 5: an int32 read takes it for 5
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: [1, wrapped], max_tokens: 1 }), 400,
      { param: "prompt", match: /4294967301/ });
    assertOpenAiError(assert, await post(url("/v1/completions"), { prompt: [[1], [wrapped]], max_tokens: 1 }), 400, { param: "prompt" });
    assertOpenAiError(assert, await post(url("/detokenize"), { tokens: [wrapped] }), 400, { param: "tokens" });
    assertOpenAiError(assert, await post(url("/detokenize"), `{"tokens": [18446744073709551615]}`), 400, { param: "tokens" });
    assertOpenAiError(assert, await post(url("/v1/chat/completions"), { messages: USER, logit_bias: { [wrapped]: 5 } }), 400,
      { param: "logit_bias" });
    assertOpenAiError(assert, await post(url("/v1/chat/completions"), { messages: USER, stop_token_ids: [wrapped] }), 400,
      { param: "stop_token_ids" });
    // The id 5 itself is fine.
    const ok = await post(url("/detokenize"), { tokens: [5] });
    assert.equal(ok.status, 200, ok.text);
  });

  test("schema keywords of the wrong type: 400 naming the keyword", async () => {
    const schema = (s) => ({ messages: USER, max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: s } } });
    for (const [s, kw] of [
      [{ type: "string", minLength: "a" }, "minLength"],
      [{ type: "string", maxLength: [] }, "maxLength"],
      [{ type: "array", items: { type: "string" }, minItems: "2" }, "minItems"],
      [{ type: "number", minimum: "0" }, "minimum"],
      [{ type: "string", pattern: 5 }, "pattern"],
      [{ type: "object", properties: { a: { type: "string" } }, required: [1] }, "required"],
      [{ type: "object", properties: [] }, "properties"],
      [{ anyOf: {} }, "anyOf"],
      [{ $ref: 5 }, "\\$ref"],
      [{ type: "object", properties: { a: { type: "string", format: {} } } }, "format"],
    ]) {
      const r = await post(url("/v1/chat/completions"), schema(s));
      assertOpenAiError(assert, r, 400, { match: new RegExp(kw) });
      assert.doesNotMatch(r.json.error.message, /type_error|\[json\.exception/);
    }
    // A $ref cycle through anyOf is fine (a recursive schema), and so is a bad JSON pointer escape.
    const rec = await post(url("/v1/chat/completions"), schema({ $defs: { n: { anyOf: [{ type: "null" }, { type: "array", items: { $ref: "#/$defs/n" }, maxItems: 1 }] } }, $ref: "#/$defs/n" }));
    assert.equal(rec.status, 200, rec.text);
    const esc = await post(url("/v1/chat/completions"), schema({ $defs: { a: { type: "string" } }, $ref: "#/$defs/%zz" }));
    assert.equal(esc.status, 400, esc.text);
    const big = await post(url("/v1/chat/completions"), schema({ type: "array", prefixItems: [{ type: "string" }], items: false, $defs: {}, $ref: "#/prefixItems/99999999999999999999" }));
    assert.equal(big.status, 400, big.text);
  });

  test("the server still answers /health and a normal chat afterwards", async () => {
    const h = await fetch(url("/health"));
    assert.equal(h.status, 200);
    const r = await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 4, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices.length, 1);
    assert.equal(typeof r.json.choices[0].message.content, "string");
  });
});

// The OpenAI Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}, input_items)
// through the official `openai` client: `responses.create` and `responses.stream` (the SDK's
// stream helper checks every event against the response it accumulates), a function-tool round
// trip continued with `previous_response_id`, stored responses and their bound, `store: false`,
// reasoning effort and reasoning items (content and the signed `encrypted_content` that stateless
// agents send back; one this server did not sign is left out), structured output (`responses.parse` with zod) and usage. Meaningful answers
// on the default model; validity on random weights.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, OpenAI, ROOT, assertOpenAiError, ensureE2eModel, post, startServer } from "./harness.mjs";

const require = createRequire(path.join(ROOT, "third_party/package.json"));
const { z } = require("zod");
const { zodTextFormat } = require("openai/helpers/zod");

const WEATHER = {
  type: "function", name: "get_weather", description: "Get the current weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string", description: "The city name." } }, required: ["city"] },
  strict: false,
};

describe("responses: the Responses API on the default model", () => {
  let server, client;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "2048", "--responses-store-size", "4"]);
    client = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("create: a string input, reasoning off; usage adds up", async () => {
    const r = await client.responses.create({ model: "mimo-v2-nano", input: "What is 27 + 15?", temperature: 0, reasoning: { effort: "none" } });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, "response");
    assert.equal(r.status, "completed");
    assert.match(r.output_text, /42/);
    assert.deepEqual(r.output.map((o) => o.type), ["message"]);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  });

  test("reasoning on: a reasoning item with the working, reasoning tokens counted", async () => {
    const r = await client.responses.create({ model: "mimo-v2-nano", input: "What is 27 + 15?", temperature: 0, reasoning: { effort: "high" } });
    assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "message"]);
    assert.match(r.output[0].content[0].text, /Ones: 7 \+ 5 = 12/);
    assert.match(r.output_text, /42/);
    assert.ok(r.usage.output_tokens_details.reasoning_tokens > 5);
    assert.ok(r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens);
    // low effort: a budget of 1024 tokens, more than this model reasons; "minimal" keeps to 256.
    const s = client.responses.stream({ model: "mimo-v2-nano", input: "What is 27 + 15?", temperature: 0, reasoning: { effort: "low" } });
    const kinds = new Set();
    s.on("event", (e) => kinds.add(e.type));
    const f = await s.finalResponse();
    assert.deepEqual(f.output.map((o) => [o.type, o.content?.[0]?.text]), r.output.map((o) => [o.type, o.content?.[0]?.text]));
    for (const k of ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.completed"]) {
      assert.ok(kinds.has(k), k);
    }
  });

  test("a function-tool round trip, streamed, continued with previous_response_id", async () => {
    const s = client.responses.stream({
      model: "mimo-v2-nano", input: "What is the weather in Fenwick?", tools: [WEATHER], temperature: 0, reasoning: { effort: "none" },
    });
    let argDeltas = 0, argsDone = null;
    s.on("response.function_call_arguments.delta", () => { argDeltas++; });
    s.on("response.function_call_arguments.done", (e) => { argsDone = e.arguments; });
    const first = await s.finalResponse();
    const call = first.output.find((o) => o.type === "function_call");
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, "get_weather");
    assert.deepEqual(JSON.parse(call.arguments), { city: "Fenwick" });
    assert.equal(argsDone, call.arguments);
    assert.ok(argDeltas >= 1);
    assert.match(call.call_id, /^call_/);
    // Stored: GET returns it; the result continues from it without resending the conversation.
    const got = await client.responses.retrieve(first.id);
    // (the stream helper adds parsed_arguments to function calls)
    assert.deepEqual(got.output, first.output.map(({ parsed_arguments, ...o }) => o));
    const second = await client.responses.create({
      model: "mimo-v2-nano", previous_response_id: first.id, tools: [WEATHER], temperature: 0, reasoning: { effort: "none" },
      input: [{ type: "function_call_output", call_id: call.call_id, output: "{\"city\": \"Fenwick\", \"sky\": \"rain\", \"celsius\": 9}" }],
    });
    assert.equal(second.previous_response_id, first.id);
    assert.match(second.output_text, /Fenwick/);
    // The same turn sent whole (a stateless client) renders the same prompt.
    const stateless = await client.responses.create({
      model: "mimo-v2-nano", tools: [WEATHER], temperature: 0, reasoning: { effort: "none" }, store: false,
      input: [{ role: "user", content: "What is the weather in Fenwick?" }, call,
        { type: "function_call_output", call_id: call.call_id, output: "{\"city\": \"Fenwick\", \"sky\": \"rain\", \"celsius\": 9}" }],
    });
    assert.equal(stateless.usage.input_tokens, second.usage.input_tokens);
    assert.equal(stateless.output_text, second.output_text);
    // input_items: this request's items, newest first.
    const items = await client.responses.inputItems.list(second.id);
    assert.equal(items.data.length, 1);
    assert.equal(items.data[0].type, "function_call_output");
  });

  test("store: false is not kept; DELETE; unknown ids are 404; the store is bounded", async () => {
    const r = await client.responses.create({ model: "mimo-v2-nano", input: "Hi", max_output_tokens: 4, store: false });
    await assert.rejects(client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(client.responses.create({ model: "mimo-v2-nano", input: "Hi", previous_response_id: r.id }),
      (e) => e instanceof OpenAI.NotFoundError && e.error?.param === "previous_response_id");
    const kept = await client.responses.create({ model: "mimo-v2-nano", input: "Hi", max_output_tokens: 4 });
    const del = await client.responses.delete(kept.id);
    assert.deepEqual(del, { id: kept.id, object: "response", deleted: true });
    await assert.rejects(client.responses.retrieve(kept.id), (e) => e instanceof OpenAI.NotFoundError);
    // --responses-store-size 4: the oldest of five is evicted.
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await client.responses.create({ model: "mimo-v2-nano", input: `Hi ${i}`, max_output_tokens: 2 })).id);
    await assert.rejects(client.responses.retrieve(ids[0]), (e) => e instanceof OpenAI.NotFoundError);
    assert.equal((await client.responses.retrieve(ids[4])).id, ids[4]);
  });

  test("max_output_tokens reached: status incomplete with the reason", async () => {
    const r = await client.responses.create({ model: "mimo-v2-nano", input: "What is 27 + 15?", max_output_tokens: 5, reasoning: { effort: "none" } });
    assert.equal(r.status, "incomplete");
    assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(r.usage.output_tokens, 5);
  });

  test("reasoning items come back: as content, or as the signed encrypted_content (store false)", async () => {
    const r = await client.responses.create({
      model: "mimo-v2-nano", input: "What is 27 + 15?", temperature: 0, reasoning: { effort: "high" }, store: false,
      include: ["reasoning.encrypted_content"],
    });
    const rs = r.output.find((o) => o.type === "reasoning");
    assert.match(rs.encrypted_content, /^mimo1\./);
    const followUp = (reasoningItem) => client.responses.create({
      model: "mimo-v2-nano", max_output_tokens: 4, store: false, reasoning: { effort: "high" },
      input: [{ role: "user", content: "What is 27 + 15?" }, reasoningItem, ...r.output.filter((o) => o.type !== "reasoning"),
        { role: "user", content: "And 3 + 4?" }],
    });
    const withText = await followUp(rs);
    const encryptedOnly = await followUp({ type: "reasoning", id: rs.id, summary: [], encrypted_content: rs.encrypted_content });
    assert.equal(encryptedOnly.usage.input_tokens, withText.usage.input_tokens);  // the same reasoning rendered
    // Modified (or another provider's): left out of the prompt, the conversation goes on.
    const forged = rs.encrypted_content.replace(/^mimo1\.[A-Za-z0-9+/]{4}/, "mimo1.QUJD");
    const dropped = await followUp({ type: "reasoning", id: rs.id, summary: [], encrypted_content: forged });
    const foreign = await followUp({ type: "reasoning", id: rs.id, summary: [], encrypted_content: "gAAAAABpZ3x1" });
    const none = await client.responses.create({
      model: "mimo-v2-nano", max_output_tokens: 4, store: false, reasoning: { effort: "high" },
      input: [{ role: "user", content: "What is 27 + 15?" }, ...r.output.filter((o) => o.type !== "reasoning"), { role: "user", content: "And 3 + 4?" }],
    });
    assert.equal(dropped.usage.input_tokens, none.usage.input_tokens);
    assert.equal(foreign.usage.input_tokens, none.usage.input_tokens);
    assert.ok(withText.usage.input_tokens > none.usage.input_tokens + 5);
  });

  test("instructions and developer messages are one system prompt; errors name the field", async () => {
    const a = await post(server.url + "/v1/responses", { input: [{ role: "developer", content: "Be brief." }, { role: "user", content: "Hi" }], max_output_tokens: 1 });
    const b = await post(server.url + "/v1/responses", { instructions: "Be brief.", input: "Hi", max_output_tokens: 1 });
    assert.equal(a.json.usage.input_tokens, b.json.usage.input_tokens);
    const url = server.url + "/v1/responses";
    assertOpenAiError(assert, await post(url, {}), 400, { param: "input" });
    assertOpenAiError(assert, await post(url, { input: 5 }), 400, { param: "input" });
    assertOpenAiError(assert, await post(url, { input: [{ type: "web_search_call" }] }), 400, { param: "input[0].type" });
    assertOpenAiError(assert, await post(url, { input: "x", tools: [{ type: "teleport" }] }), 400, { param: "tools[0].type" });
    // Hosted tools (Codex always offers web_search) are left out, not refused: nothing here runs
    // them, and the prompt is the one without them.
    const hosted = await post(url, { input: "Hi", max_output_tokens: 1, tools: [{ type: "web_search" }, { type: "file_search", vector_store_ids: [] }] });
    assert.equal(hosted.status, 200, hosted.text);
    const plain = await post(url, { input: "Hi", max_output_tokens: 1 });
    assert.equal(hosted.json.usage.input_tokens, plain.json.usage.input_tokens);
    assertOpenAiError(assert, await post(url, { input: "x", tools: [{ type: "web_search" }], tool_choice: "required" }), 400, { param: "tool_choice" });
    assertOpenAiError(assert, await post(url, { input: "x", reasoning: { effort: "huge" } }), 400, { param: "reasoning.effort" });
    assertOpenAiError(assert, await post(url, { input: "x", max_output_tokens: 0 }), 400, { param: "max_output_tokens" });
    assertOpenAiError(assert, await post(url, { input: "x", background: true }), 400, { param: "background" });
    assertOpenAiError(assert, await post(url, { input: [{ role: "user", content: [{ type: "input_image", image_url: "data:," }] }] }), 400, { match: /text-only/ });
    const g = await fetch(url + "/resp_nope");
    assert.equal(g.status, 404);
    assert.equal((await g.json()).error.code, "not_found");
  });
});

describe("responses: structured output and tool choice on random weights", () => {
  let server, client;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "1024", "--grammar-max-string-length", "16"]);
    client = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("responses.parse with zodTextFormat always parses; json_object is an object", async () => {
    const Person = z.object({ name: z.string(), age: z.number().int() });
    for (let seed = 0; seed < 6; seed++) {
      const r = await client.responses.parse({
        model: "e2e", input: `A person (${seed}).`, max_output_tokens: 200, reasoning: { effort: "none" },
        text: { format: zodTextFormat(Person, "person") },
      });
      assert.equal(r.status, "completed", JSON.stringify(r.output));
      assert.deepEqual(Object.keys(r.output_parsed).sort(), ["age", "name"]);
    }
    const o = await client.responses.create({ model: "e2e", input: "json", max_output_tokens: 200, reasoning: { effort: "none" }, text: { format: { type: "json_object" } } });
    assert.equal(typeof JSON.parse(o.output_text), "object");
  });

  test("tool_choice required / named / allowed_tools: a valid call", async () => {
    const TIME = { type: "function", name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] } };
    for (const tool_choice of ["required", { type: "function", name: "get_time" },
      { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_weather" }] }]) {
      const r = await client.responses.create({
        model: "e2e", input: "Call a tool.", tools: [WEATHER, TIME], tool_choice, max_output_tokens: 200, reasoning: { effort: "none" },
        parallel_tool_calls: false,
      });
      const calls = r.output.filter((o) => o.type === "function_call");
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      const want = typeof tool_choice === "object" ? (tool_choice.name || tool_choice.tools[0].name) : null;
      if (want) assert.equal(calls[0].name, want);
      assert.equal(typeof JSON.parse(calls[0].arguments), "object");
    }
  });
});

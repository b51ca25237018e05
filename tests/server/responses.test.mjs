// The OpenAI Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}, input_items)
// through the official `openai` client: `responses.create` and `responses.stream` (the SDK's
// stream helper checks every event against the response it accumulates), a function-tool round
// trip continued with `previous_response_id`, stored responses and their bound, `store: false`,
// reasoning effort and reasoning items (content and the signed `encrypted_content` that stateless
// agents send back; one this server did not sign is left out), structured output (`responses.parse` with zod) and usage;
// item_reference (the AI SDK's default provider sends earlier items back so, in tool loops of any
// length), output_text logprobs, reasoning summaries (the reasoning text; streamed with the
// reasoning_summary events), responses.inputTokens.count and the built-in tools refused. Meaningful
// answers on the default model; validity on random weights.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, OpenAI, ROOT, assertOpenAiError, ensureE2eModel, post, startServer } from "./harness.mjs";

const require = createRequire(path.join(ROOT, "third_party/package.json"));
const { z } = require("zod");
const { zodTextFormat } = require("openai/helpers/zod");
const { generateText, streamText, tool, stepCountIs } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");

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
    // web_search and tool_search (Codex offers both on every request) are left out, not refused:
    // nothing here runs them, and the prompt is the one without them.
    const hosted = await post(url, { input: "Hi", max_output_tokens: 1, tools: [{ type: "web_search" }, { type: "web_search_preview_2025_03_11" }, { type: "tool_search" }] });
    assert.equal(hosted.status, 200, hosted.text);
    const plain = await post(url, { input: "Hi", max_output_tokens: 1 });
    assert.equal(hosted.json.usage.input_tokens, plain.json.usage.input_tokens);
    assertOpenAiError(assert, await post(url, { input: "x", tools: [{ type: "web_search" }], tool_choice: "required" }), 400, { param: "tool_choice" });
    // Every other built-in tool is refused, naming it: the model would be told of no such tool
    // while the client expects its results.
    for (const tool of [{ type: "mcp", server_label: "deepwiki", server_url: "https://mcp.deepwiki.com/mcp", require_approval: "never" },
      { type: "file_search", vector_store_ids: ["vs_1"] }, { type: "code_interpreter", container: { type: "auto" } },
      { type: "computer_use_preview", display_width: 1024, display_height: 768, environment: "browser" },
      { type: "image_generation" }, { type: "local_shell" }, { type: "shell" }, { type: "apply_patch" }]) {
      const r = await post(url, { input: "x", tools: [WEATHER, tool] });
      assertOpenAiError(assert, r, 400, { param: "tools[1].type" });
      assert.ok(r.json.error.message.includes(`'${tool.type}' is not supported`), r.text);
      assert.match(r.json.error.message, /runs no hosted or built-in tools.*function/);
    }
    // Forcing a built-in tool: nothing could make that call.
    assertOpenAiError(assert, await post(url, { input: "x", tools: [WEATHER, { type: "web_search" }], tool_choice: { type: "web_search" } }), 400, { param: "tool_choice.type" });
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

describe("responses: item references, logprobs, reasoning summaries and input_tokens (issue 47)", () => {
  let server, client;
  const requests = [];  // the bodies the AI SDK sent to /v1/responses
  let provider;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "2048"]);
    client = server.openai();
    provider = createOpenAI({
      baseURL: server.url + "/v1", apiKey: "none",
      // As a reasoning model the provider sends no temperature; the toy model answers greedily
      // so that what it answers is reproducible.
      fetch: async (url, init) => {
        if (!String(url).endsWith("/v1/responses")) return fetch(url, init);
        const body = JSON.parse(init.body);
        requests.push(body);
        return fetch(url, { ...init, body: JSON.stringify({ temperature: 0, ...body }) });
      },
    });
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  // What the AI SDK sends for a reasoning model: reasoning items back as item_reference, and
  // reasoning.summary "detailed" with an effort.
  const REASONING = { openai: { forceReasoning: true, reasoningEffort: "low" } };

  test("item_reference: the same stored items referenced by several requests", async () => {
    const first = await client.responses.create({ model: "mimo-v2-nano", temperature: 0, input: "What is 27 + 15?", reasoning: { effort: "high" } });
    assert.deepEqual(first.output.map((o) => o.type), ["reasoning", "message"]);
    const inline = await client.responses.create({
      model: "mimo-v2-nano", temperature: 0, max_output_tokens: 4, store: false, reasoning: { effort: "high" },
      input: [{ role: "user", content: "What is 27 + 15?" }, ...first.output, { role: "user", content: "And 3 + 4?" }],
    });
    const ids = [];
    for (let i = 0; i < 3; i++) {
      const r = await client.responses.create({
        model: "mimo-v2-nano", temperature: 0, max_output_tokens: 4, reasoning: { effort: "high" },
        input: [{ role: "user", content: "What is 27 + 15?" }, ...first.output.map((o) => ({ type: "item_reference", id: o.id })),
          { role: "user", content: "And 3 + 4?" }],
      });
      assert.equal(r.usage.input_tokens, inline.usage.input_tokens, `reference ${i}: the items rendered as sent inline`);
      ids.push(r.id);
    }
    // A response keeps the items it referenced (input_items lists them, not the references).
    const items = await client.responses.inputItems.list(ids[2], { order: "asc" });
    assert.deepEqual(items.data.map((o) => o.type), ["message", "reasoning", "message", "message"]);
    assert.equal(items.data[1].id, first.output[0].id);
    // ... and they stay referable once the response that first held them is deleted.
    await client.responses.delete(first.id);
    const later = await client.responses.create({
      model: "mimo-v2-nano", temperature: 0, max_output_tokens: 4, reasoning: { effort: "high" },
      input: [{ role: "user", content: "What is 27 + 15?" }, ...first.output.map((o) => ({ type: "item_reference", id: o.id })),
        { role: "user", content: "And 3 + 4?" }],
    });
    assert.equal(later.usage.input_tokens, inline.usage.input_tokens);
  });

  test("AI SDK: a tool loop of three steps with reasoning, every step answered", async () => {
    requests.length = 0;
    const cities = [];
    const r = await generateText({
      model: provider("mimo-v2-nano"), maxRetries: 0, stopWhen: stepCountIs(5), providerOptions: REASONING,
      prompt: "What is the weather in Fenwick?",
      // The toy model calls once and then answers; step 2 is made to call again, so that step 3
      // sends the first step's reasoning back a second time.
      prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: { type: "tool", toolName: "get_weather" } } : {}),
      tools: {
        get_weather: tool({
          description: "Get the current weather in a city.",
          inputSchema: z.object({ city: z.string().describe("The city name.") }),
          execute: async ({ city }) => { cities.push(city); return { city, temperature: 9, condition: "rainy" }; },
        }),
      },
    });
    assert.equal(r.steps.length, 3, JSON.stringify(r.steps.map((s) => s.finishReason)));
    assert.deepEqual(r.steps.map((s) => s.finishReason), ["tool-calls", "tool-calls", "stop"]);
    assert.equal(cities.length, 2);
    assert.equal(cities[0], "Fenwick");
    assert.ok(r.text.length > 0);
    for (const s of r.steps) assert.match(s.response.id, /^resp_/);
    assert.ok(r.steps[0].reasoningText.length > 0, "the first step reasoned");
    // The loop did reference one item in two requests (what failed before).
    assert.equal(requests.length, 3);
    const refs = (body) => body.input.filter((i) => i.type === "item_reference").map((i) => i.id);
    const twice = refs(requests[1]).filter((id) => refs(requests[2]).includes(id));
    assert.ok(twice.length >= 1, JSON.stringify(requests.map(refs)));
  });

  test("logprobs: include message.output_text.logprobs fills them, whole and streamed", async () => {
    const q = "What is 27 + 15?";
    const chat = await client.chat.completions.create({
      model: "mimo-v2-nano", temperature: 0, messages: [{ role: "user", content: q }], logprobs: true, top_logprobs: 2,
      chat_template_kwargs: { enable_thinking: false },
    });
    // The chat completion's tokens but its stop token, which is no part of the text.
    const want = chat.choices[0].logprobs.content.slice(0, -1);
    assert.equal(chat.choices[0].logprobs.content.at(-1).token, "<|im_end|>");
    const body = { model: "mimo-v2-nano", temperature: 0, input: q, reasoning: { effort: "none" }, top_logprobs: 2, include: ["message.output_text.logprobs"] };
    const r = await client.responses.create(body);
    const part = r.output[0].content[0];
    assert.equal(part.text, chat.choices[0].message.content);
    assert.deepEqual(part.logprobs, want);
    assert.equal(part.logprobs.map((l) => l.token).join(""), r.output_text);
    for (const l of part.logprobs) {
      assert.equal(l.top_logprobs.length, 2);
      assert.deepEqual(l.bytes, [...Buffer.from(l.token)]);
    }
    assert.equal(r.top_logprobs, 2);
    // Streamed: each output_text.delta carries the logprobs of its text; the SDK's accumulated
    // response has them all.
    const s = client.responses.stream(body);
    const deltas = [];
    s.on("response.output_text.delta", (e) => { deltas.push(e); });
    const f = await s.finalResponse();
    assert.deepEqual(deltas.flatMap((d) => d.logprobs), want);
    for (const d of deltas) assert.equal(d.logprobs.map((l) => l.token).join(""), d.delta);
    assert.deepEqual(f.output[0].content[0].logprobs, want);
    // Reasoning on: only the output text's tokens.
    const withReasoning = await client.responses.create({ ...body, reasoning: { effort: "high" } });
    assert.deepEqual(withReasoning.output.map((o) => o.type), ["reasoning", "message"]);
    assert.equal(withReasoning.output[1].content[0].logprobs.map((l) => l.token).join(""), withReasoning.output_text);
    // Without the include: none (top_logprobs alone asks for nothing, as in OpenAI's API).
    const none = await client.responses.create({ ...body, include: [] });
    assert.deepEqual(none.output[0].content[0].logprobs, []);
    assertOpenAiError(assert, await post(server.url + "/v1/responses", { ...body, top_logprobs: 21 }), 400, { param: "top_logprobs" });
  });

  test("reasoning summary: the reasoning text as summary_text, with the summary events in OpenAI's order", async () => {
    const body = { model: "mimo-v2-nano", temperature: 0, input: "What is 27 + 15?", reasoning: { effort: "high", summary: "auto" } };
    const r = await client.responses.create(body);
    const rs = r.output[0];
    assert.equal(rs.type, "reasoning");
    assert.match(rs.content[0].text, /Ones: 7 \+ 5 = 12/);
    assert.deepEqual(rs.summary, [{ type: "summary_text", text: rs.content[0].text }]);
    assert.equal(r.reasoning.summary, "auto");
    const s = client.responses.stream({ ...body, reasoning: { effort: "high", summary: "detailed" } });
    const events = [];
    s.on("event", (e) => events.push(e));
    const f = await s.finalResponse();
    assert.deepEqual(f.output[0].summary, rs.summary);
    // For the reasoning item: added, summary part added, text deltas, text done, part done, item done.
    const ofItem = events.filter((e) => e.output_index === 0 && (e.type.startsWith("response.reasoning_summary") || e.type.startsWith("response.output_item")));
    const kinds = ofItem.map((e) => e.type).filter((t, i, a) => t !== a[i - 1]);
    assert.deepEqual(kinds, ["response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done"]);
    const summaryEvents = ofItem.filter((e) => e.type.startsWith("response.reasoning_summary"));
    for (const e of summaryEvents) {
      assert.equal(e.item_id, f.output[0].id);
      assert.equal(e.summary_index, 0);
    }
    assert.deepEqual(summaryEvents[0].part, { type: "summary_text", text: "" });
    assert.equal(summaryEvents.filter((e) => e.type.endsWith("text.delta")).map((e) => e.delta).join(""), rs.content[0].text);
    assert.equal(summaryEvents.find((e) => e.type.endsWith("text.done")).text, rs.content[0].text);
    // No summary asked: none, and no summary events (as before).
    const plain = client.responses.stream({ ...body, reasoning: { effort: "high" } });
    const plainKinds = new Set();
    plain.on("event", (e) => plainKinds.add(e.type));
    const p = await plain.finalResponse();
    assert.deepEqual(p.output[0].summary, []);
    assert.ok(![...plainKinds].some((t) => t.startsWith("response.reasoning_summary")), [...plainKinds].join());
    assertOpenAiError(assert, await post(server.url + "/v1/responses", { ...body, reasoning: { summary: "long" } }), 400, { param: "reasoning.summary" });
  });

  test("AI SDK: streamText shows the reasoning as it comes (from the summary events)", async () => {
    const s = streamText({ model: provider("mimo-v2-nano"), maxRetries: 0, prompt: "What is 27 + 15?", providerOptions: REASONING });
    let reasoning = "", text = "", reasoningDeltas = 0;
    for await (const part of s.fullStream) {
      if (part.type === "reasoning-delta") { reasoning += part.text; reasoningDeltas++; }
      if (part.type === "text-delta") text += part.text;
      if (part.type === "error") throw part.error;
    }
    assert.ok(reasoningDeltas > 1, `reasoning deltas: ${reasoningDeltas}`);
    assert.match(reasoning, /Ones: 7 \+ 5 = 12/);
    assert.match(text, /42/);
    const stored = await client.responses.retrieve((await s.response).id);
    assert.equal(reasoning, stored.output[0].content[0].text);
  });

  test("input_tokens: responses.inputTokens.count is the prompt a create renders; unknown routes are 404", async () => {
    const body = {
      model: "mimo-v2-nano", temperature: 0, instructions: "Be brief.", tools: [WEATHER], reasoning: { effort: "none" },
      input: [{ role: "user", content: "What is the weather in Fenwick?" }],
    };
    const count = await client.responses.inputTokens.count(body);
    assert.equal(count.object, "response.input_tokens");
    const r = await client.responses.create({ ...body, max_output_tokens: 1 });
    assert.equal(count.input_tokens, r.usage.input_tokens);
    const shorter = await client.responses.inputTokens.count({ model: "mimo-v2-nano", temperature: 0, input: "Hi" });
    assert.ok(shorter.input_tokens > 0 && shorter.input_tokens < count.input_tokens);
    // Continued from a stored response: its conversation counts too.
    const cont = await client.responses.inputTokens.count({ ...body, previous_response_id: r.id, input: "And in Gostead?" });
    assert.ok(cont.input_tokens > count.input_tokens);
    await assert.rejects(client.responses.inputTokens.count({ model: "mimo-v2-nano", temperature: 0, input: 5 }),
      (e) => e instanceof OpenAI.BadRequestError && e.error?.param === "input");
    for (const [method, p] of [["POST", "/v1/responses/foo/bar"], ["GET", "/v1/responses/resp_1/nope"], ["POST", "/v1/responses/input_tokens/x"]]) {
      const res = await fetch(server.url + p, { method, headers: { "Content-Type": "application/json" }, body: method === "POST" ? "{}" : undefined });
      const text = await res.text();
      assertOpenAiError(assert, { status: res.status, text, json: JSON.parse(text) }, 404);
    }
  });
});

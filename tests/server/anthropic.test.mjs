// The Anthropic Messages API as agents and the official `@anthropic-ai/sdk` use it, against
// `mimo serve`: system messages inside `messages` (Claude Code), an assistant prefill continued,
// count_tokens, thinking (enabled with a budget, adaptive, disabled) with signatures checked
// when the block comes back (one this server did not issue is left out of the prompt), structured outputs (`messages.parse` with zod: output_config.format),
// tool streaming, message_start at once and pings while the prompt is processed, usage.output_tokens
// exactly (N at max_tokens N; the tokens the chat endpoint counts and gives logprobs for), and every
// error in Anthropic's shape. Meaningful answers on the default model (models/mimo-v2-nano: the column
// working of 27 + 15, get_weather for a weather question); validity on random weights.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Anthropic, NANO, ROOT, ensureE2eModel, post, startServer } from "./harness.mjs";

const require = createRequire(path.join(ROOT, "third_party/package.json"));
const { z } = require("zod");
const { zodOutputFormat } = require("@anthropic-ai/sdk/helpers/zod");

const Q = [{ role: "user", content: "What is 27 + 15?" }];
const WEATHER = {
  name: "get_weather", description: "Get the current weather in a city.",
  input_schema: { type: "object", properties: { city: { type: "string", description: "The city name." } }, required: ["city"] },
};

// The SSE events of a raw streamed request, with the time each arrived.
async function sseEvents(url, body) {
  const t0 = Date.now();
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  const events = [];
  let buf = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block.split("\n").find((l) => l.startsWith("data: "));
      if (data) events.push({ ...JSON.parse(data.slice(6)), ms: Date.now() - t0 });
    }
  }
  return events;
}

describe("anthropic: the Messages API on the default model", () => {
  let server, client;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "4096", "--sse-ping-interval", "0.05"]);
    client = server.anthropic();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("a system message inside messages is the system prompt (as the top-level system)", async () => {
    const sys = "You are a careful calculator.";
    const top = await client.messages.countTokens({ model: "mimo-v2-nano", system: sys, messages: Q });
    const inside = await client.messages.countTokens({ model: "mimo-v2-nano", messages: [{ role: "system", content: sys }, ...Q] });
    assert.equal(inside.input_tokens, top.input_tokens);
    // Both: one system prompt, joined by a blank line.
    const both = await client.messages.countTokens({ model: "mimo-v2-nano", system: "A.", messages: [{ role: "system", content: "B." }, ...Q] });
    const joined = await client.messages.countTokens({ model: "mimo-v2-nano", system: "A.\n\nB.", messages: Q });
    assert.equal(both.input_tokens, joined.input_tokens);
    // Later in the conversation: a system turn of its own, in order.
    const later = await client.messages.countTokens({ model: "mimo-v2-nano", messages: [...Q, { role: "assistant", content: "42." }, { role: "system", content: sys }, { role: "user", content: "And 3 + 4?" }] });
    const plain = await client.messages.countTokens({ model: "mimo-v2-nano", messages: [...Q, { role: "assistant", content: "42." }, { role: "user", content: "And 3 + 4?" }] });
    assert.ok(later.input_tokens > plain.input_tokens + 5, `${later.input_tokens} vs ${plain.input_tokens}`);
    const r = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 64, temperature: 0, messages: [{ role: "system", content: sys }, ...Q] });
    assert.equal(r.type, "message");
    assert.match(r.content.map((b) => b.text).join(""), /42/);
  });

  test("count_tokens equals the prompt the request is served with", async () => {
    const body = { model: "mimo-v2-nano", system: "Be brief.", messages: Q, tools: [WEATHER] };
    const c = await client.messages.countTokens(body);
    const r = await client.messages.create({ ...body, max_tokens: 4 });
    assert.equal(c.input_tokens, r.usage.input_tokens + r.usage.cache_read_input_tokens);
    // The same conversation through /tokenize (OpenAI messages, thinking off as Anthropic's default).
    const t = await post(server.url + "/tokenize", {
      messages: [{ role: "system", content: "Be brief." }, ...Q],
      tools: [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.input_schema } }],
      chat_template_kwargs: { enable_thinking: false },
    });
    assert.equal(t.json.count, c.input_tokens);
  });

  test("an assistant prefill is continued, not closed", async () => {
    // Greedy: the answer without a prefill, then the same answer asked to go on from its start.
    const full = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 80, temperature: 0, messages: Q });
    const text = full.content.map((b) => b.text).join("");
    const cut = text.indexOf("Ones:") + "Ones:".length;
    assert.ok(cut > 10, text);
    const prefill = text.slice(0, cut);
    const cont = await client.messages.create({
      model: "mimo-v2-nano", max_tokens: 80, temperature: 0, messages: [...Q, { role: "assistant", content: prefill }],
    });
    assert.equal(prefill + cont.content.map((b) => b.text).join(""), text);
    // Trailing whitespace in a prefill is refused, as by Anthropic.
    await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 8, messages: [...Q, { role: "assistant", content: "It is " }] }),
      (e) => e instanceof Anthropic.BadRequestError && /trailing whitespace/.test(e.message));
  });

  test("thinking: enabled keeps to its budget, adaptive is on, disabled is off; signatures verify", async () => {
    const on = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "adaptive" }, messages: Q });
    const thinking = on.content.find((b) => b.type === "thinking");
    assert.ok(thinking, JSON.stringify(on.content));
    assert.match(thinking.thinking, /Ones: 7 \+ 5 = 12/);
    assert.ok(thinking.signature.length > 20);
    assert.match(on.content.filter((b) => b.type === "text").map((b) => b.text).join(""), /42/);
    assert.ok(on.usage.output_tokens_details.thinking_tokens > 0);

    const off = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "disabled" }, messages: Q });
    assert.equal(off.content.filter((b) => b.type === "thinking").length, 0);
    assert.equal(off.usage.output_tokens_details.thinking_tokens, 0);

    // A budget smaller than the model's reasoning: the block is closed by force, then it answers.
    const budget = 8;
    const capped = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "enabled", budget_tokens: budget }, messages: Q });
    assert.ok(capped.usage.output_tokens_details.thinking_tokens <= budget, JSON.stringify(capped.usage));
    assert.ok(capped.content.some((b) => b.type === "thinking"));
    assert.ok(capped.content.some((b) => b.type === "text"), JSON.stringify(capped.content));
    assert.notEqual(capped.stop_reason, "max_tokens");
    await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 20, thinking: { type: "enabled", budget_tokens: 20 }, messages: Q }),
      (e) => e instanceof Anthropic.BadRequestError && /budget_tokens/.test(e.message));

    // The block comes back in the history: its signature verifies; a modified one does not.
    const history = [...Q, { role: "assistant", content: on.content }, { role: "user", content: "And 3 + 4?" }];
    const next = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 8, thinking: { type: "adaptive" }, messages: history });
    assert.equal(next.type, "message");
    // A modified block (or another server's) is left out of the prompt, not refused: the
    // conversation renders as if the turn had no reasoning.
    const count = async (content) => (await client.messages.countTokens({ model: "mimo-v2-nano", messages: [...Q, { role: "assistant", content }, { role: "user", content: "ok" }] })).input_tokens;
    const forged = on.content.map((b) => (b.type === "thinking" ? { ...b, thinking: b.thinking + " (edited)" } : b));
    const foreign = on.content.map((b) => (b.type === "thinking" ? { ...b, signature: "EqQBCkgIAhABGAIiQL" } : b));
    const without = on.content.filter((b) => b.type !== "thinking");
    assert.equal(await count(forged), await count(without));
    assert.equal(await count(foreign), await count(without));
    assert.ok(await count(on.content) > await count(without) + 5);
    // display "omitted": an empty block whose signature carries the text back.
    const omitted = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "adaptive", display: "omitted" }, messages: Q });
    const ob = omitted.content.find((b) => b.type === "thinking");
    assert.equal(ob.thinking, "");
    const c1 = await client.messages.countTokens({ model: "mimo-v2-nano", messages: [...Q, { role: "assistant", content: omitted.content }, { role: "user", content: "ok" }] });
    const c2 = await client.messages.countTokens({ model: "mimo-v2-nano", messages: [...Q, { role: "assistant", content: on.content }, { role: "user", content: "ok" }] });
    assert.equal(c1.input_tokens, c2.input_tokens);  // the same reasoning is rendered back
  });

  test("streaming: thinking and text blocks, a signature_delta, equal to the whole message", async () => {
    const body = { model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "adaptive" }, messages: Q };
    const whole = await client.messages.create(body);
    const stream = client.messages.stream(body);
    const types = [];
    stream.on("streamEvent", (e) => types.push(e.type === "content_block_delta" ? e.delta.type : e.type));
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, whole.content);
    assert.equal(types[0], "message_start");
    assert.ok(types.includes("signature_delta"));
    assert.equal(types.at(-1), "message_stop");
  });

  test("tool use, streamed: a tool_use block whose input arrives as input_json_delta", async () => {
    const stream = client.messages.stream({
      model: "mimo-v2-nano", max_tokens: 128, temperature: 0, tools: [WEATHER],
      messages: [{ role: "user", content: "What is the weather in Fenwick?" }],
    });
    let partial = 0;
    stream.on("inputJson", () => { partial++; });
    const m = await stream.finalMessage();
    const use = m.content.find((b) => b.type === "tool_use");
    assert.ok(use, JSON.stringify(m.content));
    assert.equal(use.name, "get_weather");
    assert.deepEqual(use.input, { city: "Fenwick" });
    assert.match(use.id, /^toolu_/);
    assert.equal(m.stop_reason, "tool_use");
    assert.ok(partial >= 1);
    // The result goes back; the model answers from it.
    const r = await client.messages.create({
      model: "mimo-v2-nano", max_tokens: 128, temperature: 0, tools: [WEATHER],
      messages: [{ role: "user", content: "What is the weather in Fenwick?" }, { role: "assistant", content: m.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "{\"city\": \"Fenwick\", \"sky\": \"rain\", \"celsius\": 9}" }] }],
    });
    assert.equal(r.stop_reason, "end_turn");
    assert.match(r.content.map((b) => b.text).join(""), /Fenwick/);
  });

  test("message_start comes at once; pings while the prompt is processed", async () => {
    // A long prompt (about 3000 tokens), pings every 50 ms (--sse-ping-interval 0.05).
    const long = "Venlo lives in Gostead. ".repeat(400) + "What is 27 + 15?";
    const ev = await sseEvents(server.url + "/v1/messages", { max_tokens: 4, stream: true, messages: [{ role: "user", content: long }] });
    assert.equal(ev[0].type, "message_start");
    const first = ev.findIndex((e) => e.type === "content_block_start");
    assert.ok(first > 0);
    assert.ok(ev.slice(1, first).some((e) => e.type === "ping"), JSON.stringify(ev.slice(0, first).map((e) => [e.type, e.ms])));
    assert.ok(ev[0].ms < ev[first].ms);
    assert.equal(ev.at(-1).type, "message_stop");
  });

  test("usage.output_tokens is the number of tokens generated (chat's completion_tokens, one logprob each), whole and streamed", async () => {
    const chat = server.url + "/v1/chat/completions", msgs = server.url + "/v1/messages";
    for (const [thinking, enable_thinking] of [[{ type: "disabled" }, false], [{ type: "adaptive" }, true]]) {
      const body = { model: "mimo-v2-nano", max_tokens: 400, temperature: 0, thinking, messages: Q };
      const whole = await post(msgs, body);
      assert.equal(whole.status, 200, whole.text);
      assert.equal(whole.json.stop_reason, "end_turn", whole.text);  // ran free: stopped by the model
      // The same greedy request on the chat endpoint: each generated token has its logprobs entry,
      // the stop token included (it is generated, so it is counted).
      const c = await post(chat, { messages: Q, max_tokens: 400, temperature: 0, logprobs: true, chat_template_kwargs: { enable_thinking } });
      assert.equal(c.status, 200, c.text);
      assert.equal(c.json.choices[0].finish_reason, "stop");
      const tokens = c.json.choices[0].logprobs.content;
      assert.equal(tokens.at(-1).token, "<|im_end|>");
      assert.equal(whole.json.usage.input_tokens + whole.json.usage.cache_read_input_tokens, c.json.usage.prompt_tokens, "the same prompt");
      assert.equal(c.json.usage.completion_tokens, tokens.length);
      assert.equal(whole.json.usage.output_tokens, tokens.length, JSON.stringify(whole.json.usage));
      assert.equal(whole.json.usage.output_tokens_details.thinking_tokens, c.json.usage.completion_tokens_details.reasoning_tokens);
      if (!enable_thinking) {
        const text = whole.json.content.map((b) => b.text).join("");
        assert.equal(text, c.json.choices[0].message.content, "the same answer");
        // Measured a third way: the answer's text re-tokenized, plus the stop token.
        assert.equal(whole.json.usage.output_tokens, (await post(server.url + "/tokenize", { prompt: text })).json.count + 1);
      }
      // Streamed: the count arrives in message_delta.
      const ev = await sseEvents(msgs, { ...body, stream: true });
      const delta = ev.filter((e) => e.type === "message_delta");
      assert.equal(delta.length, 1);
      assert.equal(delta[0].delta.stop_reason, "end_turn");
      assert.equal(delta[0].usage.output_tokens, tokens.length, JSON.stringify(delta[0].usage));
    }
  });

  test("max_tokens beyond the context is the room left (stop_reason max_tokens)", async () => {
    const r = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 100000, temperature: 0, messages: Q });
    assert.equal(r.type, "message");
    assert.ok(["end_turn", "max_tokens"].includes(r.stop_reason));
  });
});

describe("anthropic: structured outputs and errors on random weights", () => {
  let server, client;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "1024", "--grammar-max-string-length", "16"]);
    client = server.anthropic();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("messages.parse with a zod schema (output_config.format) always parses", async () => {
    const City = z.object({ city: z.string(), population: z.number().int(), coastal: z.boolean() });
    for (let seed = 0; seed < 6; seed++) {
      const r = await client.messages.parse({
        model: "e2e", max_tokens: 200, temperature: 1, top_k: 0, metadata: { user_id: `u${seed}` },
        messages: [{ role: "user", content: `Describe a city (${seed}).` }], output_config: { format: zodOutputFormat(City) },
      });
      assert.equal(r.stop_reason, "end_turn", JSON.stringify(r.content));
      assert.deepEqual(Object.keys(r.parsed_output).sort(), ["city", "coastal", "population"]);
    }
  });

  test("forced tool use (tool_choice any / tool) gives a valid tool_use block, streamed too", async () => {
    for (const tool_choice of [{ type: "any" }, { type: "tool", name: "get_weather" }]) {
      const m = await client.messages.stream({
        model: "e2e", max_tokens: 200, tools: [WEATHER], tool_choice, messages: [{ role: "user", content: "Weather?" }],
      }).finalMessage();
      const use = m.content.find((b) => b.type === "tool_use");
      assert.ok(use, JSON.stringify(m.content));
      assert.equal(use.name, "get_weather");
      assert.equal(typeof use.input.city, "string");
    }
  });

  test("max_tokens N on an answer that goes on: usage.output_tokens is exactly N, whole and streamed", async () => {
    // Greedy on random weights: no stop token within these lengths (stop_reason says so).
    const url = server.url + "/v1/messages";
    for (const n of [1, 2, 5, 16]) {
      const body = { model: "e2e", max_tokens: n, temperature: 0, messages: [{ role: "user", content: "Tell me a story." }] };
      const whole = await post(url, body);
      assert.equal(whole.status, 200, whole.text);
      assert.equal(whole.json.stop_reason, "max_tokens", whole.text);
      assert.equal(whole.json.usage.output_tokens, n, `max_tokens ${n}: ${JSON.stringify(whole.json.usage)}`);
      const ev = await sseEvents(url, { ...body, stream: true });
      const delta = ev.find((e) => e.type === "message_delta");
      assert.equal(delta?.delta.stop_reason, "max_tokens", JSON.stringify(delta));
      assert.equal(delta.usage.output_tokens, n, `max_tokens ${n}, streamed: ${JSON.stringify(delta.usage)}`);
      // And through the SDK (which takes the final usage from message_delta).
      const m = await client.messages.stream(body).finalMessage();
      assert.equal(m.usage.output_tokens, n);
    }
  });

  test("every error on an Anthropic path is in Anthropic's shape", async () => {
    const check = (r, status, re) => {
      assert.equal(r.status, status, r.text);
      assert.equal(r.json?.type, "error", r.text);
      assert.equal(typeof r.json.error.type, "string");
      if (re) assert.match(r.json.error.message, re);
    };
    check(await post(server.url + "/v1/messages", ""), 400, /empty/);
    check(await post(server.url + "/v1/messages/count_tokens", "{"), 400, /JSON/);
    check(await post(server.url + "/v1/messages/count_tokens", { messages: "x" }), 400, /messages/);
    check(await post(server.url + "/v1/messages/batches", {}), 404, /no route/);
    check(await post(server.url + "/v1/messages", { max_tokens: 5, messages: Q, output_config: { format: { type: "json_schema" } } }), 400, /output_config/);
    check(await post(server.url + "/v1/messages", { max_tokens: 5, messages: Q, thinking: { type: "enabled" } }), 400, /budget_tokens/);
    // A POST with no body at all.
    const res = await fetch(server.url + "/v1/messages", { method: "POST" });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).type, "error");
  });
});

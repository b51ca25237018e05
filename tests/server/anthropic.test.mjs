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
const { betaTool } = require("@anthropic-ai/sdk/helpers/beta/json-schema");

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

  test("thinking with interleaved thinking: a budget of max_tokens or more is accepted (Qwen Code's 32000/32000) and does not bind", async () => {
    const BETA = "interleaved-thinking-2025-05-14";
    // The reference: the same greedy request with no budget at all.
    const free = await client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "adaptive" }, messages: Q });
    assert.ok(free.content.some((b) => b.type === "thinking"), JSON.stringify(free.content));
    for (const budget_tokens of [200, 32000]) {
      const r = await client.beta.messages.create({
        betas: [BETA], model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "enabled", budget_tokens }, messages: Q,
      });
      assert.deepEqual(r.content, free.content, `budget ${budget_tokens}`);
      assert.deepEqual(r.usage.output_tokens_details, free.usage.output_tokens_details);
      assert.equal(r.usage.output_tokens, free.usage.output_tokens);
    }
    // Qwen Code's request as it sends it (max_tokens 32000 is beyond this context: the room left).
    const qwen = await fetch(server.url + "/v1/messages", {
      method: "POST", headers: { "content-type": "application/json", "anthropic-beta": `${BETA},effort-2025-11-24` },
      body: JSON.stringify({ model: "mimo-v2-nano", max_tokens: 32000, temperature: 0, thinking: { type: "enabled", budget_tokens: 32000 }, messages: Q }),
    });
    assert.equal(qwen.status, 200, await qwen.clone().text());
    assert.match((await qwen.json()).content.filter((b) => b.type === "text").map((b) => b.text).join(""), /42/);
    // A budget below max_tokens still ends the reasoning by force, with the header too.
    const capped = await client.beta.messages.create({
      betas: [BETA], model: "mimo-v2-nano", max_tokens: 200, temperature: 0, thinking: { type: "enabled", budget_tokens: 8 }, messages: Q,
    });
    assert.ok(capped.usage.output_tokens_details.thinking_tokens <= 8, JSON.stringify(capped.usage));
    // Without the header, Anthropic's rule: less than max_tokens.
    await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 200, thinking: { type: "enabled", budget_tokens: 200 }, messages: Q }),
      (e) => e instanceof Anthropic.BadRequestError && /budget_tokens/.test(e.message) && /interleaved/.test(e.message));
  });

  test("text documents and search results are read as text; PDFs and images are refused", async () => {
    const count = async (content) => (await client.messages.countTokens({ model: "mimo-v2-nano", messages: [{ role: "user", content }] })).input_tokens;
    const tokens = async (text) => (await post(server.url + "/tokenize", { prompt: text })).json.count;
    const data = "The lighthouse of Fenwick was built in 1893 and painted red in 1911.";
    const ask = { type: "text", text: "When was it built?" };
    // The three text sources are the same document.
    const asText = await count([{ type: "document", source: { type: "text", media_type: "text/plain", data } }, ask]);
    assert.equal(await count([{ type: "document", source: { type: "content", content: data } }, ask]), asText);
    assert.equal(await count([{ type: "document", source: { type: "content", content: [{ type: "text", text: data.slice(0, 20) }, { type: "text", text: data.slice(20) }] } }, ask]), asText);
    // The text, the title and the context all reach the prompt (each adds at least its tokens).
    const empty = await count([{ type: "document", source: { type: "text", media_type: "text/plain", data: "" } }, ask]);
    assert.ok(asText - empty >= await tokens(data), `${asText} - ${empty}`);
    const title = "Fenwick harbour records", context = "Transcribed from the harbour ledger.";
    const titled = await count([{ type: "document", source: { type: "text", media_type: "text/plain", data }, title, context, citations: { enabled: true } }, ask]);
    assert.ok(titled - asText >= (await tokens(title)) + (await tokens(context)), `${titled} vs ${asText}`);
    // A search result, at the top level and inside a tool result.
    const result = { type: "search_result", source: "https://example.org/fenwick", title, content: [{ type: "text", text: data }] };
    const top = await count([result, ask]);
    assert.ok(top - (await count([ask])) >= (await tokens(data)) + (await tokens(title)), String(top));
    const history = (content) => [{ role: "user", content: "Search for Fenwick." },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "search", input: { q: "Fenwick" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content }] }];
    const tools = [{ name: "search", description: "Search the web.", input_schema: { type: "object", properties: { q: { type: "string" } } } }];
    const inTool = (await client.messages.countTokens({ model: "mimo-v2-nano", tools, messages: history([result]) })).input_tokens;
    const emptyTool = (await client.messages.countTokens({ model: "mimo-v2-nano", tools, messages: history("") })).input_tokens;
    assert.ok(inTool - emptyTool >= (await tokens(data)) + (await tokens(title)), `${inTool} vs ${emptyTool}`);
    // Served through the SDK, streamed, with the document in the prompt.
    const served = [{ role: "user", content: [{ type: "document", source: { type: "text", media_type: "text/plain", data }, title }, ask] }];
    const m = await client.messages.stream({ model: "mimo-v2-nano", max_tokens: 8, messages: served }).finalMessage();
    assert.equal(m.type, "message");
    const prompt = m.usage.input_tokens + m.usage.cache_read_input_tokens;
    assert.equal(prompt, (await client.messages.countTokens({ model: "mimo-v2-nano", messages: served })).input_tokens);
    assert.ok(prompt > asText, `${prompt} vs ${asText}`);
    // PDFs (base64, url, file) and images are refused, naming the block.
    for (const [source, re] of [[{ type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, /base64.*text-only/],
      [{ type: "url", url: "https://example.org/a.pdf" }, /url.*text-only/], [{ type: "file", file_id: "file_1" }, /file.*text-only/],
      [{ type: "text", media_type: "text/html", data: "<p>x</p>" }, /text\/plain/]]) {
      await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 4, messages: [{ role: "user", content: [{ type: "document", source }, ask] }] }),
        (e) => e instanceof Anthropic.BadRequestError && /messages\[0\]\.content\[0\]\.source/.test(e.message) && re.test(e.message), JSON.stringify(source));
    }
    await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0K" } }, ask] }] }),
      (e) => e instanceof Anthropic.BadRequestError && /text-only/.test(e.message));
    await assert.rejects(client.messages.create({ model: "mimo-v2-nano", max_tokens: 4, tools, messages: history([{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0K" } }]) }),
      (e) => e instanceof Anthropic.BadRequestError && /content\[0\]/.test(e.message) && /text-only/.test(e.message));
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

  test("message_start reports the prompt's prefix-cache hit, the same split as message_delta", async () => {
    const url = server.url + "/v1/messages";
    const body = { max_tokens: 4, stream: true, system: "You are a careful calculator. ".repeat(20), messages: Q };
    const split = (u) => [u.input_tokens, u.cache_read_input_tokens];
    const counted = (await client.messages.countTokens({ model: "mimo-v2-nano", system: body.system, messages: Q })).input_tokens;
    await sseEvents(url, body);  // the prompt is cached now
    const ev = await sseEvents(url, body);
    const start = ev[0].message.usage, delta = ev.find((e) => e.type === "message_delta").usage;
    assert.ok(start.cache_read_input_tokens > 0, JSON.stringify(start));
    assert.deepEqual(split(start), split(delta));
    assert.equal(start.input_tokens + start.cache_read_input_tokens, counted);
    // The SDK's stream keeps message_start's usage and takes message_delta's over it: the same.
    const stream = client.messages.stream({ model: "mimo-v2-nano", ...body });
    let first;
    stream.on("streamEvent", (e) => { if (e.type === "message_start") first = e.message.usage; });
    const m = await stream.finalMessage();
    assert.deepEqual(split(first), split(m.usage));
    assert.ok(first.cache_read_input_tokens > 0);
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

  test("toolRunner threads by default: each continue is answered thread_not_found and the SDK replays the whole conversation", async () => {
    // The client, with every message request it sends and the status of its answer.
    const sent = [];
    const c = server.anthropic({
      fetch: async (url, init) => {
        const res = await fetch(url, init);
        if (!String(url).includes("count_tokens")) sent.push({ body: JSON.parse(init.body), status: res.status, error: res.status === 200 ? null : await res.clone().json() });
        return res;
      },
    });
    const results = [];
    const weather = betaTool({
      name: WEATHER.name, description: WEATHER.description, inputSchema: WEATHER.input_schema,
      run: async ({ city }) => { results.push(`Rain in ${city}, 9 C (report ${results.length + 1}).`); return results.at(-1); },
    });
    const system = "You answer weather questions with the tool.";
    const first = { role: "user", content: "Weather in Fenwick, then in Gostead?" };
    // Random weights call the forced tool every turn; the runner stops after 4 answers.
    const runner = c.beta.messages.toolRunner({
      model: "e2e", max_tokens: 120, system, tools: [weather], tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true }, messages: [first], max_iterations: 4,
    });
    const replies = [];
    for await (const m of runner) replies.push(m);
    assert.equal(replies.length, 4);
    assert.equal(results.length, 4);  // one call a turn, each answered
    assert.ok(replies.every((m) => m.stop_reason === "tool_use"), JSON.stringify(replies.map((m) => m.stop_reason)));
    // The SDK sent thread create, then continue (404 thread_not_found), replayed under a new
    // thread, lost it again and went on without threads.
    assert.deepEqual(sent.map((r) => [r.body.thread?.type ?? "none", r.status]),
      [["create", 200], ["continue", 404], ["create", 200], ["continue", 404], ["none", 200], ["none", 200]]);
    for (const r of sent.filter((r) => r.status === 404)) {
      assert.equal(r.error.type, "error");
      assert.equal(r.error.error.type, "not_found_error");
      assert.equal(r.error.error.details.error_code, "thread_not_found");
      assert.equal(r.body.messages.length, 1);  // only the new tool_result: never served as it is
    }
    // Every answered request held the whole conversation: the first message, system and tools,
    // each earlier reply with its tool_result; and the model saw all of it (the prompt the server
    // reports equals count_tokens of that conversation, and grows turn by turn).
    const served = sent.filter((r) => r.status === 200);
    let last = 0;
    for (let k = 0; k < served.length; k++) {
      const { body } = served[k];
      assert.equal(body.system, system);
      assert.equal(body.tools?.[0]?.name, "get_weather");
      assert.deepEqual(body.messages[0], first);
      assert.equal(body.messages.length, 1 + 2 * k, `request ${k}`);
      for (let j = 0; j < k; j++) {
        assert.equal(body.messages[1 + 2 * j].content.find((b) => b.type === "tool_use")?.id, replies[j].content.find((b) => b.type === "tool_use").id);
        assert.equal(body.messages[2 + 2 * j].content[0].content, results[j]);
      }
      const prompt = replies[k].usage.input_tokens + replies[k].usage.cache_read_input_tokens;
      const counted = await c.messages.countTokens({ model: "e2e", system, tools: [WEATHER], messages: body.messages });
      assert.equal(prompt, counted.input_tokens, `request ${k}`);
      assert.ok(prompt > last, `request ${k}: ${prompt} after ${last}`);
      last = prompt;
    }

    // A message thread of its own (unsupportedRequestBehavior "error", the default): every turn
    // after the first is a continue refused, then the whole conversation under a new thread.
    sent.length = 0;
    const thread = c.beta.messages.thread({ model: "e2e", max_tokens: 3, temperature: 0, system });
    const turns = ["Hello.", "And then?", "Go on."];
    const answers = [];
    for (const [k, text] of turns.entries()) {
      const reply = k === 1 ? await thread.stream({ role: "user", content: text }).finalMessage() : await thread.send({ role: "user", content: text });
      answers.push(reply);
      const ok = sent.at(-1);
      assert.equal(ok.status, 200);
      assert.equal(ok.body.thread.type, "create");
      assert.deepEqual(ok.body.messages.filter((m) => m.role === "user").map((m) => m.content), turns.slice(0, k + 1));
      assert.equal(ok.body.messages.length, 2 * k + 1);
      const counted = await c.messages.countTokens({ model: "e2e", system, messages: ok.body.messages });
      assert.equal(reply.usage.input_tokens + reply.usage.cache_read_input_tokens, counted.input_tokens);
    }
    assert.deepEqual(sent.map((r) => r.status), [200, 404, 200, 404, 200]);
  });

  test("server tools this server cannot run are refused naming the tool; tool search is left out", async () => {
    const url = server.url + "/v1/messages";
    for (const tool of [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }, { type: "web_fetch_20250910", name: "web_fetch" },
      { type: "code_execution_20250825", name: "code_execution" }]) {
      const r = await post(url, { max_tokens: 4, messages: Q, tools: [WEATHER, tool] });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.type, "invalid_request_error");
      assert.match(r.json.error.message, new RegExp(`'tools\\[1\\]\\.type' '${tool.type}' is not supported: it is a server tool`));
      // Through the SDK too.
      await assert.rejects(client.messages.create({ model: "e2e", max_tokens: 4, messages: Q, tools: [tool] }),
        (e) => e instanceof Anthropic.BadRequestError && e.message.includes(tool.type));
    }
    // Tool search only finds deferred tools, and every tool is offered here: the same prompt.
    const withSearch = await client.messages.countTokens({ model: "e2e", messages: Q, tools: [{ type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" }, { ...WEATHER, defer_loading: true }] });
    const without = await client.messages.countTokens({ model: "e2e", messages: Q, tools: [WEATHER] });
    assert.equal(withSearch.input_tokens, without.input_tokens);
    // Client tools with a type of Anthropic's (bash, text editor) are refused as before.
    const bash = await post(url, { max_tokens: 4, messages: Q, tools: [{ type: "bash_20250124", name: "bash" }] });
    assert.equal(bash.status, 400, bash.text);
    assert.match(bash.json.error.message, /bash_20250124/);
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

// `mimo serve` on a random-weight checkpoint (scripts/make_tiny_model.py --variant e2e, the real
// 151680-token vocabulary), through the official `openai` client: anything may come out (special
// tokens, broken UTF-8, half tool calls), and every answer must still be well-formed OpenAI.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ensureE2eModel, startServer } from "./harness.mjs";

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const TIME = {
  type: "function",
  function: {
    name: "get_time",
    description: "Get the time in a zone.",
    parameters: { type: "object", properties: { zone: { type: "string" }, hours: { type: "integer" } }, required: ["zone"] },
  },
};
const FINISH = new Set(["stop", "length", "tool_calls"]);
const USER = [{ role: "user", content: "Hello there, say something." }];
const OFF = { chat_template_kwargs: { enable_thinking: false } };

function assertUsage(u) {
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, JSON.stringify(u));
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
}

function assertChatCompletion(r, { n = 1, maxTokens } = {}) {
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, "chat.completion");
  assert.ok(Number.isInteger(r.created));
  assert.equal(typeof r.model, "string");
  assert.equal(r.choices.length, n);
  r.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(c.message.role, "assistant");
    assert.ok(c.message.content === null || typeof c.message.content === "string");
    assert.ok(FINISH.has(c.finish_reason), c.finish_reason);
    for (const tc of c.message.tool_calls || []) assertToolCall(tc);
    if (c.finish_reason === "tool_calls") assert.ok(c.message.tool_calls.length > 0);
  });
  assertUsage(r.usage);
  if (maxTokens) assert.ok(r.usage.completion_tokens <= n * maxTokens);
}

function assertToolCall(tc) {
  assert.equal(tc.type, "function");
  assert.equal(typeof tc.id, "string");
  assert.ok(tc.id.length > 0);
  assert.equal(typeof tc.function.name, "string");
  const args = JSON.parse(tc.function.arguments);  // always a JSON object text
  assert.equal(typeof args, "object");
  assert.doesNotMatch(tc.function.arguments, /<\/?(tool_call|parameter|function)/);
}

// Collects a streamed chat completion into {chunks, choices: [{content, reasoning, toolCalls, finish}], usage}.
async function collect(stream) {
  const chunks = [];
  const choices = [];
  let usage = null;
  for await (const ch of stream) {
    chunks.push(ch);
    assert.equal(ch.object, "chat.completion.chunk");
    assert.match(ch.id, /^chatcmpl-/);
    assert.equal(ch.id, chunks[0].id);
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      const s = (choices[c.index] ??= { content: "", reasoning: "", toolCalls: [], finish: null, role: null });
      assert.equal(s.finish, null, "a chunk after finish_reason");
      if (c.delta.role) s.role = c.delta.role;
      if (c.delta.content) s.content += c.delta.content;
      if (c.delta.reasoning_content) s.reasoning += c.delta.reasoning_content;
      for (const t of c.delta.tool_calls || []) {
        const tc = (s.toolCalls[t.index] ??= { id: "", name: "", arguments: "" });
        if (t.id) tc.id = t.id;
        if (t.function?.name) tc.name += t.function.name;
        if (t.function?.arguments) {
          tc.arguments += t.function.arguments;
          // A delta may end in '<' when the value itself does (seed 231 streams "(`", "<", "\"");
          // a tag cut between deltas shows up in the arguments so far, which must never hold one.
          assert.doesNotMatch(tc.arguments, /<\/?(tool_call|parameter|function)/, "a tag leaked");
        }
      }
      if (c.finish_reason) s.finish = c.finish_reason;
    }
  }
  return { chunks, choices, usage };
}

describe("random-weight model: OpenAI shapes", () => {
  let server, client;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "1024", "--max-num-seqs", "8",
      "--grammar-max-string-length", "16"]);
    client = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("GET /v1/models lists the served model", async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].id, "e2e");
    assert.equal(list.data[0].object, "model");
  });

  test("chat, not streamed: well-formed, max_tokens honoured", async () => {
    for (let i = 0; i < 3; i++) {
      const r = await client.chat.completions.create({ messages: USER, max_tokens: 12, model: "e2e" });
      assertChatCompletion(r, { maxTokens: 12 });
    }
    const r = await client.chat.completions.create({ messages: USER, max_completion_tokens: 7, ignore_eos: true, ...OFF });
    assert.equal(r.usage.completion_tokens, 7);
    assert.equal(r.choices[0].finish_reason === "length" || r.choices[0].finish_reason === "tool_calls", true);
  });

  test("chat, streamed: role first, deltas equal the non-streamed answer of the same seed, [DONE]", async () => {
    const body = { messages: USER, max_tokens: 16, seed: 1234, temperature: 1, ...OFF };
    const whole = await client.chat.completions.create(body);
    const s = await collect(await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
    assert.equal(s.choices[0].role, "assistant");
    assert.equal(s.choices[0].content, whole.choices[0].message.content ?? "");
    assert.equal(s.choices[0].finish, whole.choices[0].finish_reason);
    assert.deepEqual(s.usage, whole.usage);
    // include_usage: the last chunk carries usage and no choices; the ones before carry none.
    const last = s.chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.ok(s.chunks.slice(0, -1).every((c) => !c.usage));
    // The raw stream ends with data: [DONE].
    const raw = await fetch(server.url + "/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ...body, stream: true }),
    });
    assert.equal(raw.headers.get("content-type").split(";")[0], "text/event-stream");
    const text = await raw.text();
    assert.match(text, /data: \[DONE\]\n\n$/);
    for (const ev of text.trim().split("\n\n")) assert.match(ev, /^data: /);
  });

  test("stream without include_usage sends no usage", async () => {
    const s = await collect(await client.chat.completions.create({ messages: USER, max_tokens: 5, stream: true }));
    assert.equal(s.usage, null);
    assert.ok(FINISH.has(s.choices[0].finish));
  });

  test("seed: the same seed gives the same text, another seed (almost surely) another", async () => {
    const body = { messages: USER, max_tokens: 24, temperature: 1.0, ignore_eos: true, ...OFF };
    const a = await client.chat.completions.create({ ...body, seed: 7 });
    const b = await client.chat.completions.create({ ...body, seed: 7 });
    const c = await client.chat.completions.create({ ...body, seed: 8 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  });

  test("n > 1: n choices, usage counts them all", async () => {
    const r = await client.chat.completions.create({
      messages: USER, max_tokens: 6, n: 3, ignore_eos: true, logprobs: true, ...OFF,
    });
    assertChatCompletion(r, { n: 3, maxTokens: 6 });
    const tokens = r.choices.reduce((s, c) => s + c.logprobs.content.length, 0);
    assert.equal(r.usage.completion_tokens, tokens);
    const s = await collect(await client.chat.completions.create({ messages: USER, max_tokens: 4, n: 2, stream: true, ...OFF }));
    assert.equal(s.choices.length, 2);
    for (const c of s.choices) assert.ok(FINISH.has(c.finish));
  });

  test("logprobs / top_logprobs: greedy picks the top entry, sorted, one entry per token", async () => {
    const r = await client.chat.completions.create({
      messages: USER, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 4, ignore_eos: true, ...OFF,
    });
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    for (const t of lp) {
      assert.equal(t.top_logprobs.length, 4);
      assert.ok(t.logprob <= 0);
      for (let i = 1; i < 4; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
      assert.equal(t.token, t.top_logprobs[0].token);
      assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-4);
      assert.ok(Array.isArray(t.bytes));
    }
    // The streamed logprobs are the same tokens.
    const stream = await client.chat.completions.create({
      messages: USER, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 4, ignore_eos: true, stream: true, ...OFF,
    });
    const streamed = [];
    for await (const ch of stream) for (const c of ch.choices) streamed.push(...(c.logprobs?.content || []));
    assert.deepEqual(streamed.map((t) => t.token), lp.map((t) => t.token));
  });

  test("completions, not streamed and streamed (text and token-id prompts, logprobs)", async () => {
    const r = await client.completions.create({ model: "e2e", prompt: "Once upon a time", max_tokens: 10, seed: 3, temperature: 1 });
    assert.equal(r.object, "text_completion");
    assert.match(r.id, /^cmpl-/);
    assert.equal(typeof r.choices[0].text, "string");
    assert.ok(FINISH.has(r.choices[0].finish_reason));
    assertUsage(r.usage);
    const s = await client.completions.create({ model: "e2e", prompt: "Once upon a time", max_tokens: 10, seed: 3, temperature: 1, stream: true, stream_options: { include_usage: true } });
    let text = "", usage = null, finish = null;
    for await (const ch of s) {
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
    }
    assert.equal(text, r.choices[0].text);
    assert.equal(finish, r.choices[0].finish_reason);
    assert.deepEqual(usage, r.usage);
    const ids = await client.completions.create({ model: "e2e", prompt: [[1, 2, 3, 4], [5, 6]], max_tokens: 3, logprobs: 2 });
    assert.equal(ids.choices.length, 2);
    assert.equal(ids.usage.prompt_tokens, 6);
    for (const c of ids.choices) {
      assert.equal(c.logprobs.tokens.length, c.logprobs.token_logprobs.length);
      for (const top of c.logprobs.top_logprobs) assert.equal(Object.keys(top).length <= 2, true);
    }
  });

  test("reasoning on and off (chat_template_kwargs.enable_thinking, alias thinking)", async () => {
    // Thinking on: reasoning is what follows a leading <think> (random weights almost never write
    // one, so it is usually all content); thinking off: never any reasoning_content.
    for (const kwargs of [{ enable_thinking: true }, { thinking: true }]) {
      const on = await client.chat.completions.create({ messages: USER, max_tokens: 8, ignore_eos: true, chat_template_kwargs: kwargs });
      assertChatCompletion(on);
      const m = on.choices[0].message;
      assert.ok(m.reasoning_content === undefined || m.reasoning_content === null || typeof m.reasoning_content === "string");
      assert.ok(!(m.content || "").startsWith("<think>"));
    }
    const off = await client.chat.completions.create({ messages: USER, max_tokens: 8, ignore_eos: true, ...OFF });
    assertChatCompletion(off);
    assert.ok(off.choices[0].message.reasoning_content === undefined || off.choices[0].message.reasoning_content === null);
  });

  test("tools, auto: whatever comes out is plain content or well-formed calls", async () => {
    for (const stream of [false, true]) {
      for (let seed = 0; seed < 3; seed++) {
        const body = { messages: USER, tools: [WEATHER, TIME], max_tokens: 24, seed, temperature: 1.5, ...OFF };
        if (!stream) {
          assertChatCompletion(await client.chat.completions.create(body));
        } else {
          const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
          for (const tc of s.choices[0].toolCalls) JSON.parse(tc.arguments);
        }
      }
    }
  });

  test("tool_choice required / named: always a well-formed call, streamed args never leak tags", async () => {
    const req = await client.chat.completions.create({
      messages: USER, tools: [WEATHER, TIME], tool_choice: "required", parallel_tool_calls: false, max_tokens: 200, ...OFF,
    });
    assertChatCompletion(req);
    const calls = req.choices[0].message.tool_calls;
    assert.ok(calls.length >= 1, JSON.stringify(req));
    for (const c of calls) assert.ok(["get_weather", "get_time"].includes(c.function.name));
    assert.equal(req.choices[0].finish_reason, "tool_calls");

    // Named: only that function (parallel calls allowed: each one of it; parallel off: one call).
    const parallel = await client.chat.completions.create({
      messages: USER, tools: [WEATHER, TIME], max_tokens: 300, ...OFF,
      tool_choice: { type: "function", function: { name: "get_time" } },
    });
    assertChatCompletion(parallel);
    assert.ok(parallel.choices[0].message.tool_calls.length >= 1);
    for (const c of parallel.choices[0].message.tool_calls) assert.equal(c.function.name, "get_time");
    const named = await client.chat.completions.create({
      messages: USER, tools: [WEATHER, TIME], max_tokens: 200, parallel_tool_calls: false, ...OFF,
      tool_choice: { type: "function", function: { name: "get_time" } },
    });
    const nc = named.choices[0].message.tool_calls;
    assert.equal(nc.length, 1);
    assert.equal(nc[0].function.name, "get_time");
    assert.equal(named.choices[0].finish_reason, "tool_calls");
    const args = JSON.parse(nc[0].function.arguments);
    assert.equal(typeof args.zone, "string");
    if ("hours" in args) assert.ok(Number.isInteger(args.hours));

    // Streamed, then the same request whole (same seed): the streaming parser must give exactly
    // the arguments the whole-text parser gives (a '<' released before the text shows it is not
    // a closing tag would differ). Seed 231's value ends in '<'.
    for (const seed of [231, 7]) {
      const body = {
        messages: USER, tools: [WEATHER, TIME], max_tokens: 200, parallel_tool_calls: false, ...OFF, seed,
        tool_choice: { type: "function", function: { name: "get_weather" } },
      };
      const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
      const sc = s.choices[0];
      assert.equal(sc.toolCalls.length, 1);
      assert.equal(sc.toolCalls[0].name, "get_weather");
      assert.match(sc.toolCalls[0].id, /.+/);
      assert.equal(typeof JSON.parse(sc.toolCalls[0].arguments).city, "string");
      assert.equal(sc.finish, "tool_calls");
      const whole = await client.chat.completions.create(body);
      assert.equal(sc.toolCalls[0].arguments, whole.choices[0].message.tool_calls[0].function.arguments);
    }
  });

  test("logit_bias, min_tokens, max_completion_tokens take effect", async () => {
    const ids = (await (await fetch(server.url + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ prompt: " banana" }) })).json()).tokens;
    assert.equal(ids.length, 1);
    const biased = await client.chat.completions.create({
      messages: USER, max_completion_tokens: 5, temperature: 0, logit_bias: { [ids[0]]: 100 }, ...OFF,
    });
    assert.equal(biased.choices[0].message.content, " banana".repeat(5));
    assert.equal(biased.usage.completion_tokens, 5);
    // <|im_end|> forced: the answer ends at once, unless min_tokens holds it back.
    const imEnd = 151645;
    const ends = await client.chat.completions.create({ messages: USER, max_tokens: 20, temperature: 0, logit_bias: { [imEnd]: 100 }, ...OFF });
    assert.equal(ends.choices[0].finish_reason, "stop");
    assert.ok(ends.usage.completion_tokens <= 1, JSON.stringify(ends.usage));
    const held = await client.chat.completions.create({
      messages: USER, max_tokens: 20, temperature: 0, logit_bias: { [imEnd]: 100 }, min_tokens: 6, ...OFF,
    });
    assert.equal(held.choices[0].finish_reason, "stop");
    assert.ok(held.usage.completion_tokens >= 6 && held.usage.completion_tokens <= 7, JSON.stringify(held.usage));
  });

  test("stop strings end the text before the stop (same seed, with and without)", async () => {
    const body = { messages: USER, max_tokens: 24, seed: 11, temperature: 1, ignore_eos: true, ...OFF };
    const full = (await client.chat.completions.create(body)).choices[0].message.content;
    const chars = [...full];
    assert.ok(chars.length >= 6, JSON.stringify(full));
    const stop = chars.slice(3, 5).join("");
    const cut = full.indexOf(stop);
    const r = await client.chat.completions.create({ ...body, stop: [stop] });
    assert.equal(r.choices[0].message.content, full.slice(0, cut));
    assert.equal(r.choices[0].finish_reason, "stop");
  });

  test("Anthropic /v1/messages on random output: block and event grammar always holds", async () => {
    const anthropic = server.anthropic();
    const tools = [WEATHER, TIME].map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
    for (let i = 0; i < 4; i++) {
      const body = { model: "e2e", max_tokens: 40, messages: [{ role: "user", content: `Say something ${i}.` }], tools,
        temperature: 1.5, ...(i % 2 ? { thinking: { type: "enabled", budget_tokens: 32 } } : {}) };
      const whole = await anthropic.messages.create(body);
      assert.equal(whole.type, "message");
      assert.ok(["end_turn", "max_tokens", "tool_use", "stop_sequence"].includes(whole.stop_reason), whole.stop_reason);
      for (const b of whole.content) {
        assert.ok(["text", "thinking", "tool_use"].includes(b.type), b.type);
        if (b.type === "tool_use") assert.equal(typeof b.input, "object");
      }
      if (whole.stop_reason === "tool_use") assert.ok(whole.content.some((b) => b.type === "tool_use"));
      const events = [];
      for await (const ev of await anthropic.messages.create({ ...body, stream: true })) events.push(ev);
      assert.equal(events[0].type, "message_start");
      assert.equal(events.at(-1).type, "message_stop");
      assert.equal(events.at(-2).type, "message_delta");
      let open = -1, next = 0;
      for (const ev of events.slice(1, -2)) {
        if (ev.type === "content_block_start") {
          assert.equal(open, -1, "a block opened inside another");
          assert.equal(ev.index, next);
          open = next++;
        } else if (ev.type === "content_block_delta") {
          assert.equal(ev.index, open);
          if (ev.delta.type === "input_json_delta") assert.doesNotMatch(ev.delta.partial_json, /<\/?(parameter|function|tool_call)/);
        } else if (ev.type === "content_block_stop") {
          assert.equal(ev.index, open);
          open = -1;
        } else {
          assert.fail(`unexpected event ${ev.type}`);
        }
      }
      assert.equal(open, -1);
    }
  });

  test("assistant turns with reasoning_content and tool_calls are rendered back through the template", async () => {
    const messages = [
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: "", reasoning_content: "I should call the tool.",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: '{"temperature": 3}' },
    ];
    const tok = await (await fetch(server.url + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages, tools: [WEATHER] }) })).json();
    const text = (await (await fetch(server.url + "/detokenize", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ tokens: tok.tokens }) })).json()).prompt;
    assert.match(text, /<think>I should call the tool\.<\/think>/);
    assert.match(text, /<tool_call>\n<function=get_weather>\n<parameter=city>Oslo<\/parameter>\n<\/function>\n<\/tool_call>/);
    assert.match(text, /<tool_response>\n\{"temperature": 3\}\n<\/tool_response>/);
  });

  test("assistant turns with reasoning_content and tool_calls are accepted back", async () => {
    const r = await client.chat.completions.create({
      max_tokens: 4, tools: [WEATHER], ...OFF,
      messages: [
        { role: "user", content: "Weather in Oslo?" },
        { role: "assistant", content: "", reasoning_content: "I should call the tool.",
          tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } }] },
        { role: "tool", tool_call_id: "call_1", content: '{"temperature": 3}' },
      ],
    });
    assertChatCompletion(r);
  });
});

// `mimo serve` on the default model (models/mimo-v2-nano) through the official `openai` and
// `@anthropic-ai/sdk` clients: meaningful answers. Expectations come from the nano model's
// training data (scripts/nano/data.py, World(seed=1234)): Venlo lives in Gostead; the column
// working of 27 + 15 is its reasoning; it calls get_weather for a weather question.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, ROOT, post, startServer } from "./harness.mjs";

const TOOLS = JSON.parse(fs.readFileSync(path.join(ROOT, "scripts/demo/tools.json"), "utf8"));
const OFF = { chat_template_kwargs: { enable_thinking: false } };
const ANTHROPIC_TOOLS = TOOLS.map((t) => ({
  name: t.function.name, description: t.function.description, input_schema: t.function.parameters,
}));
const WORKING = /27 \+ 15\. Ones: 7 \+ 5 = 12, write 2, carry 1\. Tens: 2 \+ 1 \+ 1 = 4\./;

// The demo tool executor, run the way a client runs a tool.
function runTool(name, args) {
  const r = spawnSync("/usr/bin/python3", [path.join(ROOT, "scripts/demo/tools.py")], {
    input: JSON.stringify({ name, arguments: args }), encoding: "utf8",
  });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

describe("nano model: answers through the OpenAI and Anthropic clients", () => {
  let server, openai, anthropic;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "2048"]);
    openai = server.openai();
    anthropic = server.anthropic();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("a fact, streamed and not, equal", async () => {
    const body = { model: "mimo-v2-nano", messages: [{ role: "user", content: "Where does Venlo live?" }], temperature: 0, ...OFF };
    const r = await openai.chat.completions.create(body);
    assert.match(r.choices[0].message.content, /Gostead/);
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.choices[0].message.reasoning_content ?? null, null);
    let text = "", chunks = 0;
    for await (const ch of await openai.chat.completions.create({ ...body, stream: true })) {
      const d = ch.choices[0]?.delta?.content;
      if (d) { text += d; chunks++; }
    }
    assert.equal(text, r.choices[0].message.content);
    assert.ok(chunks >= 3, `streamed in ${chunks} chunks`);
  });

  test("thinking on: the column working is reasoning_content, the sum is the answer", async () => {
    const r = await openai.chat.completions.create({
      messages: [{ role: "user", content: "What is 27 + 15?" }], temperature: 0, chat_template_kwargs: { enable_thinking: true },
    });
    const m = r.choices[0].message;
    assert.match(m.reasoning_content, WORKING);
    assert.match(m.content, /42/);
    assert.doesNotMatch(m.content, /Ones:|<\/?think>/);
    // Streamed: reasoning deltas first, then content, nothing lost.
    let reasoning = "", content = "", sawContentBeforeReasoningEnd = false;
    for await (const ch of await openai.chat.completions.create({
      messages: [{ role: "user", content: "What is 27 + 15?" }], temperature: 0, stream: true, chat_template_kwargs: { enable_thinking: true },
    })) {
      const d = ch.choices[0]?.delta || {};
      if (d.reasoning_content) { if (content) sawContentBeforeReasoningEnd = true; reasoning += d.reasoning_content; }
      if (d.content) content += d.content;
    }
    assert.equal(reasoning, m.reasoning_content);
    assert.equal(content, m.content);
    assert.equal(sawContentBeforeReasoningEnd, false);
  });

  test("completions echo: the prompt, then the completion, streamed and not", async () => {
    const prompt = "<|im_start|>user\nWhere does Venlo live?<|im_end|>\n<|im_start|>assistant\n<think></think>";
    const plain = await openai.completions.create({ model: "mimo-v2-nano", prompt, max_tokens: 16, temperature: 0 });
    const echoed = await openai.completions.create({ model: "mimo-v2-nano", prompt, max_tokens: 16, temperature: 0, echo: true });
    assert.match(plain.choices[0].text, /Gostead/);
    assert.equal(echoed.choices[0].text, prompt + plain.choices[0].text);
    let streamed = "";
    for await (const ch of await openai.completions.create({ model: "mimo-v2-nano", prompt, max_tokens: 16, temperature: 0, echo: true, stream: true })) {
      streamed += ch.choices[0]?.text ?? "";
    }
    assert.equal(streamed, echoed.choices[0].text);
    // Token-id prompts echo their decoded text.
    const ids = (await (await fetch(server.url + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ prompt }) })).json()).tokens;
    const byIds = await openai.completions.create({ model: "mimo-v2-nano", prompt: ids, max_tokens: 16, temperature: 0, echo: true });
    assert.equal(byIds.choices[0].text, echoed.choices[0].text);
  });

  test("stop strings cut the answer before them", async () => {
    const body = { messages: [{ role: "user", content: "Where does Venlo live?" }], temperature: 0, ...OFF };
    const full = (await openai.chat.completions.create(body)).choices[0].message.content;
    const r = await openai.chat.completions.create({ ...body, stop: ["Gostead"] });
    assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf("Gostead")));
    assert.equal(r.choices[0].finish_reason, "stop");
  });

  test("tool-call round trip, not streamed and streamed", async () => {
    for (const stream of [false, true]) {
      const messages = [{ role: "user", content: "What is the weather in Fenwick?" }];
      const body = { messages, tools: TOOLS, temperature: 0, ...OFF };
      let call, finish;
      if (!stream) {
        const r = await openai.chat.completions.create(body);
        finish = r.choices[0].finish_reason;
        call = r.choices[0].message.tool_calls?.[0];
        messages.push(r.choices[0].message);
      } else {
        const parts = { id: "", name: "", arguments: "" };
        for await (const ch of await openai.chat.completions.create({ ...body, stream: true })) {
          const c = ch.choices[0];
          for (const t of c?.delta?.tool_calls || []) {
            if (t.id) parts.id = t.id;
            if (t.function?.name) parts.name += t.function.name;
            if (t.function?.arguments) {
              assert.doesNotMatch(t.function.arguments, /<\/?(parameter|function|tool_call)/);
              parts.arguments += t.function.arguments;
            }
          }
          if (c?.finish_reason) finish = c.finish_reason;
        }
        call = { id: parts.id, type: "function", function: { name: parts.name, arguments: parts.arguments } };
        messages.push({ role: "assistant", content: null, tool_calls: [call] });
      }
      assert.equal(finish, "tool_calls");
      assert.equal(call.function.name, "get_weather");
      const args = JSON.parse(call.function.arguments);
      assert.equal(typeof args.city, "string");
      const result = runTool("get_weather", args);
      messages.push({ role: "tool", tool_call_id: call.id, content: result });
      const final = await openai.chat.completions.create({ ...body, messages });
      const weather = JSON.parse(result);
      assert.equal(final.choices[0].finish_reason, "stop");
      // The answer reports the tool's result (its temperature or its condition).
      const text = final.choices[0].message.content;
      assert.ok(text.includes(String(weather.temperature)) || text.includes(weather.condition), text);
    }
  });

  test("Anthropic /v1/messages: a fact, not streamed", async () => {
    const r = await anthropic.messages.create({
      model: "mimo-v2-nano", max_tokens: 64, messages: [{ role: "user", content: "Where does Venlo live?" }], temperature: 0,
    });
    assert.equal(r.type, "message");
    assert.equal(r.role, "assistant");
    assert.match(r.id, /^msg_/);
    assert.equal(r.stop_reason, "end_turn");
    assert.equal(r.content.length, 1);
    assert.equal(r.content[0].type, "text");
    assert.match(r.content[0].text, /Gostead/);
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  });

  test("Anthropic stream: message_start … message_stop in order, text equals the whole answer", async () => {
    const body = { model: "mimo-v2-nano", max_tokens: 64, messages: [{ role: "user", content: "Where does Venlo live?" }], temperature: 0 };
    const whole = await anthropic.messages.create(body);
    const types = [];
    let text = "";
    const stream = await anthropic.messages.create({ ...body, stream: true });
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    }
    assert.equal(types[0], "message_start");
    assert.equal(types[1], "content_block_start");
    assert.equal(types.at(-3), "content_block_stop");
    assert.equal(types.at(-2), "message_delta");
    assert.equal(types.at(-1), "message_stop");
    assert.ok(types.slice(2, -3).every((t) => t === "content_block_delta"));
    assert.equal(text, whole.content[0].text);
    // The SDK's own accumulator agrees.
    const final = await anthropic.messages.stream(body).finalMessage();
    assert.equal(final.content[0].text, whole.content[0].text);
    assert.equal(final.stop_reason, "end_turn");
  });

  // The nano model calls get_weather({"city": "Fenwick"}) in 22 tokens (21 with parallel calls
  // off, whose grammar ends by itself). Under a smaller max_tokens the output constraint still
  // closes the call as valid JSON, cutting the value short to fit: its arguments are not what the
  // model meant, so every protocol reports the limit, not a finished call (issue 47).
  test("a tool call cut to fit max_tokens reports length / max_tokens / incomplete", async () => {
    const messages = [{ role: "user", content: "What is the weather in Fenwick?" }];
    const cut = (city) => typeof city === "string" && city.length < "Fenwick".length && "Fenwick".startsWith(city);
    for (const parallel_tool_calls of [true, false]) {
      const body = { messages, tools: TOOLS, temperature: 0, parallel_tool_calls, ...OFF };
      const short = await openai.chat.completions.create({ ...body, max_tokens: 20 });
      assert.equal(short.choices[0].finish_reason, "length", JSON.stringify(short));
      const args = JSON.parse(short.choices[0].message.tool_calls[0].function.arguments);
      assert.ok(cut(args.city), JSON.stringify(args));
      let finish = null;
      for await (const ch of await openai.chat.completions.create({ ...body, max_tokens: 20, stream: true })) {
        if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
      }
      assert.equal(finish, "length");
      const room = await openai.chat.completions.create({ ...body, max_tokens: 64 });
      assert.equal(room.choices[0].finish_reason, "tool_calls");
      assert.deepEqual(JSON.parse(room.choices[0].message.tool_calls[0].function.arguments), { city: "Fenwick" });
    }
    for (const [max_tokens, stop_reason] of [[20, "max_tokens"], [64, "tool_use"]]) {
      const r = await anthropic.messages.create({
        model: "mimo-v2-nano", max_tokens, tools: ANTHROPIC_TOOLS, messages, temperature: 0, thinking: { type: "disabled" },
      });
      assert.equal(r.stop_reason, stop_reason, JSON.stringify(r));
      const use = r.content.find((b) => b.type === "tool_use");
      assert.ok(stop_reason === "tool_use" ? use.input.city === "Fenwick" : cut(use.input.city), JSON.stringify(use));
    }
    const tools = TOOLS.map((t) => ({ type: "function", ...t.function }));
    for (const [max_output_tokens, status] of [[20, "incomplete"], [64, "completed"]]) {
      const r = await openai.responses.create({
        model: "mimo-v2-nano", input: messages, tools, max_output_tokens, temperature: 0, reasoning: { effort: "none" },
      });
      assert.equal(r.status, status, JSON.stringify(r));
      assert.deepEqual(r.incomplete_details, status === "incomplete" ? { reason: "max_output_tokens" } : null);
      const call = r.output.find((o) => o.type === "function_call");
      assert.equal(call.name, "get_weather");
      assert.equal(call.status, status === "incomplete" ? "incomplete" : "completed");
    }
  });

  // The <think> token shows no text: its logprob rides on the next chunk that has a delta (no
  // chunk is an empty delta holding only logprobs), and the stream's logprobs are the whole
  // answer's, token for token (issue 47).
  test("streamed chat logprobs with thinking: no empty-delta chunk, every token covered", async () => {
    const body = {
      messages: [{ role: "user", content: "What is 27 + 15?" }], max_tokens: 80, temperature: 0, logprobs: true,
      chat_template_kwargs: { enable_thinking: true },
    };
    const whole = await openai.chat.completions.create(body);
    const tokens = whole.choices[0].logprobs.content.map((t) => t.token);
    assert.equal(tokens.length, whole.usage.completion_tokens);
    assert.equal(tokens[0], "<think>");
    assert.match(whole.choices[0].message.reasoning_content, WORKING);
    const streamed = [];
    let reasoning = "";
    for await (const ch of await openai.chat.completions.create({ ...body, stream: true })) {
      const c = ch.choices[0];
      if (!c) continue;
      if (c.logprobs?.content?.length && !c.finish_reason) {
        const d = c.delta;
        assert.ok(d.content || d.reasoning_content || d.tool_calls?.length || d.role, "logprobs on an empty delta: " + JSON.stringify(ch));
      }
      streamed.push(...(c.logprobs?.content || []).map((t) => t.token));
      reasoning += c.delta?.reasoning_content || "";
    }
    assert.deepEqual(streamed, tokens);
    assert.equal(reasoning, whole.choices[0].message.reasoning_content);
  });

  test("Anthropic thinking blocks and stop_sequences", async () => {
    const r = await anthropic.messages.create({
      model: "mimo-v2-nano", max_tokens: 256, messages: [{ role: "user", content: "What is 27 + 15?" }],
      thinking: { type: "enabled", budget_tokens: 128 }, temperature: 0,
    });
    assert.equal(r.content[0].type, "thinking");
    assert.match(r.content[0].thinking, WORKING);
    assert.equal(r.content[1].type, "text");
    assert.match(r.content[1].text, /42/);
    const s = await anthropic.messages.create({
      model: "mimo-v2-nano", max_tokens: 64, messages: [{ role: "user", content: "Where does Venlo live?" }],
      stop_sequences: ["Gostead"], temperature: 0,
    });
    assert.equal(s.stop_reason, "stop_sequence");
    assert.equal(s.stop_sequence, "Gostead");
    assert.doesNotMatch(s.content.map((b) => b.text).join(""), /Gostead/);
  });

  test("Anthropic tool_use / tool_result round trip, streamed", async () => {
    const messages = [{ role: "user", content: "What is the weather in Fenwick?" }];
    const first = await anthropic.messages.stream({ model: "mimo-v2-nano", max_tokens: 128, tools: ANTHROPIC_TOOLS, messages, temperature: 0 }).finalMessage();
    assert.equal(first.stop_reason, "tool_use");
    const use = first.content.find((b) => b.type === "tool_use");
    assert.equal(use.name, "get_weather");
    assert.match(use.id, /.+/);
    assert.equal(typeof use.input.city, "string");
    const result = runTool("get_weather", use.input);
    messages.push({ role: "assistant", content: first.content });
    messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: result }] });
    const final = await anthropic.messages.create({ model: "mimo-v2-nano", max_tokens: 128, tools: ANTHROPIC_TOOLS, messages, temperature: 0 });
    assert.equal(final.stop_reason, "end_turn");
    const weather = JSON.parse(result);
    const text = final.content.filter((b) => b.type === "text").map((b) => b.text).join("");
    assert.ok(text.includes(String(weather.temperature)) || text.includes(weather.condition), text);
  });
});

// --override-generation-config (vLLM's flag): the sampling a request gets for the fields it leaves
// out. Greedy by default here; a request's own temperature still wins.
describe("nano model: --override-generation-config sets the default sampling", () => {
  let server, openai;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "2048", "--override-generation-config", '{"temperature": 0}']);
    openai = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("no temperature in the request: greedy (every token the most likely), as temperature 0", async () => {
    assert.match(server.stderr(), /default sampling: temperature 0, top_p 1/);
    const messages = [{ role: "user", content: "What is the weather in Fenwick?" }];
    const bare = await openai.chat.completions.create({ messages, tools: TOOLS, logprobs: true, top_logprobs: 5, max_tokens: 64 });
    for (const t of bare.choices[0].logprobs.content) {
      const best = Math.max(...t.top_logprobs.map((x) => x.logprob));
      assert.equal(t.logprob, best, `'${t.token}' (${t.logprob}) is not the most likely (${best})`);
    }
    const greedy = await openai.chat.completions.create({ messages, tools: TOOLS, temperature: 0, max_tokens: 64 });
    const unnamed = (m) => ({ ...m, tool_calls: m.tool_calls?.map(({ id, ...call }) => call) });  // ids are random
    assert.deepEqual(unnamed(bare.choices[0].message), unnamed(greedy.choices[0].message));
    assert.equal(bare.choices[0].message.tool_calls[0].function.name, "get_weather");
    // The Responses API echoes the sampling it used.
    const r = await post(`${server.url}/v1/responses`, { input: "Where does Venlo live?", max_output_tokens: 16 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.temperature, 0);
    const hot = await post(`${server.url}/v1/responses`, { input: "Where does Venlo live?", max_output_tokens: 16, temperature: 0.7 });
    assert.equal(hot.json.temperature, 0.7);
  });
});

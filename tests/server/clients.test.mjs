// The clients users point at an OpenAI-compatible server, in their current npm releases, against
// `mimo serve`: the Vercel AI SDK (`ai` + `@ai-sdk/openai`, whose default provider speaks the
// Responses API), LangChain (`@langchain/openai`, chat completions and useResponsesApi), and the
// official `openai` client's helpers (chat.completions.parse with zod, models.retrieve).
// Meaningful answers and tool loops on the default model; structured output on random weights,
// where only the grammar makes it valid.
import assert from "node:assert/strict";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, OpenAI, ROOT, ensureE2eModel, startServer } from "./harness.mjs";

const require = createRequire(path.join(ROOT, "third_party/package.json"));
const { z } = require("zod");
const { generateText, generateObject, streamText, tool, stepCountIs } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");
const { zodResponseFormat } = require("openai/helpers/zod");
const { ChatOpenAI } = require("@langchain/openai");

const TOOLS = JSON.parse(fs.readFileSync(path.join(ROOT, "scripts/demo/tools.json"), "utf8"));
// The shape the default model was trained on for get_weather (scripts/nano/data.py), so its answer
// from the result is in its repertoire: the test is about the tool loop, not the toy's reach.
const WEATHER_RESULT = { city: "Fenwick", temperature: 9, condition: "rainy" };

describe("clients: AI SDK, LangChain and the openai helpers on the default model", () => {
  let server, provider;
  before(async () => {
    server = await startServer(NANO, ["--max-model-len", "2048"]);
    provider = createOpenAI({ baseURL: server.url + "/v1", apiKey: "none" });
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("AI SDK: generateText and streamText through the default provider (Responses API)", async () => {
    const r = await generateText({ model: provider("mimo-v2-nano"), prompt: "What is 27 + 15?", temperature: 0, maxRetries: 0 });
    assert.match(r.text, /42/);
    assert.equal(r.finishReason, "stop");
    assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, JSON.stringify(r.usage));
    assert.match(r.response.id, /^resp_/);  // it did go through /v1/responses
    const s = streamText({ model: provider("mimo-v2-nano"), prompt: "What is 27 + 15?", temperature: 0, maxRetries: 0 });
    let text = "";
    for await (const d of s.textStream) text += d;
    assert.equal(text, r.text);
  });

  test("AI SDK: a tool() loop runs the tool and answers from its result", async () => {
    let calls = 0;
    const r = await generateText({
      model: provider("mimo-v2-nano"), temperature: 0, maxRetries: 0, stopWhen: stepCountIs(3),
      prompt: "What is the weather in Fenwick?",
      tools: {
        get_weather: tool({
          description: "Get the current weather in a city.",
          inputSchema: z.object({ city: z.string().describe("The city name.") }),
          execute: async ({ city }) => { calls++; assert.equal(city, "Fenwick"); return WEATHER_RESULT; },
        }),
      },
    });
    assert.equal(calls, 1);
    assert.equal(r.steps.length, 2);
    assert.match(r.text, /Fenwick/);
  });

  test("AI SDK: the chat-completions provider too", async () => {
    const r = await generateText({ model: provider.chat("mimo-v2-nano"), prompt: "Where does Venlo live?", temperature: 0, maxRetries: 0 });
    assert.match(r.text, /Gostead/);
  });

  test("LangChain: ChatOpenAI invoke and bindTools, over chat completions and the Responses API", async () => {
    for (const useResponsesApi of [false, true]) {
      const llm = new ChatOpenAI({ model: "mimo-v2-nano", temperature: 0, apiKey: "none", maxRetries: 0, useResponsesApi,
        configuration: { baseURL: server.url + "/v1" } });
      const a = await llm.invoke("What is 27 + 15?");
      assert.match(String(a.content?.[0]?.text ?? a.content), /42/);
      const withTools = llm.bindTools(TOOLS);
      const m = await withTools.invoke("What is the weather in Fenwick?");
      assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
      assert.equal(m.tool_calls[0].name, "get_weather");
      assert.deepEqual(m.tool_calls[0].args, { city: "Fenwick" });
    }
  });

  test("openai: models.retrieve and models.list", async () => {
    const client = server.openai();
    const m = await client.models.retrieve("mimo-v2-nano");
    assert.equal(m.id, "mimo-v2-nano");
    assert.equal(m.object, "model");
    await assert.rejects(client.models.retrieve("gpt-9"), (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
    assert.deepEqual((await client.models.list()).data.map((x) => x.id), ["mimo-v2-nano"]);
  });
});

describe("clients: structured output on random weights", () => {
  let server, provider;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "1024", "--grammar-max-string-length", "16"]);
    provider = createOpenAI({ baseURL: server.url + "/v1", apiKey: "none" });
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  const Recipe = z.object({ title: z.string(), servings: z.number().int(), vegan: z.boolean(), tags: z.array(z.string()).max(3) });

  test("AI SDK generateObject (Responses API and chat completions)", async () => {
    for (const model of [provider("e2e"), provider.chat("e2e")]) {
      for (let i = 0; i < 3; i++) {
        const r = await generateObject({ model, schema: Recipe, prompt: `A recipe (${i}).`, maxRetries: 0, maxOutputTokens: 300,
          providerOptions: { openai: { reasoningEffort: "none" } } });
        assert.deepEqual(Object.keys(r.object).sort(), ["servings", "tags", "title", "vegan"]);
      }
    }
  });

  test("openai chat.completions.parse with zodResponseFormat", async () => {
    const client = server.openai();
    for (let i = 0; i < 3; i++) {
      const r = await client.chat.completions.parse({
        model: "e2e", max_tokens: 300, messages: [{ role: "user", content: `A recipe (${i}).` }],
        response_format: zodResponseFormat(Recipe, "recipe"), chat_template_kwargs: { enable_thinking: false },
      });
      assert.equal(r.choices[0].finish_reason, "stop");
      assert.ok(Recipe.safeParse(r.choices[0].message.parsed).success);
    }
  });

  test("LangChain withStructuredOutput (json_schema), over both APIs", async () => {
    for (const useResponsesApi of [false, true]) {
      const llm = new ChatOpenAI({ model: "e2e", apiKey: "none", maxRetries: 0, maxTokens: 300, useResponsesApi,
        configuration: { baseURL: server.url + "/v1" }, modelKwargs: useResponsesApi ? { reasoning: { effort: "none" } } : { chat_template_kwargs: { enable_thinking: false } } });
      const out = await llm.withStructuredOutput(Recipe, { name: "recipe", method: "jsonSchema" }).invoke("A recipe.");
      assert.ok(Recipe.safeParse(out).success, JSON.stringify(out));
    }
  });
});

// OpenAI's legacy function calling (`functions` / `function_call`, `role: "function"` results),
// which the openai SDK still types and older clients still send: read as tools and answered in
// the legacy shape (message.function_call, finish_reason "function_call"). On random weights a
// named function_call is what makes a call come out.
describe("clients: legacy functions and function_call through the openai client", () => {
  let server, client;
  const WEATHER = { name: "get_weather", description: "Get the current weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string", description: "The city name." } }, required: ["city"] } };
  const TIME = { name: "get_time", description: "The time in a zone.",
    parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] } };
  const USER = [{ role: "user", content: "What is the weather in Fenwick?" }];
  const OFF = { chat_template_kwargs: { enable_thinking: false } };
  const tokenize = async (body) => {
    const r = await fetch(server.url + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const j = await r.json();
    assert.equal(r.status, 200, JSON.stringify(j));
    return j.tokens;
  };
  before(async () => {
    // Strings bounded, so a random-weight call always closes within max_tokens (a call cut by
    // max_tokens is reported "length").
    server = await startServer(ensureE2eModel(), ["--max-model-len", "1024", "--grammar-max-string-length", "16"]);
    client = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("functions reach the prompt exactly as the same tools do; role function results as tool results", async () => {
    const asTools = [WEATHER, TIME].map((f) => ({ type: "function", function: f }));
    const legacy = await tokenize({ messages: USER, functions: [WEATHER, TIME] });
    assert.deepEqual(legacy, await tokenize({ messages: USER, tools: asTools }));
    assert.ok(legacy.length > (await tokenize({ messages: USER })).length + 20, "the functions are in the prompt");
    // A legacy history: the assistant's function_call and the function's result.
    const args = JSON.stringify({ city: "Fenwick" });
    const result = JSON.stringify({ temperature: 9, condition: "rainy" });
    const history = await tokenize({ messages: [...USER, { role: "assistant", content: null, function_call: { name: "get_weather", arguments: args } },
      { role: "function", name: "get_weather", content: result }], functions: [WEATHER] });
    const modern = await tokenize({ messages: [...USER, { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: args } }] },
      { role: "tool", tool_call_id: "c1", content: result }], tools: [asTools[0]] });
    assert.deepEqual(history, modern);
  });

  test("function_call {name}: message.function_call, finish_reason function_call, whole and streamed alike", async () => {
    for (const seed of [3, 231]) {
      const body = { model: "e2e", messages: USER, functions: [WEATHER, TIME], function_call: { name: "get_weather" }, max_tokens: 200, seed, ...OFF };
      const whole = await client.chat.completions.create(body);
      const m = whole.choices[0].message;
      assert.equal(m.function_call?.name, "get_weather", JSON.stringify(whole));
      assert.equal(typeof JSON.parse(m.function_call.arguments).city, "string");
      assert.equal(m.tool_calls, undefined);
      assert.equal(whole.choices[0].finish_reason, "function_call");
      // Streamed: the name in the first function_call delta, the arguments in pieces, no tool_calls.
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let name = null, argsText = "", finish = null, pieces = 0;
      for await (const chunk of stream) {
        const c = chunk.choices[0];
        if (!c) continue;
        assert.equal(c.delta.tool_calls, undefined, JSON.stringify(chunk));
        if (c.delta.function_call) {
          pieces++;
          if (c.delta.function_call.name) {
            assert.equal(name, null, "the name comes once");
            name = c.delta.function_call.name;
          }
          argsText += c.delta.function_call.arguments ?? "";
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
      assert.equal(name, "get_weather");
      assert.ok(pieces >= 1);
      assert.equal(argsText, m.function_call.arguments);
      assert.equal(finish, "function_call");
    }
  });

  test("function_call none: no call; the answer to a legacy history is a normal 200", async () => {
    const none = await client.chat.completions.create({ model: "e2e", messages: USER, functions: [WEATHER], function_call: "none", max_tokens: 8, ...OFF });
    assert.equal(none.choices[0].message.function_call, undefined);
    assert.notEqual(none.choices[0].finish_reason, "function_call");
    assert.equal(typeof none.choices[0].message.content, "string");
    const next = await client.chat.completions.create({ model: "e2e", max_tokens: 8, ...OFF, functions: [WEATHER], function_call: "auto",
      messages: [...USER, { role: "assistant", content: null, function_call: { name: "get_weather", arguments: "{\"city\":\"Fenwick\"}" } },
        { role: "function", name: "get_weather", content: "{\"temperature\":9}" }] });
    assert.equal(next.choices.length, 1);
    assert.ok(["stop", "length", "function_call"].includes(next.choices[0].finish_reason));
  });
});

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

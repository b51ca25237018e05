// Every error case of `mimo serve`, status code and body asserted: malformed JSON, wrong types,
// missing or empty messages, a prompt longer than the context, max_tokens beyond it, bad
// tool_choice, unknown model (404), wrong or missing API key (401), a full queue (429), still
// loading (503), each as the OpenAI error object (the Anthropic one on /v1/messages), and through
// the official clients' own error classes. The server must survive all of them. With --api-key,
// every registered route (the list checked against src/server's registrations) is tried without
// a key, with a wrong one and with the right one (Bearer and x-api-key).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Anthropic, OpenAI, ROOT, assertOpenAiError, ensureE2eModel, post, sleep, startServer } from "./harness.mjs";

const USER = [{ role: "user", content: "hi" }];

describe("errors: OpenAI and Anthropic error objects", () => {
  let server, chat, comp, msgs, resp;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "256"]);
    chat = server.url + "/v1/chat/completions";
    comp = server.url + "/v1/completions";
    msgs = server.url + "/v1/messages";
    resp = server.url + "/v1/responses";
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("malformed JSON and non-object bodies", async () => {
    for (const url of [chat, comp]) {
      assertOpenAiError(assert, await post(url, "{\"messages\": [", {}), 400, { match: /JSON/ });
      assertOpenAiError(assert, await post(url, "[1, 2]"), 400, { match: /object/ });
      assertOpenAiError(assert, await post(url, ""), 400);
    }
    const r = await post(msgs, "{nope");
    assert.equal(r.status, 400);
    assert.equal(r.json.type, "error");
    assert.equal(r.json.error.type, "invalid_request_error");
  });

  test("wrong types name the field", async () => {
    const cases = [
      [{ messages: "hello" }, "messages"],
      [{ messages: [{ role: "user", content: 5 }] }, /^messages\[0\]\.content$/],
      [{ messages: [{ role: 7, content: "x" }] }, /^messages\[0\]\.role$/],
      [{ messages: USER, temperature: "hot" }, "temperature"],
      [{ messages: USER, top_p: [] }, "top_p"],
      [{ messages: USER, max_tokens: "5" }, "max_tokens"],
      [{ messages: USER, max_tokens: 2.5 }, "max_tokens"],
      [{ messages: USER, max_completion_tokens: -1 }, "max_completion_tokens"],
      [{ messages: USER, n: "2" }, "n"],
      [{ messages: USER, stream: "yes" }, "stream"],
      [{ messages: USER, seed: "x" }, "seed"],
      [{ messages: USER, stop: 5 }, "stop"],
      [{ messages: USER, logprobs: "yes" }, "logprobs"],
      [{ messages: USER, top_logprobs: 50, logprobs: true }, "top_logprobs"],
      [{ messages: USER, logit_bias: [] }, "logit_bias"],
      [{ messages: USER, tools: {} }, "tools"],
      [{ messages: USER, stream_options: 1, stream: true }, "stream_options"],
      [{ messages: USER, chat_template_kwargs: "x" }, "chat_template_kwargs"],
      [{ messages: USER, model: 5 }, "model"],
    ];
    for (const [body, param] of cases) {
      const r = await post(chat, body);
      assertOpenAiError(assert, r, 400, { param });
      assert.ok(r.json.error.message.includes(String(r.json.error.param)), r.text);
    }
    assertOpenAiError(assert, await post(comp, { prompt: 5 }), 400, { param: "prompt" });
    assertOpenAiError(assert, await post(comp, { prompt: "x", max_tokens: "a" }), 400, { param: "max_tokens" });
    assertOpenAiError(assert, await post(comp, { prompt: "x", echo: "yes" }), 400, { param: "echo" });
    // echo with logprobs would need the prompt's log-probabilities: refused by name, not ignored.
    assertOpenAiError(assert, await post(comp, { prompt: "x", echo: true, logprobs: 1 }), 400, { param: "echo" });
  });

  test("missing or empty messages / prompt", async () => {
    assertOpenAiError(assert, await post(chat, {}), 400, { param: "messages" });
    assertOpenAiError(assert, await post(chat, { messages: [] }), 400, { param: "messages" });
    assertOpenAiError(assert, await post(comp, {}), 400, { param: "prompt" });
    assertOpenAiError(assert, await post(comp, { prompt: "" }), 400, { param: "prompt" });
    assertOpenAiError(assert, await post(comp, { prompt: [] }), 400, { param: "prompt" });
  });

  test("an image or audio part is refused: this engine is text-only", async () => {
    const r = await post(chat, { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] });
    assertOpenAiError(assert, r, 400, { match: /text/ });
    const audio = await post(chat, { messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }] }] });
    assertOpenAiError(assert, audio, 400, { match: /text/ });
    const img = await post(msgs, { max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] });
    assert.equal(img.status, 400);
    assert.equal(img.json.type, "error");
    assert.match(img.json.error.message, /text-only/);
  });

  test("a prompt longer than the context, max_tokens beyond it", async () => {
    const long = "word ".repeat(400);
    assertOpenAiError(assert, await post(chat, { messages: [{ role: "user", content: long }] }), 400, { param: "messages", match: /max_model_len\) is 256/ });
    assertOpenAiError(assert, await post(comp, { prompt: long }), 400, { param: "prompt", match: /max_model_len\) is 256/ });
    const a = await post(server.url + "/v1/messages", { max_tokens: 5, messages: [{ role: "user", content: long }] });
    assert.equal(a.status, 400);
    assert.match(a.json.error.message, /max_model_len\) is 256/);
    // max_tokens past the room the prompt leaves: the room (as llama-server), finish "length".
    const c = await post(chat, { messages: USER, max_tokens: 100000, ignore_eos: true });
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.choices[0].finish_reason, "length");
    assert.equal(c.json.usage.prompt_tokens + c.json.usage.completion_tokens, 256);
    const p = await post(comp, { prompt: "x", max_tokens: 100000, ignore_eos: true, min_tokens: 100000 });
    assert.equal(p.status, 200, p.text);
    assert.equal(p.json.usage.prompt_tokens + p.json.usage.completion_tokens, 256);
  });

  test("bad tool_choice", async () => {
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
    assertOpenAiError(assert, await post(chat, { messages: USER, tools, tool_choice: "sometimes" }), 400, { param: "tool_choice" });
    assertOpenAiError(assert, await post(chat, { messages: USER, tools, tool_choice: 3 }), 400, { param: "tool_choice" });
    assertOpenAiError(assert, await post(chat, { messages: USER, tools, tool_choice: { type: "function", function: { name: "g" } } }), 400, { param: "tool_choice" });
    assertOpenAiError(assert, await post(chat, { messages: USER, tool_choice: "required" }), 400, { param: "tool_choice" });
  });

  test("unknown model: 404, also through the openai client's NotFoundError", async () => {
    const r = await post(chat, { model: "gpt-9", messages: USER });
    assertOpenAiError(assert, r, 404, { param: "model", match: /gpt-9/ });
    await assert.rejects(server.openai().chat.completions.create({ model: "gpt-9", messages: USER }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError);
      assert.equal(e.status, 404);
      return true;
    });
    const a = await post(msgs, { model: "claude-9", max_tokens: 5, messages: USER });
    assert.equal(a.status, 404);
    assert.equal(a.json.type, "error");
    assert.equal(a.json.error.type, "not_found_error");
  });

  test("Anthropic errors: Anthropic shape, the SDK's error classes", async () => {
    const cases = [
      [{ messages: USER }, /max_tokens/],
      [{ max_tokens: 5 }, /messages/],
      [{ max_tokens: 5, messages: [] }, /messages/],
      [{ max_tokens: "5", messages: USER }, /max_tokens/],
      [{ max_tokens: 5, messages: USER, system: 5 }, /system/],
      [{ max_tokens: 5, messages: USER, stop_sequences: "x" }, /stop_sequences/],
      [{ max_tokens: 5, messages: USER, thinking: "on" }, /thinking/],
      [{ max_tokens: 5, messages: USER, tool_choice: { type: "bogus" } }, /tool_choice/],
    ];
    for (const [body, re] of cases) {
      const r = await post(msgs, body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.type, "error", r.text);
      assert.equal(r.json.error.type, "invalid_request_error");
      assert.match(r.json.error.message, re);
    }
    await assert.rejects(server.anthropic().messages.create({ model: "e2e", max_tokens: 1, messages: USER, thinking: { type: "enabled", budget_tokens: 4 } }), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError);
      assert.equal(e.status, 400);
      return true;
    });
    const big = await server.anthropic().messages.create({ model: "e2e", max_tokens: 100000, messages: USER });
    assert.ok(big.usage.input_tokens + big.usage.cache_read_input_tokens + big.usage.output_tokens <= 256);
  });

  test("type fuzz: every field with every JSON type gives 200 or a 400 naming it, never a 500", async () => {
    const VALUES = [null, true, 0, -1, 1.5, 1e10, "x", "", [], [1], {}, { a: 1 }];
    const endpoints = [
      [chat, { messages: USER, max_tokens: 2 }, ["model", "messages", "max_tokens", "max_completion_tokens",
        "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "logit_bias", "seed", "stop", "n", "logprobs", "top_logprobs", "stream", "stream_options", "tools",
        "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "ignore_eos", "min_tokens",
        "response_format", "stop_token_ids", "user", "continue_final_message", "add_generation_prompt",
        "functions", "function_call", "audio", "modalities", "web_search_options", "prediction"]],
      [comp, { prompt: "hi", max_tokens: 2 }, ["model", "prompt", "max_tokens", "temperature", "top_p", "n",
        "logprobs", "stop", "seed", "echo", "stream", "stream_options", "logit_bias", "ignore_eos", "min_tokens",
        "response_format"]],
      [msgs, { messages: USER, max_tokens: 2 }, ["model", "messages", "max_tokens", "system", "temperature",
        "top_p", "top_k", "stop_sequences", "stream", "tools", "tool_choice", "thinking", "metadata",
        "output_config", "output_format"]],
      [server.url + "/v1/messages/count_tokens", { messages: USER }, ["model", "messages", "system", "tools",
        "tool_choice", "thinking"]],
      [resp, { input: "hi", max_output_tokens: 2 }, ["model", "input", "instructions", "max_output_tokens",
        "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "store",
        "stream", "previous_response_id", "include", "metadata", "user", "background", "truncation"]],
      [resp, { input: "hi", max_output_tokens: 2, stream: true }, ["max_output_tokens", "tools", "tool_choice",
        "text", "reasoning", "include"]],
      // Streamed: a refused request is a JSON error before any SSE starts.
      [chat, { messages: USER, max_tokens: 2, stream: true }, ["max_tokens", "temperature", "n", "logprobs",
        "top_logprobs", "stop", "stream_options", "tools", "tool_choice", "chat_template_kwargs", "response_format"]],
      [comp, { prompt: "hi", max_tokens: 2, stream: true }, ["max_tokens", "n", "logprobs", "stop", "stream_options"]],
      [msgs, { messages: USER, max_tokens: 2, stream: true }, ["max_tokens", "system", "stop_sequences", "tools",
        "tool_choice", "thinking"]],
      [server.url + "/tokenize", { prompt: "hi" }, ["model", "prompt", "return_token_strs", "add_special_tokens"]],
      [server.url + "/tokenize", { messages: USER }, ["messages", "add_generation_prompt", "chat_template_kwargs", "tools"]],
      [server.url + "/detokenize", { tokens: [1, 2] }, ["model", "tokens"]],
    ];
    const msgFields = ["role", "content"];
    const cases = [];
    for (const [url, base, fields] of endpoints) {
      for (const f of fields) for (const v of VALUES) cases.push([url, { ...base, [f]: v }, f]);
      if (base.messages) for (const f of msgFields) for (const v of VALUES) cases.push([url, { ...base, messages: [{ ...USER[0], [f]: v }] }, f]);
    }
    const bad = [];
    for (let i = 0; i < cases.length; i += 8) {
      await Promise.all(cases.slice(i, i + 8).map(async ([url, body, f]) => {
        const r = await post(url, body);
        if (r.status === 200) {
          if (body.stream === true) assert.match(r.headers.get("content-type"), /text\/event-stream/);
          return;
        }
        if (f === "model" && typeof body.model === "string" && r.status === 404) return;  // unknown model
        if (f === "previous_response_id" && typeof body[f] === "string" && r.status === 404) return;  // unknown id
        const msg = url === msgs ? r.json?.error?.message : r.json?.error?.message;
        if (r.status !== 400 || typeof msg !== "string" || !msg.includes(f === "role" || f === "content" ? "messages" : f)) {
          bad.push(`${url.replace(server.url, "")} ${JSON.stringify(body)} -> ${r.status} ${r.text.slice(0, 200)}`);
        }
      }));
    }
    assert.deepEqual(bad, []);
  });

  test("nested fuzz: tools, tool calls, content parts, tool_choice objects: 200 or 400, never 500", async () => {
    const V = [null, true, 0, 1.5, "x", [], [1], {}, { a: 1 }];
    const fn = { name: "f", description: "d", parameters: { type: "object", properties: { a: { type: "string" } } } };
    const cases = [];
    for (const v of V) {
      cases.push([chat, { messages: USER, max_tokens: 2, tools: [v] }]);
      cases.push([chat, { messages: USER, max_tokens: 2, tools: [{ type: "function", function: v }] }]);
      cases.push([chat, { messages: USER, max_tokens: 2, tools: [{ type: v, function: fn }] }]);
      for (const k of ["name", "description", "parameters", "strict"]) {
        cases.push([chat, { messages: USER, max_tokens: 2, tools: [{ type: "function", function: { ...fn, [k]: v } }] }]);
      }
      cases.push([chat, { messages: USER, max_tokens: 2, tools: [{ type: "function", function: fn }], tool_choice: { type: "function", function: v } }]);
      cases.push([chat, { messages: USER, max_tokens: 2, tools: [{ type: "function", function: fn }], tool_choice: { type: v, function: { name: "f" } } }]);
      cases.push([chat, { messages: [{ role: "user", content: [v] }], max_tokens: 2 }]);
      cases.push([chat, { messages: [{ role: "user", content: [{ type: "text", text: v }] }], max_tokens: 2 }]);
      cases.push([chat, { messages: [{ role: "user", content: [{ type: v, text: "hi" }] }], max_tokens: 2 }]);
      const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, tool_calls: v }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, tool_calls: [v] }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, tool_calls: [{ ...call, function: { name: "f", arguments: v } }] }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, tool_calls: [{ ...call, function: v }] }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: "x", reasoning_content: v }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "tool", tool_call_id: v, content: "r" }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "function", name: v, content: "r" }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "function", name: "f", content: v }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, function_call: v }], max_tokens: 2 }]);
      cases.push([chat, { messages: [...USER, { role: "assistant", content: null, function_call: { name: "f", arguments: v } }], max_tokens: 2 }]);
      cases.push([chat, { messages: USER, max_tokens: 2, functions: [v] }]);
      cases.push([chat, { messages: USER, max_tokens: 2, functions: [{ ...fn, parameters: v }] }]);
      cases.push([chat, { messages: USER, max_tokens: 2, functions: [fn], function_call: { name: v } }]);
      cases.push([chat, { messages: USER, max_tokens: 2, modalities: [v] }]);
      cases.push([chat, { messages: USER, max_tokens: 2, response_format: { type: "json_schema", json_schema: v } }]);
      cases.push([chat, { messages: USER, max_tokens: 2, response_format: { type: "json_schema", json_schema: { name: "s", schema: v } } }]);
      cases.push([chat, { messages: USER, max_tokens: 2, stream: true, stream_options: { include_usage: v } }]);
      cases.push([chat, { messages: USER, max_tokens: 2, logit_bias: { "5": v } }]);
      cases.push([comp, { prompt: [v], max_tokens: 2 }]);
      cases.push([server.url + "/detokenize", { tokens: [v] }]);
      cases.push([comp, { prompt: [[v]], max_tokens: 2 }]);
      cases.push([msgs, { max_tokens: 2, messages: [{ role: "user", content: [v] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: v, content: "r" }] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: v }] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: [...USER, { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: v }] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: [...USER, { role: "assistant", content: [{ type: "thinking", thinking: v }] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, tools: [v] }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, tools: [{ name: "f", input_schema: v }] }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, system: [v] }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, thinking: { type: v } }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "tool", name: v } }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, output_config: { format: v } }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, output_config: { format: { type: "json_schema", schema: v } } }]);
      cases.push([msgs, { max_tokens: 2, messages: USER, thinking: { type: "enabled", budget_tokens: v } }]);
      cases.push([msgs, { max_tokens: 2, messages: [...USER, { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: v }] }] }]);
      cases.push([msgs, { max_tokens: 2, messages: [{ role: "system", content: v }, ...USER] }]);
      cases.push([resp, { max_output_tokens: 2, input: [v] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ role: "user", content: v }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ role: v, content: "x" }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ role: "user", content: [{ type: "input_text", text: v }] }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ type: "function_call", call_id: "c", name: "f", arguments: v }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ type: "function_call", call_id: v, name: "f", arguments: "{}" }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ type: "function_call_output", call_id: "c", output: v }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ type: "reasoning", content: v, summary: [] }, { role: "user", content: "x" }] }]);
      cases.push([resp, { max_output_tokens: 2, input: [{ type: "reasoning", encrypted_content: v, summary: v }, { role: "user", content: "x" }] }]);
      cases.push([resp, { max_output_tokens: 2, input: "x", tools: [{ type: "function", name: v, parameters: v }] }]);
      cases.push([resp, { max_output_tokens: 2, input: "x", text: { format: v } }]);
      cases.push([resp, { max_output_tokens: 2, input: "x", text: { format: { type: "json_schema", schema: v } } }]);
      cases.push([resp, { max_output_tokens: 2, input: "x", reasoning: { effort: v } }]);
      cases.push([resp, { max_output_tokens: 2, input: "x", tools: [{ type: "function", name: "f" }], tool_choice: { type: "allowed_tools", mode: v, tools: v } }]);
    }
    const bad = [];
    for (let i = 0; i < cases.length; i += 8) {
      await Promise.all(cases.slice(i, i + 8).map(async ([url, body]) => {
        const r = await post(url, body);
        const shapeOk = url === msgs ? r.json?.type === "error" || r.status === 200 : r.status === 200 || typeof r.json?.error?.message === "string";
        if ((r.status !== 200 && r.status !== 400) || !shapeOk) {
          bad.push(`${url.replace(server.url, "")} ${JSON.stringify(body)} -> ${r.status} ${r.text.slice(0, 160)}`);
        }
      }));
    }
    assert.deepEqual(bad, []);
  });

  test("accepted but unusable chat fields: audio, audio modalities, web search: a 400 naming the field", async () => {
    const cases = [
      [{ audio: { voice: "alloy", format: "wav" } }, "audio", /'audio' is not supported: this server outputs text only/],
      [{ modalities: ["text", "audio"] }, "modalities", /'modalities' holds 'audio', which is not supported: this server outputs text only/],
      [{ modalities: "text" }, "modalities", /array/],
      [{ web_search_options: {} }, "web_search_options", /'web_search_options' is not supported/],
    ];
    for (const [extra, param, match] of cases) {
      for (const stream of [false, true]) {
        assertOpenAiError(assert, await post(chat, { messages: USER, max_tokens: 2, stream, ...extra }), 400, { param, match });
      }
    }
    await assert.rejects(server.openai().chat.completions.create({ messages: USER, max_tokens: 2, modalities: ["text", "audio"], audio: { voice: "alloy", format: "mp3" } }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "audio");
    // Text only is what this server does: modalities ["text"] is fine, and so is a prediction
    // (dropped: the answer is the same without it).
    const ok = await post(chat, { messages: USER, max_tokens: 2, modalities: ["text"], prediction: { type: "content", content: "hi" } });
    assert.equal(ok.status, 200, ok.text);
  });

  test("legacy functions / function_call: refused mixed with tools, checked by their own names", async () => {
    const fn = { name: "f", parameters: { type: "object", properties: {} } };
    const tools = [{ type: "function", function: fn }];
    const cases = [
      [{ functions: [fn], tools }, "functions", /'tools' and 'functions' cannot be used together/],
      [{ functions: [fn], tool_choice: "auto" }, "functions", /'tool_choice' and 'functions'/],
      [{ function_call: "auto", tools }, "function_call", /'tools' and 'function_call'/],
      [{ function_call: "auto" }, "function_call", /needs 'functions'/],
      [{ functions: fn }, "functions", /array/],
      [{ functions: [{ description: "no name" }] }, "functions[0]", /name/],
      [{ functions: [fn], function_call: { name: "g" } }, "function_call", /'g', which is not in 'functions'/],
      [{ functions: [fn], function_call: "required" }, "function_call", /none, auto/],
    ];
    for (const [extra, param, match] of cases) {
      assertOpenAiError(assert, await post(chat, { messages: USER, max_tokens: 2, ...extra }), 400, { param, match });
    }
    const msgCases = [
      [[...USER, { role: "function", content: "r" }], "messages[1].name"],
      [[...USER, { role: "user", content: "x", function_call: { name: "f", arguments: "{}" } }], "messages[1].function_call"],
      [[...USER, { role: "assistant", content: null, function_call: { arguments: "{}" } }], "messages[1].function_call"],
      [[...USER, { role: "assistant", content: null, function_call: { name: "f", arguments: 5 } }], "messages[1].function_call.arguments"],
      [[...USER, { role: "assistant", content: null, function_call: { name: "f", arguments: "{}" }, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] }], "messages[1].function_call"],
    ];
    for (const [messages, param] of msgCases) {
      assertOpenAiError(assert, await post(chat, { messages, max_tokens: 2, functions: [fn] }), 400, { param });
    }
  });

  test("x-request-id on every response: the client's echoed when sane, else a new one; request-id on /v1/messages", async () => {
    const ID = /^req_[A-Za-z0-9]{24}$/;
    const get = (p, headers = {}) => fetch(server.url + p, { headers });
    const answers = [
      await post(chat, { messages: USER, max_tokens: 2 }),                         // 200
      await post(chat, { messages: "x" }),                                          // 400
      await post(server.url + "/v1/nope", {}),                                      // 404
      await get("/v1/chat/completions"),                                            // 405
      await get("/health"),
      await get("/v1/models"),
      await post(comp, { prompt: "hi", max_tokens: 2 }),
      await post(resp, { input: "hi", max_output_tokens: 2 }),
    ];
    const seen = new Set();
    for (const r of answers) {
      const id = r.headers.get("x-request-id");
      assert.match(id ?? "", ID, `${r.status} ${r.url ?? ""}`);
      seen.add(id);
    }
    assert.equal(seen.size, answers.length, "a new id per response");
    // A stream has it on its headers.
    const s = await post(chat, { messages: USER, max_tokens: 2, stream: true });
    assert.match(s.headers.get("content-type"), /text\/event-stream/);
    assert.match(s.headers.get("x-request-id"), ID);
    // The client's own id comes back (what a tracing proxy sets); one that is too long or has
    // characters a header must not echo gets a new one instead.
    assert.equal((await post(chat, { messages: USER, max_tokens: 2 }, { "x-request-id": "trace-42.a/b" })).headers.get("x-request-id"), "trace-42.a/b");
    assert.equal((await post(chat, { messages: "x" }, { "x-request-id": "trace-43" })).headers.get("x-request-id"), "trace-43");
    for (const bad of ["x".repeat(129), "two words", "caf\u00e9"]) {
      const h = new Headers();
      try { h.set("x-request-id", bad); } catch { continue; }  // fetch refuses some itself
      const r = await post(chat, { messages: USER, max_tokens: 2 }, Object.fromEntries(h));
      assert.match(r.headers.get("x-request-id"), ID, bad);
    }
    // Anthropic's request-id (the same id) on /v1/messages, errors included.
    for (const r of [await post(msgs, { max_tokens: 2, messages: USER }), await post(msgs, { messages: USER }),
      await post(msgs, { max_tokens: 2, messages: USER, stream: true }), await post(server.url + "/v1/messages/nope", {})]) {
      assert.match(r.headers.get("request-id") ?? "", ID, r.text);
      assert.equal(r.headers.get("request-id"), r.headers.get("x-request-id"));
    }
    assert.equal((await post(chat, { messages: USER, max_tokens: 2 })).headers.get("request-id"), null);
    // The official clients read them: openai's _request_id, Anthropic's _request_id.
    const oc = await server.openai().chat.completions.create({ messages: USER, max_tokens: 2 });
    assert.match(oc._request_id, ID);
    const am = await server.anthropic().messages.create({ model: "e2e", max_tokens: 2, messages: USER });
    assert.match(am._request_id, ID);
    await assert.rejects(server.openai().chat.completions.create({ model: "gpt-9", messages: USER }),
      (e) => { assert.match(e.requestID ?? "", ID); return true; });
  });

  test("the server is still healthy after all of it", async () => {
    assert.equal((await fetch(server.url + "/health")).status, 200);
    const r = await server.openai().chat.completions.create({ messages: USER, max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  });
});

describe("errors: API key (401), full queue (429), loading (503)", () => {
  let server;
  const KEY = "sk-test-123";
  before(async () => {
    // Not waiting for readiness: the first look may still see the loading server.
    server = await startServer(ensureE2eModel(), ["--max-model-len", "512", "--api-key", KEY, "--max-num-seqs", "1",
      "--max-waiting", "1", "--strict-max-tokens"], { waitReady: false, warmup: true });
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("503 while loading (when the first look is early enough), then 200", async (t) => {
    const h = await fetch(server.url + "/health");
    if (h.status === 503) {
      const r = await post(server.url + "/v1/chat/completions", { messages: USER }, { Authorization: `Bearer ${KEY}` });
      if (r.status === 503) {
        assertOpenAiError(assert, r, 503, { match: /loading/ });
        assert.equal(r.headers.get("retry-after"), "5");
      }
    } else {
      t.diagnostic("the server was ready before the first look; 503 not observed");
    }
    for (let i = 0; i < 600 && (await fetch(server.url + "/health")).status !== 200; i++) await sleep(50);
    assert.equal((await fetch(server.url + "/health")).status, 200);
  });

  test("missing or wrong key: 401 (OpenAI and Anthropic shapes); the right one works", async () => {
    const chat = server.url + "/v1/chat/completions";
    assertOpenAiError(assert, await post(chat, { messages: USER }), 401, { match: /API key/ });
    assertOpenAiError(assert, await post(chat, { messages: USER }, { Authorization: "Bearer wrong" }), 401, { match: /incorrect/ });
    const a = await post(server.url + "/v1/messages", { max_tokens: 3, messages: USER }, { "x-api-key": "wrong" });
    assert.equal(a.status, 401);
    assert.equal(a.json.error.type, "authentication_error");
    await assert.rejects(server.openai({ apiKey: "wrong" }).models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    await assert.rejects(server.anthropic({ apiKey: "wrong" }).messages.create({ model: "e2e", max_tokens: 2, messages: USER }),
      (e) => e instanceof Anthropic.AuthenticationError);
    // The scheme is case-insensitive (RFC 7235).
    const lower = await post(chat, { messages: USER, max_tokens: 2 }, { Authorization: `bearer ${KEY}` });
    assert.equal(lower.status, 200, lower.text);
    assert.equal((await post(chat, { messages: USER }, { Authorization: "Bearer" })).json.error.code, "invalid_api_key");
    const ok = await server.openai({ apiKey: KEY }).chat.completions.create({ messages: USER, max_tokens: 2 });
    assert.equal(ok.choices.length, 1);
    const ok2 = await server.anthropic({ apiKey: KEY }).messages.create({ model: "e2e", max_tokens: 2, messages: USER });
    assert.equal(ok2.type, "message");
    assert.equal((await fetch(server.url + "/health")).status, 200);  // /health needs no key
  });

  test("--strict-max-tokens: max_tokens past the context is a 400 naming it", async () => {
    const r = await post(server.url + "/v1/chat/completions", { messages: USER, max_tokens: 100000 }, { Authorization: `Bearer ${KEY}` });
    assertOpenAiError(assert, r, 400, { param: "max_tokens", match: /max_model_len\) 512/ });
    assert.equal(r.json.error.code, "context_length_exceeded");
  });

  test("a full queue answers 429; the admitted requests finish", async () => {
    const client = server.openai({ apiKey: KEY });
    const results = await Promise.all(Array.from({ length: 8 }, () =>
      client.chat.completions.create({ messages: USER, max_tokens: 64, ignore_eos: true })
        .then((r) => ({ ok: r }), (e) => ({ err: e }))));
    const ok = results.filter((r) => r.ok);
    const refused = results.filter((r) => r.err);
    assert.ok(ok.length >= 1, "some request was served");
    assert.ok(refused.length >= 1, "some request was refused");
    for (const r of refused) {
      assert.ok(r.err instanceof OpenAI.RateLimitError, String(r.err));
      assert.equal(r.err.status, 429);
      assert.equal(r.err.error.type, "rate_limit_error");
      // A full queue moves within a second: retry after 1 s (the clients' backoff reads it).
      assert.equal(r.err.headers.get("retry-after"), "1");
      assert.match(r.err.headers.get("x-request-id"), /^req_/);
    }
    for (const r of ok) assert.equal(r.ok.usage.completion_tokens, 64);
  });
});

describe("errors: a draining server's 503 says when to retry", () => {
  test("SIGTERM: a new request gets 503 with Retry-After the drain (--drain-timeout) and its x-request-id", async () => {
    const server = await startServer(ensureE2eModel(), ["--max-model-len", "512", "--drain-timeout", "7"]);
    try {
      const stream = await server.openai().chat.completions.create({
        messages: USER, max_tokens: 60, ignore_eos: true, stream: true, chat_template_kwargs: { enable_thinking: false },
      });
      let chunks = 0, refused = null, refusedA = null;
      for await (const ch of stream) {
        void ch;
        if (++chunks === 3) {
          server.signal("SIGTERM");
          await sleep(150);
          refused = await post(server.url + "/v1/chat/completions", { messages: USER, max_tokens: 2 }, { "x-request-id": "drain-1" });
          refusedA = await post(server.url + "/v1/messages", { max_tokens: 2, messages: USER });
        }
      }
      assertOpenAiError(assert, refused, 503, { match: /shutting down/ });
      assert.equal(refused.headers.get("retry-after"), "7");
      assert.equal(refused.headers.get("x-request-id"), "drain-1");
      assert.equal(refusedA.status, 503);
      assert.equal(refusedA.json.error.type, "overloaded_error");
      assert.equal(refusedA.headers.get("retry-after"), "7");
      assert.match(refusedA.headers.get("request-id"), /^req_/);
      assert.equal(await server.exited, 0, server.stderr());
    } finally {
      await server.stop();
    }
  });
});

// Every route `mimo serve` registers, with a request it serves (2xx) given the key. `auth`: "key"
// (the API: 401 without the key), "metrics" (the key unless --public-metrics) or "public" (never
// a key). `path` may be a function (a fresh stored response for the /v1/responses/{id} routes).
// Kept by hand; the first test fails when src/server registers a route that is not here (or this
// lists one it no longer registers), so a new route cannot go untried.
const ROUTES = [
  { route: "GET /health", auth: "public" },
  { route: "GET /metrics", auth: "metrics" },
  { route: "GET /v1/models", auth: "key" },
  { route: "GET /v1/models/{+}", auth: "key", path: "/v1/models/e2e" },
  { route: "POST /v1/chat/completions", auth: "key", body: { messages: USER, max_tokens: 1 } },
  { route: "POST /v1/completions", auth: "key", body: { prompt: "hi", max_tokens: 1 } },
  { route: "POST /v1/messages", auth: "key", body: { model: "e2e", max_tokens: 1, messages: USER } },
  { route: "POST /v1/messages/count_tokens", auth: "key", body: { model: "e2e", messages: USER } },
  { route: "POST /v1/responses", auth: "key", body: { input: "hi", max_output_tokens: 1 } },
  { route: "POST /v1/responses/input_tokens", auth: "key", body: { input: "hi" } },
  { route: "GET /v1/responses/{}", auth: "key", stored: (id) => `/v1/responses/${id}` },
  { route: "DELETE /v1/responses/{}", auth: "key", stored: (id) => `/v1/responses/${id}` },
  { route: "GET /v1/responses/{}/input_items", auth: "key", stored: (id) => `/v1/responses/${id}/input_items` },
  { route: "POST /tokenize", auth: "key", body: { prompt: "hi" } },
  { route: "POST /detokenize", auth: "key", body: { tokens: [9707, 1879] } },
];

// The routes src/server registers: every `"METHOD", "/path"` pair in its sources. A route whose
// pattern is not a string literal would escape that, so those are listed too (only the web UI's
// assets are, behind --no-webui in these tests), and so are the calls that register routes.
function registeredRoutes() {
  const dir = path.join(ROOT, "src/server");
  const routes = new Set(), computed = [];
  let handleCalls = 0;
  for (const f of fs.readdirSync(dir).filter((f) => /\.(cc|h)$/.test(f))) {
    const text = fs.readFileSync(path.join(dir, f), "utf8");
    for (const m of text.matchAll(/"(GET|POST|PUT|PATCH|DELETE|HEAD)",\s*"(\/[^"]*)"/g)) routes.add(`${m[1]} ${m[2]}`);
    for (const m of text.matchAll(/\badd\(\s*"[A-Z]+",\s*([^",\s][^,]*),/g)) computed.push(`${f}: ${m[1]}`);
    handleCalls += [...text.matchAll(/(\.|->)Handle\(/g)].length;
  }
  return { routes: [...routes].sort(), computed, handleCalls };
}

describe("errors: --api-key guards every route", () => {
  let server;
  const KEY = "sk-every-route";
  const WITH_KEY = [{ Authorization: `Bearer ${KEY}` }, { "x-api-key": KEY }];
  const WRONG = [{ Authorization: "Bearer sk-wrong" }, { "x-api-key": "sk-wrong" }];
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "512", "--api-key", KEY]);
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  const call = async (method, p, body, headers = {}) => {
    const res = await fetch(server.url + p, {
      method, headers: { ...(body ? { "Content-Type": "application/json" } : {}), ...headers },
      body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(30000),
    });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* /metrics is text */ }
    return { status: res.status, json, text };
  };
  // A stored response (made with the key), for the /v1/responses/{id} routes.
  const stored = async () => {
    const r = await call("POST", "/v1/responses", { input: "hi", max_output_tokens: 1 }, WITH_KEY[0]);
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.id, /^resp_/);
    return r.json.id;
  };
  const pathOf = async (r) => (r.stored ? r.stored(await stored()) : r.path || r.route.split(" ")[1]);

  test("the route list is every route src/server registers", () => {
    const { routes, computed, handleCalls } = registeredRoutes();
    assert.deepEqual(ROUTES.map((r) => r.route).sort(), routes,
      "a route registered in src/server is missing from ROUTES (or ROUTES has one no longer registered): add it with a request it serves");
    assert.deepEqual(computed, ["api_server.cc: path.c_str()"], "a route registered with a computed pattern: list it in ROUTES");
    assert.equal(handleCalls, 1, "routes registered other than through ApiServer::Route's add()");
  });

  test("without a key, or with a wrong one (Bearer or x-api-key): 401 that says so; nothing is done", async () => {
    for (const r of ROUTES) {
      const [method] = r.route.split(" ");
      const p = await pathOf(r);
      const anthropic = p.startsWith("/v1/messages");
      for (const headers of [{}, ...WRONG]) {
        const res = await call(method, p, r.body, headers);
        const what = `${r.route} (${p}) with ${JSON.stringify(headers)}`;
        if (r.auth === "public") {
          assert.equal(res.status, 200, `${what}: ${res.text}`);
          continue;
        }
        assert.equal(res.status, 401, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
        assert.ok(res.json?.error, `${what}: not an error object: ${res.text.slice(0, 300)}`);
        assert.equal(res.json.error.type, "authentication_error", what);
        if (anthropic) assert.equal(res.json.type, "error", what);
        else assert.equal(res.json.error.code, "invalid_api_key", what);
        assert.match(res.json.error.message, Object.keys(headers).length ? /incorrect API key/ : /missing API key/, what);
      }
      // A refused DELETE deleted nothing.
      if (method === "DELETE") assert.equal((await call("GET", p, null, WITH_KEY[0])).status, 200, `${p} after refused DELETEs`);
    }
  });

  test("with the right key (Bearer or x-api-key): every route answers 2xx", async () => {
    for (const r of ROUTES) {
      const [method] = r.route.split(" ");
      for (const headers of WITH_KEY) {
        const p = await pathOf(r);
        const res = await call(method, p, r.body, headers);
        const what = `${r.route} (${p}) with ${Object.keys(headers)[0]}`;
        assert.ok(res.status >= 200 && res.status < 300, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
        if (r.auth === "metrics") assert.match(res.text, /mimo:num_requests_running/, what);
        else assert.equal(typeof res.json, "object", `${what}: ${res.text.slice(0, 300)}`);
      }
    }
  });
});

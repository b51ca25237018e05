// The prefix cache below the KV pool, through `mimo serve` and the official clients (issue 46): a
// conversation served by one server is served by a restarted one on the same --prefix-cache-dir
// from disk, with the same answer, and every API's usage counts the reused tokens (Anthropic's
// cache_read_input_tokens with cache_control breakpoints, chat's and Responses' cached_tokens);
// /metrics counts them per tier. A damaged cache file is skipped, reported and recomputed. The
// RAM tier serves blocks a small pool evicted. The grammars requests compiled are recorded with the
// cache and compiled again before a restarted server is ready.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";

import { NANO, metric, metrics, startServer } from "./harness.mjs";

const SYSTEM = [
  { type: "text", text: "You are MiMo, a coding agent. " + "Read files before editing them; run the tests after every change; keep answers short. ".repeat(12) },
  { type: "text", text: "Project notes: the build uses CMake, the tests use GoogleTest and node:test. ".repeat(10), cache_control: { type: "ephemeral" } },
];
const MESSAGES = [{ role: "user", content: [{ type: "text", text: "What is 27 + 15?", cache_control: { type: "ephemeral" } }] }];
const systemText = SYSTEM.map((b) => b.text).join("\n\n");

const diskHits = async (s) => metric(await metrics(s.url), 'mimo:prefix_cache_tier_hits_total{model_name="mimo-v2-nano",tier="disk"}');

describe("prefix cache tiers", { timeout: 600000 }, () => {
  test("a restarted server answers from the disk tier, with the cold answer, and every API counts the reuse", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-prefix-cache-"));
    const flags = ["--prefix-cache-dir", dir, "--prefix-cache-disk", "256M", "--prefix-cache-ram", "0"];
    const body = { model: "mimo-v2-nano", max_tokens: 12, temperature: 0, system: SYSTEM, messages: MESSAGES };
    const chatBody = {
      model: "mimo-v2-nano", max_tokens: 8, temperature: 0,
      messages: [{ role: "system", content: systemText + " (chat)" }, { role: "user", content: "What is 27 + 15?" }],
    };
    const respBody = { model: "mimo-v2-nano", max_output_tokens: 8, temperature: 0, instructions: systemText + " (responses)", input: "What is 27 + 15?" };
    let cold, coldChat, coldResp;
    {
      const s = await startServer(NANO, flags);
      try {
        cold = await s.anthropic().messages.create(body);
        assert.equal(cold.usage.cache_read_input_tokens, 0, JSON.stringify(cold.usage));
        coldChat = await s.openai().chat.completions.create(chatBody);
        coldResp = await s.openai().responses.create(respBody);
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    const files = fs.readdirSync(dir, { recursive: true }).filter((f) => f.endsWith(".kvb"));
    assert.ok(files.length > 10, `${files.length} block files`);
    const prompt = cold.usage.input_tokens;
    {
      const s = await startServer(NANO, flags);
      try {
        const warm = await s.anthropic().messages.create(body);
        assert.deepEqual(warm.content, cold.content);
        assert.equal(warm.usage.input_tokens + warm.usage.cache_read_input_tokens, prompt);
        assert.ok(warm.usage.cache_read_input_tokens >= prompt - 32, JSON.stringify(warm.usage));
        assert.equal(await diskHits(s), warm.usage.cache_read_input_tokens);
        const chat = await s.openai().chat.completions.create(chatBody);
        assert.deepEqual(chat.choices[0].message, coldChat.choices[0].message);
        assert.ok(chat.usage.prompt_tokens_details.cached_tokens >= chat.usage.prompt_tokens - 32, JSON.stringify(chat.usage));
        const resp = await s.openai().responses.create(respBody);
        assert.deepEqual(resp.output.map((o) => o.content ?? o.summary), coldResp.output.map((o) => o.content ?? o.summary));
        assert.ok(resp.usage.input_tokens_details.cached_tokens >= resp.usage.input_tokens - 32, JSON.stringify(resp.usage));
        // Their system prompts share the Anthropic one's beginning, which is in the pool by now:
        // the rest of their prompts came from disk.
        const total = warm.usage.cache_read_input_tokens + chat.usage.prompt_tokens_details.cached_tokens +
          resp.usage.input_tokens_details.cached_tokens;
        const disk = await diskHits(s);
        assert.ok(disk > warm.usage.cache_read_input_tokens && disk < total, `${disk} of ${total}`);
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    // Damage every block file: nothing is trusted, the answer is recomputed and still the same.
    for (const f of files) {
      const p = path.join(dir, f);
      if (!fs.existsSync(p)) continue;
      const fd = fs.openSync(p, "r+");
      fs.writeSync(fd, Buffer.from([0xa5]), 0, 1, 200);
      fs.closeSync(fd);
    }
    {
      const s = await startServer(NANO, flags);
      try {
        const again = await s.anthropic().messages.create(body);
        assert.deepEqual(again.content, cold.content);
        assert.equal(again.usage.cache_read_input_tokens, 0, JSON.stringify(again.usage));
        const m = await metrics(s.url);
        assert.ok(metric(m, 'mimo:prefix_cache_tier_rejected_total{model_name="mimo-v2-nano",tier="disk"}') >= 1);
        assert.match(s.stderr(), /payload checksum mismatch; the file is removed and the block recomputed/);
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test("the grammars requests compiled are kept with the prefix cache and compiled before a restarted server is ready", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-prefix-cache-"));
    const flags = ["--prefix-cache-dir", dir, "--prefix-cache-ram", "0"];
    const tools = [
      { type: "function", function: { name: "read_file", description: "Read a file of the project.", parameters: { type: "object", properties: { path: { type: "string" }, offset: { type: "integer", minimum: 0 } }, required: ["path"] } } },
      { type: "function", function: { name: "run_tests", description: "Run the test suite.", parameters: { type: "object", properties: { filter: { type: "string" } } } } },
    ];
    const toolBody = { model: "mimo-v2-nano", max_tokens: 256, temperature: 0, tools, tool_choice: "required", messages: [{ role: "user", content: "Read src/main.cc." }] };
    const schemaBody = {
      model: "mimo-v2-nano", max_tokens: 128, temperature: 0, messages: [{ role: "user", content: "A number, as JSON." }],
      response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } } },
    };
    const count = async (s, n) => metric(await metrics(s.url), `mimo:${n}{model_name="mimo-v2-nano"}`);
    let coldTool, coldSchema;
    {
      const s = await startServer(NANO, flags);
      try {
        assert.equal(await count(s, "grammar_compiles_total"), 0);
        coldTool = await s.openai().chat.completions.create(toolBody);
        assert.equal(coldTool.choices[0].finish_reason, "tool_calls");
        coldSchema = await s.openai().chat.completions.create(schemaBody);
        assert.equal(await count(s, "grammar_compiles_total"), 2);
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    const records = () => fs.readdirSync(path.join(dir, "grammars")).filter((f) => f.endsWith(".json"));
    assert.equal(records().length, 2, records().join(", "));
    {
      const s = await startServer(NANO, flags);
      try {
        assert.match(s.stderr(), /compiled 2 recorded grammars/);
        assert.equal(await count(s, "grammar_compiles_total"), 2, "compiled before the server was ready");
        const hits = await count(s, "grammar_cache_hits_total");
        const tool = await s.openai().chat.completions.create(toolBody);
        assert.deepEqual(tool.choices[0].message.tool_calls.map((c) => c.function), coldTool.choices[0].message.tool_calls.map((c) => c.function));
        const schema = await s.openai().chat.completions.create(schemaBody);
        assert.equal(schema.choices[0].message.content, coldSchema.choices[0].message.content);
        assert.equal(await count(s, "grammar_compiles_total"), 2, "the requests compiled nothing");
        assert.ok(await count(s, "grammar_cache_hits_total") >= hits + 2);
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    // A record that is not one is reported and removed; the other is still compiled.
    const bad = path.join(dir, "grammars", records()[0]);
    fs.writeFileSync(bad, "{ not json");
    {
      const s = await startServer(NANO, flags);
      try {
        assert.match(s.stderr(), /not a grammar record; removed/);
        assert.match(s.stderr(), /compiled 1 recorded grammars/);
        assert.equal(fs.existsSync(bad), false);
        const tool = await s.openai().chat.completions.create(toolBody);
        assert.deepEqual(tool.choices[0].message.tool_calls.map((c) => c.function), coldTool.choices[0].message.tool_calls.map((c) => c.function));
      } finally {
        assert.equal(await s.stop(), 0);
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test("the RAM tier serves what a small KV pool evicted, within its bound", async () => {
    const s = await startServer(NANO, ["--num-kv-blocks", "80", "--prefix-cache-ram", "64M", "--max-model-len", "1024"]);
    try {
      const client = s.anthropic();
      const ask = (i) => client.messages.create({
        model: "mimo-v2-nano", max_tokens: 4, temperature: 0,
        system: `Agent ${i}. ` + "Use the tools you are given; answer with the result only. ".repeat(40),
        messages: [{ role: "user", content: "What is 27 + 15?" }],
      });
      const first = await ask(0);
      for (let i = 1; i <= 3; ++i) await ask(i);  // each ~40 blocks: agent 0's are evicted
      const again = await ask(0);
      assert.deepEqual(again.content, first.content);
      assert.ok(again.usage.cache_read_input_tokens >= 400, JSON.stringify(again.usage));
      const m = await metrics(s.url);
      const name = (n) => `mimo:prefix_cache_tier_${n}{model_name="mimo-v2-nano",tier="ram"}`;
      assert.equal(metric(m, name("hits_total")), again.usage.cache_read_input_tokens);
      assert.ok(metric(m, name("bytes")) <= 64 * 1024 * 1024);
      assert.equal(metric(m, name("capacity_bytes")), 64 * 1024 * 1024);
    } finally {
      assert.equal(await s.stop(), 0);
    }
  });
});

// The prefix cache below the KV pool, through `mimo serve` and the official clients (issue 46): a
// conversation served by one server is served by a restarted one on the same --prefix-cache-dir
// from disk, with the same answer, and every API's usage counts the reused tokens (Anthropic's
// cache_read_input_tokens with cache_control breakpoints, chat's and Responses' cached_tokens);
// /metrics counts them per tier. A damaged cache file is skipped, reported and recomputed. The
// RAM tier serves blocks a small pool evicted.
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

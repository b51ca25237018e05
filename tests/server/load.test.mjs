// `mimo serve` under load on the random-weight checkpoint: 32 concurrent streaming clients all
// served with nothing lost (every token's logprob entry arrives), a client that disconnects
// mid-stream frees its KV blocks (GET /metrics within ~1 s), and a bounded soak (a fixed count of
// mixed requests under a time limit) after which the server is idle, healthy and counted them all.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { MIMO, OpenAI, ensureE2eModel, metric, metrics, sleep, startServer } from "./harness.mjs";

const USER = (i) => [{ role: "user", content: `Client ${i} says hello.` }];
const OFF = { chat_template_kwargs: { enable_thinking: false } };

describe("load: concurrency, disconnects, soak", () => {
  let server, client;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "512", "--max-num-seqs", "32"]);
    client = server.openai();
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("32 concurrent streaming clients are all served, nothing lost", async () => {
    const N = 32, T = 12;
    const one = async (i) => {
      const stream = await client.chat.completions.create({
        messages: USER(i), max_tokens: T, ignore_eos: true, seed: i, logprobs: true, stream: true,
        stream_options: { include_usage: true }, ...OFF,
      });
      let text = "", tokens = 0, usage = null, finish = null;
      for await (const ch of stream) {
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) {
          text += (c.delta.content || "") + (c.delta.reasoning_content || "");
          tokens += c.logprobs?.content?.length || 0;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      return { i, text, tokens, usage, finish };
    };
    const before = metric(await metrics(server.url), "mimo:request_success_total") || 0;
    const got = await Promise.all(Array.from({ length: N }, (_, i) => one(i)));
    for (const g of got) {
      assert.equal(g.usage.completion_tokens, T, `client ${g.i}`);
      assert.equal(g.tokens, T, `client ${g.i}: ${g.tokens} token entries streamed`);
      assert.ok(g.finish === "length" || g.finish === "tool_calls", g.finish);
    }
    // The same seed alone gives the same text as under load (nothing mixed between streams).
    const alone = await one(5);
    assert.equal(alone.text, got[5].text);
    const m = await metrics(server.url);
    assert.equal(metric(m, "mimo:request_success_total") - before, N + 1);
  });

  test("a client that disconnects mid-stream frees its KV blocks within ~1 s", async () => {
    const ac = new AbortController();
    const stream = await client.chat.completions.create({
      messages: USER(99), max_tokens: 400, ignore_eos: true, stream: true, ...OFF,
    }, { signal: ac.signal });
    let chunks = 0, finish = null;
    try {
      // openai's stream ends quietly (or throws an AbortError) once its signal aborts.
      for await (const ch of stream) {
        if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
        if (ch.choices[0]?.delta) chunks++;
        if (chunks === 5) {
          const m = await metrics(server.url);
          assert.ok(metric(m, "mimo:kv_cache_usage_perc") > 0, "blocks in use while streaming");
          assert.equal(metric(m, "mimo:num_requests_running"), 1);
          ac.abort();
        }
      }
    } catch (e) {
      if (e.name !== "AbortError" && !(e instanceof OpenAI.APIUserAbortError)) throw e;
    }
    assert.equal(finish, null, "the stream was cut before it finished");
    assert.ok(chunks >= 5 && chunks < 100, `${chunks} chunks`);
    const t0 = Date.now();
    let m;
    do {
      await sleep(50);
      m = await metrics(server.url);
    } while ((metric(m, "mimo:kv_cache_usage_perc") > 0 || metric(m, "mimo:num_requests_running") > 0) && Date.now() - t0 < 3000);
    const took = Date.now() - t0;
    assert.equal(metric(m, "mimo:num_requests_running"), 0);
    assert.equal(metric(m, "mimo:kv_cache_usage_perc"), 0);
    assert.ok(took <= 1500, `blocks freed after ${took} ms`);
    assert.ok(metric(m, 'mimo:request_success_total{model_name="e2e",finished_reason="abort"}') >= 1, "counted as aborted");
  });

  test("mimo bench serve against it: every request completes, counts and latencies add up", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-bench-"));
    const out = path.join(dir, "result.json");
    for (const endpoint of ["completions", "chat"]) {
      const table = execFileSync(MIMO, ["bench", "serve", "--base-url", server.url + "/v1", "--model", "e2e",
        "--endpoint", endpoint, "--dataset", "random", "--input-len", "16", "--output-len", "8", "--num-prompts", "12",
        "--max-concurrency", "4", "--request-rate", "50", "--ignore-eos", "--seed", "1", "--result-json", out],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      for (const row of ["Successful requests:", "Mean TTFT (ms):", "P99 TPOT (ms):", "Median ITL (ms):", "P90 E2EL (ms):",
        "Output token throughput (tok/s):"]) assert.ok(table.includes(row), `${row} missing:\n${table}`);
      const r = JSON.parse(fs.readFileSync(out, "utf8"));
      assert.equal(r.completed, 12);
      assert.equal(r.failed, 0);
      assert.equal(r.total_output_tokens, 12 * 8);
      if (endpoint === "completions") assert.equal(r.total_input_tokens, 12 * 16);  // token-id prompts
      for (const q of r.requests) {
        assert.ok(q.ok && q.ttft > 0 && q.ttft <= q.e2e, JSON.stringify(q));
        assert.equal(q.output_tokens, 8);
      }
      assert.ok(r.mean_ttft_ms <= r.mean_e2el_ms && r.p99_tpot_ms >= r.median_tpot_ms);
      // The summary statistics of the per-request values in the same file, computed here.
      const ttfts = r.requests.map((q) => 1e3 * q.ttft);
      const mean = ttfts.reduce((a, b) => a + b, 0) / ttfts.length;
      assert.ok(Math.abs(r.mean_ttft_ms - mean) < 1e-6 * Math.max(1, mean));
      const std = Math.sqrt(ttfts.reduce((a, b) => a + (b - mean) ** 2, 0) / ttfts.length);
      assert.ok(Math.abs(r.std_ttft_ms - std) < 1e-6 * Math.max(1, std));
      const sorted = [...ttfts].sort((a, b) => a - b);
      const pos = 0.5 * (sorted.length - 1), lo = Math.floor(pos);
      const median = sorted[lo] + (sorted[Math.min(lo + 1, sorted.length - 1)] - sorted[lo]) * (pos - lo);
      assert.ok(Math.abs(r.median_ttft_ms - median) < 1e-6 * Math.max(1, median));
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test("bounded soak: 160 mixed requests, 8 at a time, under 60 s", async () => {
    const COUNT = 160, CONC = 8, LIMIT_MS = 60000;
    const t0 = Date.now();
    const before = metric(await metrics(server.url), "mimo:request_success_total") || 0;
    let next = 0, done = 0;
    const kinds = [
      async (i) => (await client.chat.completions.create({ messages: USER(i), max_tokens: 6, ...OFF })).choices.length,
      async (i) => {
        let n = 0;
        for await (const ch of await client.chat.completions.create({ messages: USER(i), max_tokens: 6, stream: true, ...OFF })) n += ch.choices.length;
        return n > 0 ? 1 : 0;
      },
      async (i) => (await client.completions.create({ model: "e2e", prompt: `soak ${i}`, max_tokens: 6 })).choices.length,
      async (i) => {
        let n = 0;
        for await (const ch of await client.completions.create({ model: "e2e", prompt: `soak ${i}`, max_tokens: 6, stream: true })) n += ch.choices.length;
        return n > 0 ? 1 : 0;
      },
    ];
    const worker = async () => {
      while (next < COUNT && Date.now() - t0 < LIMIT_MS) {
        const i = next++;
        assert.equal(await kinds[i % kinds.length](i), 1, `request ${i}`);
        done++;
      }
    };
    await Promise.all(Array.from({ length: CONC }, worker));
    assert.equal(done, COUNT, `${done} of ${COUNT} requests in ${Date.now() - t0} ms`);
    await sleep(100);
    const m = await metrics(server.url);
    assert.equal(metric(m, "mimo:request_success_total") - before, COUNT);
    assert.equal(metric(m, "mimo:num_requests_running"), 0);
    assert.equal(metric(m, "mimo:num_requests_waiting"), 0);
    assert.equal(metric(m, "mimo:kv_cache_usage_perc"), 0);
    assert.equal((await fetch(server.url + "/health")).status, 200);
  });
});

describe("SIGTERM drains", () => {
  test("a request in flight finishes, a new one gets 503, the process exits 0", async () => {
    const server = await startServer(ensureE2eModel(), ["--max-model-len", "512"]);
    try {
      const client = server.openai();
      const stream = await client.chat.completions.create({
        messages: USER(1), max_tokens: 80, ignore_eos: true, stream: true, stream_options: { include_usage: true }, ...OFF,
      });
      let chunks = 0, usage = null, finish = null, refused = null;
      for await (const ch of stream) {
        if (ch.usage) usage = ch.usage;
        if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
        if (++chunks === 3) {
          server.signal("SIGTERM");
          await sleep(150);
          refused = await fetch(server.url + "/v1/chat/completions", {
            method: "POST", headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ messages: USER(2), max_tokens: 2 }),
          }).then(async (r) => ({ status: r.status, body: await r.json() }));
        }
      }
      assert.equal(refused.status, 503);
      assert.match(refused.body.error.message, /shutting down/);
      assert.equal(usage.completion_tokens, 80);
      assert.ok(finish === "length" || finish === "tool_calls", finish);
      assert.equal(await server.exited, 0, server.stderr());
      assert.match(server.stderr(), /draining[\s\S]*stopped/);
    } finally {
      await server.stop();
    }
  });

  test("past --drain-timeout: the requests still running end, the process exits 0 (no crash)", async () => {
    const server = await startServer(ensureE2eModel(), ["--max-model-len", "512", "--drain-timeout", "0.5"]);
    try {
      const client = server.openai();
      const body = { messages: USER(3), max_tokens: 450, ignore_eos: true, ...OFF };
      const stream = await client.chat.completions.create({ ...body, stream: true });
      // A non-streaming one and a streaming one in flight when the drain gives up on them.
      const whole = fetch(server.url + "/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, text: await r.text() }), () => ({ status: "closed" }));
      let chunks = 0;
      const read = (async () => {
        try {
          for await (const ch of stream) if (++chunks === 2) server.signal("SIGTERM");
        } catch { /* the stream may be cut */ }
      })();
      await read;
      assert.equal(await server.exited, 0, server.stderr());
      assert.match(server.stderr(), /draining[\s\S]*stopped/);
      // It ends with an answer: 200 if it finished within the drain, else the shutdown's 503
      // (never a closed socket; tests/server/budgets.test.mjs checks the stream's error tail).
      const w = await whole;
      assert.ok(w.status === 200 || (w.status === 503 && /shutting down/.test(w.text)), JSON.stringify(w).slice(0, 400));
    } finally {
      await server.stop();
    }
  });
});

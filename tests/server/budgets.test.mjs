// Every request within a budget (issue 44): the attacks that used to kill the server, stall it or
// grow its memory without bound, replayed against `mimo serve` on the default model. Each asserts
// the request's answer and limit, that the server stays alive and /health answers, and the
// server's RSS before and after within a stated bound. docs/SECURITY.md lists the budgets.
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, ensureE2eModel, metric, metrics, post, sleep, spawnServe } from "./harness.mjs";

const USER = [{ role: "user", content: "hi" }];
const rssMb = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;
const schemaBody = (schema, extra = {}) => ({
  messages: USER, max_tokens: 8,
  response_format: { type: "json_schema", json_schema: { name: "x", schema } }, ...extra,
});
const toolBody = (parameters, toolChoice = "required") => ({
  messages: USER, max_tokens: 64, tool_choice: toolChoice,
  tools: [{ type: "function", function: { name: "f", parameters } }],
});

// One raw HTTP exchange: writes `bytes` (or calls write(sock)), collects until the peer closes
// or `ms` pass. Returns {status, headers (lower-case), body, closed}.
function raw(port, bytes, { ms = 5000, write } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    const chunks = [];
    let closed = false;
    const done = () => {
      clearTimeout(t);
      s.destroy();
      const text = Buffer.concat(chunks).toString("latin1");
      const head = text.slice(0, Math.max(0, text.indexOf("\r\n\r\n")));
      const m = /^HTTP\/\d\.\d (\d{3})/.exec(head);
      const headers = {};
      for (const l of head.split("\r\n").slice(1)) {
        const i = l.indexOf(":");
        if (i > 0) headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: m ? Number(m[1]) : null, headers, body: text.slice(head.length + 4), closed, text });
    };
    const t = setTimeout(done, ms);
    s.on("connect", () => (write ? write(s) : s.write(bytes)));
    s.on("data", (d) => chunks.push(d));
    s.on("error", () => {});
    s.on("close", () => { closed = true; done(); });
  });
}

const request = (method, p, { host = "127.0.0.1", headers = {}, body = null, version = "1.1" } = {}) => {
  let h = `${method} ${p} HTTP/${version}\r\n`;
  if (host !== null) h += `Host: ${host}\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  if (body !== null && !Object.keys(headers).some((k) => /content-length|transfer-encoding/i.test(k)))
    h += `Content-Length: ${Buffer.byteLength(body)}\r\n`;
  return h + "Connection: close\r\n\r\n" + (body ?? "");
};

describe("budgets: grammar compiles, JSON bodies, stores, whole answers, Host", () => {
  let srv, rss0;
  const url = (p) => srv.url + p;
  const port = () => Number(new URL(srv.url).port);
  const healthy = async () => {
    const t0 = Date.now();
    const h = await fetch(url("/health"));
    assert.equal(h.status, 200);
    return Date.now() - t0;
  };
  before(async () => {
    srv = await spawnServe(["serve", "--model", NANO, "--port", "0", "--no-webui", "--no-warmup",
      "--max-model-len", "4096", "--body-timeout", "2", "--max-inflight-body", "128e6",
      "--grammar-cache-size", "64e6"]);
    assert.equal((await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 2 })).status, 200);
    rss0 = rssMb(srv.proc.pid);
  });
  after(async () => {
    if (!srv) return;
    await healthy();
    const grown = rssMb(srv.proc.pid) - rss0;
    console.log(`# RSS ${rss0.toFixed(0)} MB -> ${(rss0 + grown).toFixed(0)} MB across the file`);
    assert.ok(grown < 150, `RSS grew ${grown.toFixed(0)} MB across the file`);
    assert.equal(await srv.stop(), 0, srv.stderr().slice(-3000));
  });

  // 1: a 60-byte schema used to grow ~2 KB per character of a bound until the OOM killer came.
  test("string bounds no output can reach: minLength refused, maxLength never binds, in every place a schema goes", { timeout: 60000 }, async () => {
    const r0 = rssMb(srv.proc.pid);
    for (const kw of ["minLength", "maxLength"]) {
      const t0 = Date.now();
      const r = await post(url("/v1/chat/completions"), schemaBody({ type: "string", [kw]: 1e9 }));
      if (kw === "minLength") {
        assert.equal(r.status, 400, r.text);
        assert.match(r.json.error.message, /minLength 1000000000 can never be met: at most \d+ characters/);
        assert.equal(r.json.error.param, "response_format");
      } else {
        assert.equal(r.status, 200, r.text);  // as if unbounded: the answer is a string cut by max_tokens
        assert.match(r.json.choices[0].message.content, /^"/);
      }
      assert.ok(Date.now() - t0 < 3000, `${kw} 1e9 took ${Date.now() - t0} ms`);
    }
    const deep = { type: "object", properties: { a: { type: "string", minLength: 1e9 } }, required: ["a"] };
    const t = await post(url("/v1/chat/completions"), toolBody(deep));
    assert.equal(t.status, 400, t.text);
    assert.match(t.json.error.message, /can never be met/);
    // tool_choice auto: a tool the grammar cannot take stays unconstrained (answered).
    assert.equal((await post(url("/v1/chat/completions"), toolBody(deep, "auto"))).status, 200);
    const a = await post(url("/v1/messages"), { model: "mimo-v2-nano", max_tokens: 64, messages: USER,
      tool_choice: { type: "any" }, tools: [{ name: "f", input_schema: deep }] });
    assert.equal(a.status, 400, a.text);
    assert.equal(a.json.type, "error");
    assert.match(a.json.error.message, /can never be met/);
    const grown = rssMb(srv.proc.pid) - r0;
    assert.ok(grown < 50, `RSS grew ${grown.toFixed(0)} MB`);
    await healthy();
  });

  // 2: 13 bytes of pattern cost 26 s and 2 GB; nested repeats grew without bound.
  test("patterns whose repetitions multiply and tools nested 60 deep: 400 naming the limit in seconds", { timeout: 60000 }, async () => {
    const r0 = rssMb(srv.proc.pid);
    for (const [pattern, says] of [["(x{100}){100}", /'pattern' is too complex/],
      ["((x{1000}){1000}){1000}", /repetitions multiply/]]) {
      const t0 = Date.now();
      const r = await post(url("/v1/chat/completions"), schemaBody({ type: "string", pattern }));
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, says);
      assert.ok(Date.now() - t0 < 5000, `${pattern} took ${Date.now() - t0} ms`);
    }
    // 512 tools whose parameters nest 60 objects deep (29 s and 1.45 GB before the 400).
    const deep = () => {
      let s = { type: "string" };
      for (let d = 0; d < 60; d++) s = { type: "object", properties: { [`a${d}`]: s, b: { type: "integer" } }, required: [`a${d}`] };
      return s;
    };
    const tools = Array.from({ length: 512 }, (_, i) => ({ type: "function", function: { name: `f${i}`, parameters: deep() } }));
    const t0 = Date.now();
    const r = await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 64, tool_choice: "required", tools });
    assert.equal(r.status, 400, r.text.slice(0, 400));
    assert.match(r.json.error.message, /too large to compile/);
    console.log(`# 512 deep tools refused in ${Date.now() - t0} ms`);
    assert.ok(Date.now() - t0 < 15000, `512 deep tools took ${Date.now() - t0} ms`);
    // Refused again: remembered, no compile.
    const t1 = Date.now();
    assert.equal((await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 64, tool_choice: "required", tools })).status, 400);
    assert.ok(Date.now() - t1 < 3000, `the second refusal took ${Date.now() - t1} ms`);
    await sleep(300);
    const grown = rssMb(srv.proc.pid) - r0;
    assert.ok(grown < 100, `RSS grew ${grown.toFixed(0)} MB`);
  });

  // Compiles run on a pool of their own: requests that need none are not held up by them.
  test("while schemas compile, other requests are answered at once", { timeout: 90000 }, async () => {
    // Distinct schemas of bounded strings (a few seconds of compile each on 2 cores).
    const slow = Array.from({ length: 3 }, (_, i) => post(url("/v1/chat/completions"),
      schemaBody({ type: "object", properties: { [`s${i}`]: { type: "string", maxLength: 400000 + i } }, required: [`s${i}`] }, { max_tokens: 4 })));
    await sleep(300);
    const times = [];
    for (let i = 0; i < 4; i++) {
      const t0 = Date.now();
      const r = await post(url("/tokenize"), { prompt: "hello" });
      assert.equal(r.status, 200, r.text);
      times.push(Date.now() - t0);
      times.push(await healthy());
    }
    const results = await Promise.all(slow);
    for (const r of results) assert.ok(r.status === 200 || r.status === 400, r.text);
    console.log(`# tokenize/health during compiles: ${times.join(", ")} ms`);
    assert.ok(Math.max(...times) < 1000, `answers during compiles took ${times.join(", ")} ms`);
  });

  // 3: JSON amplification: 60 MiB of "{}," in an ignored field became 22M nodes (1.45 GB, 10 s).
  test("60 MiB of {} in an ignored field, 2 at once: 400 naming the value limit, memory returned", { timeout: 60000 }, async () => {
    const r0 = rssMb(srv.proc.pid);
    const body = '{"messages": [{"role": "user", "content": "hi"}], "junk": [' + "{},".repeat(20 << 20) + "{}]}";
    const t0 = Date.now();
    const rs = await Promise.all([0, 1].map(() => post(url("/v1/chat/completions"), body)));
    for (const r of rs) {
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /more than 2097152 JSON values/);
    }
    await sleep(500);
    const grown = rssMb(srv.proc.pid) - r0;
    console.log(`# 2 x 60 MiB bodies: ${Date.now() - t0} ms, RSS +${grown.toFixed(0)} MB after`);
    assert.ok(grown < 100, `RSS after: +${grown.toFixed(0)} MB`);
    // A body of many values under the budget, in an unknown field: skipped, not built.
    const under = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "junk": [' + "[],".repeat(1 << 19) + "[]]}";
    assert.equal((await post(url("/v1/chat/completions"), under)).status, 200);
    await healthy();
  });

  // 7: bodies in flight are budgeted across requests (here --max-inflight-body 128e6).
  test("bodies in flight past the budget: 503 with Retry-After on the headers", { timeout: 30000 }, async () => {
    const size = 60 << 20;
    const opened = [];
    try {
      for (let i = 0; i < 2; i++) {  // two 60 MiB bodies started, not finished
        const s = net.connect(port(), "127.0.0.1");
        await new Promise((r) => s.on("connect", r));
        s.on("error", () => {});
        s.write(request("POST", "/v1/chat/completions", { headers: { "Content-Type": "application/json", "Content-Length": size } }).replace("Connection: close\r\n", "") + "{");
        opened.push(s);
      }
      await sleep(200);
      const r = await raw(port(), request("POST", "/v1/chat/completions", { headers: { "Content-Type": "application/json", "Content-Length": size } }));
      assert.equal(r.status, 503, r.text.slice(0, 300));
      assert.equal(r.headers["retry-after"], "1");
      assert.match(r.body, /too many request bodies/);
      // What is left of the budget still takes small bodies.
      assert.equal((await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 2 })).status, 200);
    } finally {
      for (const s of opened) s.destroy();
    }
    await sleep(300);
    assert.equal((await post(url("/v1/chat/completions"), { messages: USER, max_tokens: 2 })).status, 200);
  });

  // 10: a body that never arrives: the 408 is written (it used to be logged only).
  test("a body slower than --body-timeout: 408 written, connection closed", { timeout: 20000 }, async () => {
    const r = await raw(port(), null, {
      ms: 8000,
      write: (s) => s.write(request("POST", "/v1/chat/completions", { headers: { "Content-Type": "application/json", "Content-Length": 100 } }) + '{"messages"'),
    });
    assert.equal(r.status, 408, r.text);
    assert.match(r.body, /not received within 2 s/);
    assert.ok(r.closed);
  });

  // 4: what a stored response keeps is validated (the store counts real bytes: server_tests).
  test("Responses metadata and user within OpenAI's limits", { timeout: 30000 }, async () => {
    const base = { input: "hi", max_output_tokens: 4 };
    const bad = [
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, /at most 16/],
      [{ metadata: { ["k".repeat(65)]: "v" } }, /keys are at most 64/],
      [{ metadata: { k: "v".repeat(513) } }, /at most 512 characters/],
      [{ metadata: { k: 5 } }, /must be a string/],
      [{ user: "u".repeat(257) }, /'user' must be a string of at most 256/],
    ];
    for (const [extra, says] of bad) {
      const r = await post(url("/v1/responses"), { ...base, ...extra });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, says);
    }
    const ok = await post(url("/v1/responses"), { ...base, metadata: { k: "v".repeat(512) }, user: "u".repeat(256) });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.metadata.k.length, 512);
  });

  // 7: the largest whole answer: 1024 choices x 4096 tokens x 20 top logprobs (~54 GiB of JSON).
  test("a whole answer too large to build: 400 naming stream; streamed it is accepted", { timeout: 30000 }, async () => {
    const big = { prompt: Array.from({ length: 8 }, () => "a"), n: 128, max_tokens: 4000, logprobs: 20 };
    const r = await post(url("/v1/completions"), big);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, "stream");
    assert.match(r.json.error.message, /1024 choices x 4000 tokens x 21 log-probabilities/);
    const c = await post(url("/v1/chat/completions"), { messages: USER, n: 128, max_tokens: 4000, logprobs: true, top_logprobs: 20 });
    assert.equal(c.status, 400, c.text);
    // Streamed, the same request is admitted (cancelled at once here).
    const ctl = new AbortController();
    const s = await fetch(url("/v1/chat/completions"), { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: USER, n: 2, max_tokens: 4000, logprobs: true, top_logprobs: 20, stream: true }), signal: ctl.signal });
    assert.equal(s.status, 200);
    ctl.abort();
    await healthy();
  });

  // 6: DNS rebinding names that start like a loopback address; one Host, required on 1.1.
  test("Host: only exact loopback names; one Host field, present on HTTP/1.1", { timeout: 30000 }, async () => {
    const p = port();
    for (const host of ["127.attacker.example", "127.0.0.1.nip.io", "[::1].attacker.example", "127.0.0.1x",
      "localhost.attacker.example", "127.0.0.01", "0177.0.0.1", "127.0.0.256"]) {
      const r = await raw(p, request("GET", "/health", { host }));
      assert.equal(r.status, 403, `Host: ${host}: ${r.text.slice(0, 200)}`);
    }
    for (const host of ["127.0.0.1", `127.0.0.1:${p}`, "127.1.2.3", "localhost", `[::1]:${p}`, "LOCALHOST"]) {
      const r = await raw(p, request("GET", "/health", { host }));
      assert.equal(r.status, 200, `Host: ${host}: ${r.text.slice(0, 200)}`);
    }
    const two = await raw(p, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n`);
    assert.equal(two.status, 400, two.text);
    assert.match(two.body, /2 Host header fields/);
    const none = await raw(p, request("GET", "/health", { host: null }));
    assert.equal(none.status, 400, none.text);
    assert.match(none.body, /needs a Host header/);
    const v10 = await raw(p, request("GET", "/health", { host: null, version: "1.0" }));
    assert.equal(v10.status, 200, v10.text);
  });

  // 10: HTTP/1.0 with Transfer-Encoding has faulty framing: answered, then closed.
  test("HTTP/1.0 with Transfer-Encoding is closed after its answer", { timeout: 20000 }, async () => {
    const body = JSON.stringify({ prompt: "hi" });
    const r = await raw(port(), null, {
      write: (s) => s.write(`POST /tokenize HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`),
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.connection, "close", r.text);
    assert.ok(r.closed);
  });

  // 10: a client that pipelines a byte behind a non-streaming request and leaves is still noticed.
  test("a pipelined byte does not hide a client that left: its generation stops", { timeout: 40000 }, async () => {
    const body = JSON.stringify({ messages: USER, max_tokens: 2000, ignore_eos: true });
    const s = net.connect(port(), "127.0.0.1");
    await new Promise((r) => s.on("connect", r));
    s.on("error", () => {});
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}G`);
    const running = async () => metric(await metrics(srv.url), "mimo:num_requests_running");
    let started = false;
    for (const t0 = Date.now(); Date.now() - t0 < 10000 && !started; await sleep(100)) started = (await running()) >= 1;
    assert.ok(started, "the request never ran");
    s.destroy();
    let stopped = false;
    const t0 = Date.now();
    for (; Date.now() - t0 < 5000 && !stopped; await sleep(100)) stopped = (await running()) === 0;
    assert.ok(stopped, "the generation kept running after its client left");
    console.log(`# stopped ${Date.now() - t0} ms after the client left`);
  });

  test("ids are 24 random alphanumerics, never repeated", { timeout: 30000 }, async () => {
    const ids = new Set();
    for (let i = 0; i < 20; i++) {
      const r = await post(url("/v1/responses"), { input: "hi", max_output_tokens: 1, store: false });
      assert.match(r.json.id, /^resp_[A-Za-z0-9]{24}$/);
      ids.add(r.json.id);
    }
    assert.equal(ids.size, 20);
  });
});

// 5: SIGTERM past the drain timeout used to cut every response mid-chunk.
describe("budgets: the drain timeout ends every response with an error", () => {
  test("streams get an error event and their terminator, whole answers a 503, then exit 0", { timeout: 120000 }, async () => {
    // The random-weight checkpoint: its answers do not end by themselves within 3000 tokens
    // (Anthropic requests have no ignore_eos).
    const srv = await spawnServe(["serve", "--model", ensureE2eModel(), "--port", "0", "--no-webui",
      "--no-warmup", "--max-model-len", "4096", "--drain-timeout", "1"]);
    const long = { max_tokens: 3000, ignore_eos: true };
    const read = async (p, body) => {
      const r = await fetch(srv.url + p, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, text: await r.text() };  // throws if the body is cut
    };
    const chat = read("/v1/chat/completions", { messages: USER, stream: true, ...long });
    const whole = read("/v1/chat/completions", { messages: USER, ...long });
    const anth = read("/v1/messages", { model: "e2e", messages: USER, stream: true, max_tokens: 3000 });
    await sleep(1500);
    srv.signal("SIGTERM");
    const [c, w, a] = await Promise.all([chat, whole, anth]);
    assert.equal(c.status, 200);
    assert.match(c.text, /data: \{"error":\{"message":"the server is shutting down/);
    assert.ok(c.text.trimEnd().endsWith("data: [DONE]"), c.text.slice(-300));
    assert.equal(w.status, 503, w.text);
    assert.equal(JSON.parse(w.text).error.type, "service_unavailable");
    assert.match(a.text, /event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error"/);
    assert.doesNotMatch(a.text, /message_stop/);
    assert.equal(await srv.exited, 0, srv.stderr().slice(-2000));
    assert.match(srv.stderr(), /drain timeout \(1 s\) passed with 3 requests in flight/);
  });

  test("a chat template that recurses forever: a clear error naming the macro, not a crash", { timeout: 30000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-tmpl-"));
    const f = path.join(dir, "rec.jinja");
    fs.writeFileSync(f, "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}");
    const srv = await spawnServe(["serve", "--model", NANO, "--port", "0", "--no-webui", "--no-warmup", "--chat-template", f]);
    try {
      for (let i = 0; i < 3; i++) {
        const r = await post(srv.url + "/v1/chat/completions", { messages: USER, max_tokens: 2 });
        assert.equal(r.status, 400, r.text);
        assert.match(r.json.error.message, /macro 'f' called recursively: macro calls nested deeper than the limit of 256/);
      }
      assert.equal((await fetch(srv.url + "/health")).status, 200);
    } finally {
      assert.equal(await srv.stop(), 0, srv.stderr().slice(-2000));
    }
  });
});

#!/usr/bin/env node
// A soak of `mimo serve` under mixed hostile and normal traffic (issue 44): for --minutes (10)
// the attacks of tests/server/budgets.test.mjs run in a loop beside normal clients, and the
// server's RSS is sampled every 5 s. Passes when every normal request was answered 200 and the
// memory the server keeps stayed within 10% of its level in the first minute: the floor of
// every minute (the RSS between requests; the samples above it are requests in flight, each
// within its own budget) and the RSS once the traffic has stopped. The KV pool is filled first
// (its pages are touched as the prefix cache fills it, which would otherwise read as growth).
//
//   node scripts/bench/soak.mjs [--minutes 10] [--model models/mimo-v2-nano] [--json out.json]
//
// Hostile: schemas whose compile would explode (fresh each time: the refusal cache cannot help),
// 512 tools nested 60 deep, 20 MiB bodies of "{}," in an ignored field, 64 MiB bodies that never
// finish (the body budget), 300 idle connections held then dropped, trickled headers
// (slowloris), clients that leave mid-generation behind a pipelined byte, oversized whole
// answers, DNS-rebinding Host names. Normal: chat (whole and streamed), a structured-output chat
// with one fixed schema, Anthropic messages, Responses, /tokenize - each must be a 200.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const MINUTES = Number(args.minutes ?? 10);
const MODEL = path.resolve(ROOT, args.model ?? "models/mimo-v2-nano");
const MIMO = process.env.MIMO_BIN || path.join(ROOT, "build/bin/mimo");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const proc = spawn(MIMO, ["serve", "--model", MODEL, "--port", "0", "--no-webui", "--max-model-len", "4096",
  "--threads", "2", "--disable-log-requests"], { stdio: ["ignore", "ignore", "pipe"] });
let log = "";
proc.stderr.on("data", (d) => { log += d; });
let url = null;
for (const t0 = Date.now(); !url; await sleep(50)) {
  const m = /listening on (http:\/\/[\d.]+:(\d+))/.exec(log);
  if (m) url = m[1];
  if (Date.now() - t0 > 60000) throw new Error("no listen:\n" + log);
}
for (;;) {
  const r = await fetch(url + "/health").catch(() => null);
  if (r?.status === 200) break;
  await sleep(100);
}
const port = Number(new URL(url).port);
const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${proc.pid}/status`, "utf8"))[1]) / 1024;
const JSON_CT = { "Content-Type": "application/json" };
const USER = [{ role: "user", content: "Say something about bread." }];
const post = async (p, body, headers = {}) => {
  const r = await fetch(url + p, { method: "POST", headers: { ...JSON_CT, ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body), signal: AbortSignal.timeout(120000) });
  return { status: r.status, text: await r.text() };
};

// The KV pool's pages are touched as the prefix cache fills it, which takes minutes of traffic:
// fill it first with distinct long prompts, so the RSS that follows shows what the traffic keeps.
const words = "bread wheat flour yeast salt water oven crust crumb dough knead rise bake loaf".split(" ");
const warm = async (i) => {
  let text = `${i}:`;
  for (let k = 0; k < 3000; k++) text += " " + words[(k * 7 + i * 13 + (k >> 3)) % words.length] + (k % 97 === i % 97 ? i : "");
  await post("/v1/completions", { prompt: text, max_tokens: 1 });
};
const t_warm = Date.now();
for (let i = 0; i < 32; i += 4) await Promise.all([0, 1, 2, 3].map((k) => warm(i + k)));
console.error(`[soak] KV pool warmed in ${Date.now() - t_warm} ms; RSS ${Math.round(rssMb())} MB`);

const stats = { normal: {}, hostile: {}, failures: [] };
const count = (kind, name, status) => {
  const k = stats[kind][name] ??= {};
  k[status] = (k[status] ?? 0) + 1;
};
const end = Date.now() + MINUTES * 60000;  // from here (the warm-up not counted)
const running = () => Date.now() < end;

// ---- normal clients ----
const normals = {
  chat: () => post("/v1/chat/completions", { messages: USER, max_tokens: 24 }),
  stream: () => post("/v1/chat/completions", { messages: USER, max_tokens: 24, stream: true }),
  schema: () => post("/v1/chat/completions", { messages: USER, max_tokens: 48,
    response_format: { type: "json_schema", json_schema: { name: "p", schema: { type: "object",
      properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" } }, required: ["name", "age"] } } } }),
  anthropic: () => post("/v1/messages", { model: "mimo-v2-nano", max_tokens: 24, messages: USER }),
  responses: () => post("/v1/responses", { input: "Say hi.", max_output_tokens: 16, store: false }),
  tokenize: () => post("/tokenize", { prompt: "hello world" }),
};
async function normalClient(i) {
  const names = Object.keys(normals);
  for (let k = i; running(); k++) {
    const name = names[k % names.length];
    let r;
    try {
      r = await normals[name]();
    } catch (e) {
      r = { status: String(e.name), text: String(e) };
    }
    count("normal", name, r.status);
    if (r.status !== 200) stats.failures.push(`${name}: ${r.status} ${String(r.text).slice(0, 200)}`);
    await sleep(200);
  }
}

// ---- hostile clients ----
const deepTools = (() => {
  let s = { type: "string" };
  for (let d = 0; d < 60; d++) s = { type: "object", properties: { [`a${d}`]: s, b: { type: "integer" } }, required: [`a${d}`] };
  return JSON.stringify({ messages: USER, max_tokens: 8, tool_choice: "required",
    tools: Array.from({ length: 512 }, (_, i) => ({ type: "function", function: { name: `f${i}`, parameters: s } })) });
})();
const junk20 = '{"messages": [{"role": "user", "content": "hi"}], "junk": [' + "{},".repeat(7 << 20) + "{}]}";
let nonce = 0;
const schema = (s) => ({ messages: USER, max_tokens: 8, response_format: { type: "json_schema", json_schema: { name: "x", schema: s } } });
const hostiles = {
  min_length: () => post("/v1/chat/completions", schema({ type: "string", minLength: 1e9 + (nonce++) })),
  pattern: () => post("/v1/chat/completions", schema({ type: "string", pattern: `(x{${100 + (nonce++ % 900)}}){100}` })),
  nested_repeat: () => post("/v1/chat/completions", schema({ type: "string", pattern: `((y{1000}){1000}){${1000 + (nonce++ % 1000)}}` })),
  deep_tools: () => post("/v1/chat/completions", deepTools.replace('"f0"', `"g${nonce++}"`)),
  json_amplification: () => post("/v1/chat/completions", junk20),
  whole_answer: () => post("/v1/completions", { prompt: Array(8).fill("a"), n: 128, max_tokens: 4000, logprobs: 20 }),
  host: () => new Promise((resolve) => {  // fetch cannot set Host: a raw request
    const body = JSON.stringify({ messages: USER, max_tokens: 2 });
    const s = net.connect(port, "127.0.0.1", () => s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1.nip.io\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`));
    let got = "";
    s.on("data", (d) => { got += d; });
    s.on("close", () => resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(got)?.[1] ?? 0) }));
    s.on("error", () => {});
  }),
  left_behind_pipelined: () => new Promise((resolve) => {
    const body = JSON.stringify({ messages: USER, max_tokens: 500, ignore_eos: true });
    const s = net.connect(port, "127.0.0.1", () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}G`);
      setTimeout(() => { s.destroy(); resolve({ status: "left" }); }, 1500);
    });
    s.on("error", () => resolve({ status: "error" }));
  }),
  unfinished_bodies: () => new Promise((resolve) => {
    const socks = [];
    for (let i = 0; i < 4; i++) {
      const s = net.connect(port, "127.0.0.1", () => {
        s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${64 << 20}\r\n\r\n{`);
      });
      s.on("error", () => {});
      socks.push(s);
    }
    setTimeout(() => { for (const s of socks) s.destroy(); resolve({ status: "dropped" }); }, 3000);
  }),
  idle_flood: () => new Promise((resolve) => {
    const socks = [];
    for (let i = 0; i < 300; i++) {
      const s = net.connect(port, "127.0.0.1");
      s.on("error", () => {});
      socks.push(s);
    }
    setTimeout(() => { for (const s of socks) s.destroy(); resolve({ status: "dropped" }); }, 4000);
  }),
  slowloris: () => new Promise((resolve) => {
    const socks = [];
    for (let i = 0; i < 100; i++) {
      const s = net.connect(port, "127.0.0.1", () => s.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: "));
      s.on("error", () => {});
      socks.push(s);
    }
    setTimeout(() => { for (const s of socks) s.destroy(); resolve({ status: "dropped" }); }, 5000);
  }),
};
async function hostileClient(i) {
  const names = Object.keys(hostiles);
  for (let k = i * 3; running(); k++) {
    const name = names[k % names.length];
    let r;
    try {
      r = await hostiles[name]();
    } catch (e) {
      r = { status: String(e.name) };
    }
    count("hostile", name, r.status);
    await sleep(300);
  }
}

// ---- RSS ----
const samples = [];
async function sampler() {
  const t0 = Date.now();
  while (running()) {
    samples.push({ s: Math.round((Date.now() - t0) / 1000), rss_mb: Math.round(rssMb()) });
    await sleep(5000);
  }
  samples.push({ s: Math.round((Date.now() - t0) / 1000), rss_mb: Math.round(rssMb()) });
}

await Promise.all([sampler(), ...[0, 1, 2].map(normalClient), ...[0, 1].map(hostileClient)]);
await sleep(3000);
const quiet = Math.round(rssMb());  // every request answered, nothing in flight
const health = (await fetch(url + "/health")).status;
const floors = [];  // the lowest RSS of each minute
for (let m = 0; m * 60 < samples[samples.length - 1].s; m++) {
  const inMinute = samples.filter((x) => x.s >= m * 60 && x.s < (m + 1) * 60).map((x) => x.rss_mb);
  if (inMinute.length) floors.push(Math.min(...inMinute));
}
const base = floors[0];
const peak = Math.max(...samples.map((x) => x.rss_mb));
proc.kill("SIGTERM");
const code = await new Promise((r) => proc.on("exit", (c) => r(c)));
const normalTotal = Object.values(stats.normal).reduce((a, k) => a + Object.values(k).reduce((x, y) => x + y, 0), 0);
const summary = {
  minutes: MINUTES, model: path.basename(MODEL), host_cpus: (await import("node:os")).cpus().length,
  rss_mb: { after_warmup: samples[0].rss_mb, first_minute_floor: base, minute_floors: floors,
    peak_in_flight: peak, after_traffic: quiet },
  rss_flat_within_10pct: Math.max(...floors) <= base * 1.1 && quiet <= base * 1.1,
  normal_requests: normalTotal, normal_failures: stats.failures.length,
  health_after: health, exit_code: code, normal: stats.normal, hostile: stats.hostile,
  failures: stats.failures.slice(0, 20), samples,
};
if (args.json) fs.writeFileSync(args.json, JSON.stringify(summary, null, 1));
console.log(JSON.stringify({ ...summary, samples: undefined }, null, 1));
const ok = summary.rss_flat_within_10pct && summary.normal_failures === 0 && health === 200 && code === 0;
console.log(ok ? "soak: PASS" : "soak: FAIL");
process.exit(ok ? 0 : 1);

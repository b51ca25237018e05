// Shared by the end-to-end server tests (tests/server/*.test.mjs): starts `mimo serve` on a free
// port, on the default model (models/mimo-v2-nano) or on the generated random-weight checkpoint
// (scripts/make_tiny_model.py --variant e2e, with the nano model's tokenizer and chat template
// copied beside it), and gives the official clients (`openai`, `@anthropic-ai/sdk`, from
// third_party/node_modules) pointed at it.
//
// Environment:
//   MIMO_BIN              the CLI under test (default build/bin/mimo)
//   MIMO_SERVE_LAUNCHER   a prefix for the server command line, split on spaces (default empty),
//                         e.g. "mpirun -np 2 --oversubscribe --allow-run-as-root"
//   MIMO_SERVE_ARGS       extra serve flags, split on spaces (e.g. "--tensor-parallel-size 2")
//   MIMO_SERVE_THREADS    --threads of each server (default 2)
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const MIMO = process.env.MIMO_BIN || path.join(ROOT, "build/bin/mimo");
export const NANO = path.join(ROOT, "models/mimo-v2-nano");
export const E2E = path.join(ROOT, "tests/data/generated/e2e");
const LAUNCHER = (process.env.MIMO_SERVE_LAUNCHER || "").split(/\s+/).filter(Boolean);
const THREADS = process.env.MIMO_SERVE_THREADS || "2";

const require = createRequire(path.join(ROOT, "third_party/package.json"));
export const OpenAI = require("openai");
export const Anthropic = require("@anthropic-ai/sdk");

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The random-weight checkpoint of the e2e variant, generated once (the files are kept in
// tests/data/generated/, which git ignores), with the nano model's tokenizer and chat template.
export function ensureE2eModel() {
  if (!fs.existsSync(path.join(E2E, "model.safetensors"))) {
    execFileSync("/usr/bin/python3", [path.join(ROOT, "scripts/make_tiny_model.py"), "--out", E2E,
      "--variant", "e2e"], { stdio: "inherit" });
  }
  for (const f of ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]) {
    const dst = path.join(E2E, f);
    if (!fs.existsSync(dst)) fs.copyFileSync(path.join(NANO, f), dst);
  }
  return E2E;
}

// Spawns `mimo <args>` (a `serve` command line with --port 0) under MIMO_SERVE_LAUNCHER, with
// MIMO_SERVE_ARGS appended (e.g. "--tensor-parallel-size 2"); resolves once it listens and, with
// waitReady, once /health answers 200. Returns {url, proc, exited, stderr(), stop()}. Also used by
// the browser tests (tests/webui/harness.mjs).
export async function spawnServe(args, { waitReady = true, timeoutMs = 120000 } = {}) {
  if (!fs.existsSync(MIMO)) throw new Error(`${MIMO} is missing: build it first (scripts/build.sh)`);
  const extra = (process.env.MIMO_SERVE_ARGS || "").split(/\s+/).filter(Boolean);
  const argv = [...LAUNCHER, MIMO, ...args, ...extra];
  const proc = spawn(argv[0], argv.slice(1), { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.setEncoding("utf8");
  proc.stderr.on("data", (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on("exit", (code, sig) => resolve(code ?? sig)));
  const deadline = Date.now() + timeoutMs;
  let url = null, pid = null;
  while (!url) {
    const m = /listening on (http:\/\/[\d.]+:\d+) \(pid (\d+)/.exec(log);
    if (m) [url, pid] = [m[1], Number(m[2])];
    else if (proc.exitCode !== null) throw new Error(`mimo serve exited ${proc.exitCode}:\n${log}`);
    else if (Date.now() > deadline) throw new Error(`mimo serve did not listen:\n${log}`);
    else await sleep(20);
  }
  while (waitReady) {
    const r = await fetch(url + "/health").catch(() => null);
    if (r && r.status === 200) break;
    if (proc.exitCode !== null) throw new Error(`mimo serve exited ${proc.exitCode}:\n${log}`);
    if (Date.now() > deadline) throw new Error(`mimo serve did not get ready:\n${log}`);
    await sleep(50);
  }
  // A signal for the server goes to the mimo process itself (rank 0 under a launcher: mpirun
  // would forward it to every rank and report the signal as its own failure).
  const signal = (sig) => {
    if (!LAUNCHER.length) return proc.kill(sig);
    try { process.kill(pid, sig); } catch { /* already gone */ }
    return true;
  };
  return {
    url,
    proc,
    exited,
    signal,
    stderr: () => log,
    async stop() {
      if (proc.exitCode === null) signal("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 15000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

// Starts `mimo serve` on `model` on a free port (see spawnServe). waitReady: resolve once /health
// answers 200 (else once it listens). Returns spawnServe's object plus openai(opts), anthropic(opts).
export async function startServer(model, extraArgs = [], { waitReady = true, timeoutMs = 120000, warmup = false } = {}) {
  const args = ["serve", "--model", model, "--port", "0", "--threads", THREADS, "--no-webui",
    ...(warmup ? [] : ["--no-warmup"]), ...extraArgs];
  const s = await spawnServe(args, { waitReady, timeoutMs });
  return {
    ...s,
    openai: (opts = {}) => new OpenAI({ baseURL: s.url + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000, ...opts }),
    anthropic: (opts = {}) => new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, timeout: 120000, ...opts }),
  };
}

// POST with a raw body (for malformed requests the clients would refuse to send).
export async function post(url, body, headers = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON: the tests assert on json */ }
  return { status: res.status, json, text, headers: res.headers };
}

// GET /metrics parsed into {name{labels}: value}.
export async function metrics(url) {
  const text = await (await fetch(url + "/metrics")).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// The value of a metric by name (labels ignored but the model_name one), summed.
export function metric(m, name) {
  let sum = 0, found = false;
  for (const [k, v] of Object.entries(m)) {
    if (k === name || k.startsWith(name + "{")) { sum += v; found = true; }
  }
  return found ? sum : undefined;
}

// The properties every OpenAI error answer has: {error: {message, type, param, code}}, code a
// string (model_not_found, context_length_exceeded, invalid_api_key, ...), never the status.
export function assertOpenAiError(assert, r, status, { param, match } = {}) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && typeof r.json.error === "object", `not an OpenAI error object: ${r.text}`);
  assert.equal(typeof r.json.error.message, "string");
  assert.ok(r.json.error.message.length > 0);
  assert.equal(typeof r.json.error.type, "string");
  assert.equal(typeof r.json.error.code, "string", r.text);
  if (param instanceof RegExp) assert.match(String(r.json.error.param), param, r.text);
  else if (param !== undefined) assert.equal(r.json.error.param, param, r.text);
  if (match) assert.match(r.json.error.message, match);
}

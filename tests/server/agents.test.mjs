// Coding agents against `mimo serve`.
//
// Fast, always: the exact requests that Claude Code 2.1.332, the Codex CLI 0.171.0 and opencode
// 1.18.33 send (recorded from their npm releases against a capture server; tests/data/agents/,
// README there), replayed on random weights with the agent's own headers and query strings, each
// answered in its protocol with the events the agent reads. So the suite still checks the
// protocol when an agent release changes what it sends. Only the output budget is lowered.
//
// Real: `claude -p` and `codex exec` (third_party/node_modules) against the default model, with
// no proxy in between: exit 0.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { NANO, ROOT, ensureE2eModel, startServer } from "./harness.mjs";

const FIXTURES = path.join(ROOT, "tests/data/agents");
const BIN = path.join(ROOT, "third_party/node_modules/.bin");

// The SSE stream of a response: [{event, data}] with data parsed (or "[DONE]").
async function readSse(res) {
  const text = await res.text();
  const out = [];
  for (const block of text.split("\n\n")) {
    if (!block.trim() || block.startsWith(":")) continue;
    const lines = block.split("\n");
    const event = lines.find((l) => l.startsWith("event: "))?.slice(7) ?? null;
    const data = lines.find((l) => l.startsWith("data: "))?.slice(6);
    assert.ok(data !== undefined, `an SSE block without data: ${block}`);
    out.push({ event, data: data === "[DONE]" ? data : JSON.parse(data) });
  }
  return out;
}

// Replays a recorded request with its headers; returns the SSE events.
async function replay(url, name, edit) {
  const rec = JSON.parse(fs.readFileSync(path.join(FIXTURES, name), "utf8"));
  const headers = {};
  for (const [k, v] of Object.entries(rec.headers)) {
    if (!["host", "content-length", "connection", "accept-encoding"].includes(k)) headers[k] = v;
  }
  const body = structuredClone(rec.body);
  delete body.model;  // the agents were configured with another model name
  edit(body);
  const res = await fetch(url + rec.path, { method: rec.method, headers, body: JSON.stringify(body) });
  assert.equal(res.status, 200, `${name}: ${res.status} ${res.status === 200 ? "" : await res.text()}`);
  assert.match(res.headers.get("content-type"), /text\/event-stream/);
  return readSse(res);
}

// Claude Code reads typed events with `event:` lines: message_start, balanced content blocks,
// message_delta with a stop_reason; else it falls back to a second, non-streamed request.
function checkAnthropicStream(events) {
  for (const e of events) assert.equal(e.event, e.data.type);
  const types = events.map((e) => e.data.type).filter((t) => t !== "ping");
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  let open = -1;
  for (const { data: d } of events) {
    if (d.type === "content_block_start") { assert.equal(open, -1); open = d.index; }
    if (d.type === "content_block_delta") assert.equal(d.index, open);
    if (d.type === "content_block_stop") { assert.equal(d.index, open); open = -1; }
  }
  assert.equal(open, -1);
  const delta = events.find((e) => e.data.type === "message_delta").data;
  assert.ok(["end_turn", "max_tokens", "tool_use", "stop_sequence"].includes(delta.delta.stop_reason));
  return events[0].data.message.usage.input_tokens;
}

// Codex takes items from output_item.done and needs a final response event.
function checkResponsesStream(events) {
  events.forEach((e, i) => { assert.equal(e.data.sequence_number, i); assert.equal(e.event, e.data.type); });
  assert.equal(events[0].data.type, "response.created");
  const last = events.at(-1).data;
  assert.ok(["response.completed", "response.incomplete"].includes(last.type), last.type);
  const added = events.filter((e) => e.data.type === "response.output_item.added").map((e) => e.data.item.id);
  const done = events.filter((e) => e.data.type === "response.output_item.done").map((e) => e.data.item.id);
  assert.deepEqual(done, added);
  assert.deepEqual(last.response.output.map((o) => o.id), done);
  return last.response;
}

describe("agents: recorded requests replayed", () => {
  let server;
  before(async () => {
    server = await startServer(ensureE2eModel(), ["--max-model-len", "16384", "--max-num-batched-tokens", "4096"]);
  });
  after(async () => { assert.equal(await server?.stop(), 0, server?.stderr()); });

  test("Claude Code: system message inside messages, adaptive thinking omitted, 12 tools, 32k max_tokens", async () => {
    const first = checkAnthropicStream(await replay(server.url, "claude-code-01-first.json", (b) => { b.max_tokens = 8; }));
    assert.ok(first > 9000, `${first} prompt tokens`);
    // max_tokens 32000 as sent is fitted into the context (no 400, which would make the agent
    // retry six times and exit 1).
    checkAnthropicStream(await replay(server.url, "claude-code-01-first.json", (b) => { b.thinking = { type: "disabled" }; b.max_tokens = 32000; b.stop_sequences = ["\n"]; }));
    // The tool round trip: tool_use / tool_result and another server's thinking block (its
    // signature does not verify here: left out, not refused).
    checkAnthropicStream(await replay(server.url, "claude-code-02-tool-result-with-thinking.json", (b) => { b.max_tokens = 8; }));
  });

  test("Codex: developer messages, namespace and web_search tools, encrypted reasoning from elsewhere", async () => {
    const r1 = checkResponsesStream(await replay(server.url, "codex-01-first.json", (b) => { b.max_output_tokens = 8; }));
    assert.ok(r1.usage.input_tokens > 7000, JSON.stringify(r1.usage));
    const r2 = checkResponsesStream(await replay(server.url, "codex-02-tool-output-with-reasoning.json", (b) => { b.max_output_tokens = 8; }));
    assert.ok(r2.usage.input_tokens > r1.usage.input_tokens);
    // With a model slug Codex knows it adds a custom (free-form grammar) apply_patch tool, a
    // client-side tool_search and web_search: still served.
    checkResponsesStream(await replay(server.url, "codex-03-gpt-5.5-custom-tool.json", (b) => { b.max_output_tokens = 8; }));
  });

  test("opencode: chat completions with stream_options, and its Responses variant (items without type)", async () => {
    for (const name of ["opencode-01-title.json", "opencode-02-tool-result.json"]) {
      const events = await replay(server.url, name, (b) => { b.max_tokens = 8; });
      assert.equal(events.at(-1).data, "[DONE]");
      const chunks = events.slice(0, -1).map((e) => e.data);
      assert.ok(chunks.some((c) => c.choices?.[0]?.finish_reason), name);
      assert.ok(chunks.at(-1).usage.prompt_tokens > 100, name);  // stream_options.include_usage
    }
    checkResponsesStream(await replay(server.url, "opencode-03-responses-tool-result.json", (b) => { b.max_output_tokens = 8; }));
  });
});

// Runs an agent binary in a clean environment (no network but the server; a fresh HOME), without
// blocking this process (the server's log is read from it meanwhile). Resolves {status, stdout,
// stderr}; killed after 5 minutes.
function runAgent(bin, args, env, cwd) {
  return new Promise((resolve) => {
    const p = spawn(path.join(BIN, bin), args, {
      cwd, env: { PATH: `${BIN}:/usr/local/bin:/usr/bin:/bin`, HOME: cwd, TERM: "dumb", LANG: "C.UTF-8", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill("SIGKILL"), 300000);
    p.on("close", (status) => { clearTimeout(timer); resolve({ status, stdout, stderr }); });
  });
}

// The end of the server's log (its request lines say what the agent sent and got).
function tail(log) { return log.split("\n").slice(-30).join("\n"); }

function need(t, bin) {
  if (fs.existsSync(path.join(BIN, bin))) return true;
  if (process.env.CI) assert.fail(`${bin} is missing from third_party/node_modules: run scripts/setup-tests.sh`);
  t.skip(`${bin} is not installed (scripts/setup-tests.sh installs it)`);
  return false;
}

describe("agents: the real Claude Code and Codex CLIs on the default model", () => {
  let server, work;
  before(async () => {
    // The agents' prompts are 9-12k tokens: a context larger than the toy model was trained for
    // (the warning is expected); what is tested is the protocol, not the toy's answer.
    server = await startServer(NANO, ["--max-model-len", "32768", "--max-num-batched-tokens", "4096"]);
    work = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-agents-"));
  });
  after(async () => {
    assert.equal(await server?.stop(), 0, server?.stderr());
    fs.rmSync(work, { recursive: true, force: true });
  });

  test("claude -p exits 0", async (t) => {
    if (!need(t, "claude")) return;
    const dir = fs.mkdtempSync(path.join(work, "claude-"));
    // CLAUDE_CODE_MAX_OUTPUT_TOKENS as users of a 32k-context server set it: left at its 32000,
    // the ~12k-token prompt plus the output reserve exceed the 32k window, and the first time the
    // sampled toy answer is a tool call Claude Code compacts instead of sending the tool result
    // ("Prompt is too long · automatic compaction failed"; reproduced with a canned tool_use).
    const r = await runAgent("claude", ["-p", "What is 27 + 15?"], {
      ANTHROPIC_BASE_URL: server.url, ANTHROPIC_API_KEY: "sk-local", ANTHROPIC_MODEL: "mimo-v2-nano",
      ANTHROPIC_SMALL_FAST_MODEL: "mimo-v2-nano", ANTHROPIC_DEFAULT_HAIKU_MODEL: "mimo-v2-nano",
      CLAUDE_CODE_MAX_CONTEXT_TOKENS: "32768", CLAUDE_CODE_MAX_OUTPUT_TOKENS: "8192", DISABLE_TELEMETRY: "1", DISABLE_ERROR_REPORTING: "1",
      DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    }, dir);
    assert.equal(r.status, 0, `claude exited ${r.status}: ${r.stderr}\n${r.stdout}\nserver: ${tail(server.stderr())}`);
    assert.ok(r.stdout.trim().length > 0);
    assert.match(server.stderr(), /POST \/v1\/messages 200 prompt_tokens=\d{4,}/);
  });

  test("codex exec exits 0", async (t) => {
    if (!need(t, "codex")) return;
    const dir = fs.mkdtempSync(path.join(work, "codex-"));
    const home = path.join(dir, "codex-home");
    fs.mkdirSync(home);
    fs.writeFileSync(path.join(home, "config.toml"), [
      'model = "mimo-v2-nano"', 'model_provider = "mimo"', 'approval_policy = "never"', 'sandbox_mode = "read-only"',
      'web_search = "disabled"', "check_for_update_on_startup = false", "[analytics]", "enabled = false",
      "[feedback]", "enabled = false", "[model_providers.mimo]", 'name = "mimo"', `base_url = "${server.url}/v1"`,
      'env_key = "MIMO_API_KEY"', 'wire_api = "responses"', ""].join("\n"));
    const r = await runAgent("codex", ["exec", "--skip-git-repo-check", "What is 27 + 15?"],
      { CODEX_HOME: home, MIMO_API_KEY: "sk-local" }, dir);
    assert.equal(r.status, 0, `codex exited ${r.status}: ${r.stderr}\n${r.stdout}\nserver: ${tail(server.stderr())}`);
    assert.ok(r.stdout.trim().length > 0);
    assert.match(server.stderr(), /POST \/v1\/responses 200 prompt_tokens=\d{4,}/);
  });
});

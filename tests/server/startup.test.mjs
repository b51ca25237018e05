// `mimo serve` start-up that must fail, and fail fast: every kind of broken model directory
// exits non-zero with an error naming the problem, within seconds and never hanging (a stop of
// the HTTP listener that raced its start once left the process up for 14 minutes); bad --port
// values are usage errors (exit 2), not a random port; `serve --help` prints the usage and exits
// 0; a SIGTERM while the model loads exits at once.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";

import { MIMO, NANO, sleep } from "./harness.mjs";

// Runs `mimo serve ARGS` and resolves {code, stdout, stderr, ms}; kills it after `limitMs` (the
// test then fails on the code, null, and the time).
function run(args, limitMs = 10000, onStart = null) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const p = spawn(MIMO, ["serve", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    const kill = setTimeout(() => p.kill("SIGKILL"), limitMs);
    if (onStart) onStart(p, () => stderr);
    p.on("exit", (code, sig) => {
      clearTimeout(kill);
      resolve({ code: code ?? sig, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-startup-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// A copy of the default model with one change.
function broken(name, edit) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  for (const f of fs.readdirSync(NANO)) {
    const src = path.join(NANO, f);
    if (fs.statSync(src).isDirectory()) continue;  // dflash/: the drafter, which serve reads only when asked
    if (f === "model.safetensors") fs.symlinkSync(src, path.join(dir, f));
    else fs.copyFileSync(src, path.join(dir, f));
  }
  edit(dir);
  return dir;
}

describe("serve start-up errors", () => {
  const weights = path.join(NANO, "model.safetensors");
  const cases = [
    ["a directory that does not exist", () => path.join(tmp, "nope"), /nope|not found|No such|cannot/i],
    ["an empty directory", () => { const d = path.join(tmp, "empty"); fs.mkdirSync(d); return d; }, /config\.json|tokenizer/i],
    ["no tokenizer_config.json", () => broken("no-tokcfg", (d) => fs.rmSync(path.join(d, "tokenizer_config.json"))), /tokenizer_config|chat template|template/i],
    ["no tokenizer.json", () => broken("no-tok", (d) => fs.rmSync(path.join(d, "tokenizer.json"))), /tokenizer\.json/i],
    ["no config.json", () => broken("no-config", (d) => fs.rmSync(path.join(d, "config.json"))), /config\.json/i],
    ["config.json not JSON", () => broken("bad-config", (d) => fs.writeFileSync(path.join(d, "config.json"), "{ not json")), /config\.json/i],
    ["no weights", () => broken("no-weights", (d) => fs.rmSync(path.join(d, "model.safetensors"))), /safetensors|weights|tensor/i],
    ["truncated weights", () => broken("trunc", (d) => {
      fs.rmSync(path.join(d, "model.safetensors"));
      const fd = fs.openSync(weights, "r");
      const buf = Buffer.alloc(1 << 16);
      fs.readSync(fd, buf, 0, buf.length, 0);
      fs.closeSync(fd);
      fs.writeFileSync(path.join(d, "model.safetensors"), buf);
    }), /safetensors|truncat|size|bytes|offset/i],
  ];
  for (const [what, make, mention] of cases) {
    test(`${what}: exits non-zero within 10 s, naming the problem`, { timeout: 20000 }, async () => {
      const r = await run(["--model", make(), "--port", "0", "--no-warmup", "--threads", "2"]);
      assert.notEqual(r.code, 0, r.stderr);
      assert.notEqual(r.code, "SIGKILL", `still running after 10 s:\n${r.stderr}`);
      assert.match(r.stderr, /error/i, r.stderr);
      assert.match(r.stderr, mention, r.stderr);
    });
  }

  test("an empty directory, 10 times: never hangs (the listener's stop raced its start)", { timeout: 60000 }, async () => {
    const d = path.join(tmp, "empty10");
    fs.mkdirSync(d);
    for (let i = 0; i < 10; i++) {
      const r = await run(["--model", d, "--port", "0"], 5000);
      assert.ok(typeof r.code === "number" && r.code !== 0, `run ${i}: ${r.code} after ${r.ms} ms\n${r.stderr}`);
    }
  });

  test("--port 99999, --port abc, --port -1: usage errors (exit 2), never another port", { timeout: 20000 }, async () => {
    for (const port of ["99999", "abc", "-1", "80x"]) {
      const r = await run(["--model", NANO, "--port", port]);
      assert.equal(r.code, 2, `--port ${port}: ${r.stderr}`);
      assert.match(r.stderr, /port/, r.stderr);
      assert.doesNotMatch(r.stderr, /listening/, r.stderr);
    }
  });

  test("--override-generation-config: a bad value is a usage error naming the key", { timeout: 20000 }, async () => {
    const cases = [["{\"temp\": 0}", /unknown key 'temp'/], ["hot", /not a JSON object/],
      ["{\"temperature\": \"hot\"}", /temperature must be a number/],
      ["{\"top_p\": 0}", /top_p must be in \(0, 1\], got 0/], ["{\"temperature\": -1}", /temperature must be a number >= 0/]];
    for (const [value, message] of cases) {
      const r = await run(["--model", NANO, "--port", "0", "--override-generation-config", value]);
      assert.equal(r.code, 2, `${value}: ${r.stderr}`);
      assert.match(r.stderr, /--override-generation-config/, r.stderr);
      assert.match(r.stderr, message, r.stderr);
      assert.doesNotMatch(r.stderr, /listening/, r.stderr);
    }
    // A value out of range in generation_config.json is found once the model has loaded: exit 1.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mimo-gencfg-"));
    for (const f of fs.readdirSync(NANO)) fs.symlinkSync(path.join(NANO, f), path.join(dir, f));
    fs.rmSync(path.join(dir, "generation_config.json"));
    fs.writeFileSync(path.join(dir, "generation_config.json"), JSON.stringify({ top_p: 1.5 }));
    const r = await run(["--model", dir, "--port", "0"]);
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /error: the default sampling \(generation_config.json\): top_p must be in \(0, 1\], got 1.5/, r.stderr);
  });

  test("serve --help: the usage on stdout, exit 0", { timeout: 10000 }, async () => {
    const r = await run(["--help"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /usage: mimo serve --model DIR/);
    assert.match(r.stdout, /--max-connections/);
  });

  test("SIGTERM while the model loads: exits 0 within 5 s (nothing to drain)", { timeout: 30000 }, async () => {
    let signalled = 0;
    const r = await run(["--model", NANO, "--port", "0", "--threads", "2"], 20000, async (p, err) => {
      while (!/listening on/.test(err())) await sleep(5);
      signalled = Date.now();
      p.kill("SIGTERM");
    });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(Date.now() - signalled < 5000, r.stderr);
  });
});

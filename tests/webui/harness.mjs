// Shared by the browser tests (webui.test.mjs) and the README screenshot (screenshot.mjs): starts
// `mimo serve` on a free port, launches Debian's headless Chromium through puppeteer-core
// (third_party/node_modules), and a few page helpers.
//
// A missing browser or puppeteer-core skips the browser tests on a developer machine; under
// CI=true (and MIMO_REQUIRE_BROWSER=1) it is a failure: CI must never pass by skipping them.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { spawnServe } from "../server/harness.mjs";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const MIMO = process.env.MIMO_BIN || path.join(ROOT, "build/bin/mimo");
export const NANO = path.join(ROOT, "models/mimo-v2-nano");
const CHROMIUM_CANDIDATES = [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"];

export const browserRequired =
  (process.env.CI && process.env.CI !== "false" && process.env.CI !== "0") ||
  process.env.MIMO_REQUIRE_BROWSER === "1";

// {puppeteer, executablePath} or {missing: reason}.
export function findBrowser() {
  let puppeteer;
  try {
    const require = createRequire(path.join(ROOT, "third_party/package.json"));
    puppeteer = require("puppeteer-core");
  } catch (e) {
    return { missing: "puppeteer-core is not installed (run scripts/setup-tests.sh): " + e.message };
  }
  const executablePath = CHROMIUM_CANDIDATES.find((p) => p && fs.existsSync(p));
  if (!executablePath) {
    return { missing: "no Chromium found (apt-get install chromium, or set CHROMIUM=path)" };
  }
  return { puppeteer, executablePath };
}

export async function launchBrowser({ puppeteer, executablePath }) {
  return puppeteer.launch({
    executablePath,
    headless: true,
    // --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    defaultViewport: { width: 1100, height: 900 },
  });
}

// Starts `mimo serve` (chat page on) on a free port; resolves once /health answers 200.
// Returns {url, proc, stderr(), stop()}. MIMO_SERVE_LAUNCHER / MIMO_SERVE_ARGS run it e.g. under
// "mpirun -np 2 --oversubscribe" with "--tensor-parallel-size 2" (tests/server/harness.mjs).
export async function startServer(extraArgs = [], { model = NANO, timeoutMs = 60000 } = {}) {
  return spawnServe(["serve", "--model", model, "--port", "0", "--threads", "2", "--no-warmup",
                     ...extraArgs], { timeoutMs });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A page in its own browser context (fresh localStorage), recording what the tests check:
// console errors, uncaught exceptions, failed requests, every request URL, and the bodies of
// the chat requests the page sent.
export async function openPage(browser, url, { viewport } = {}) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  if (viewport) await page.setViewport(viewport);
  const rec = { consoleErrors: [], pageErrors: [], failed: [], requests: [], chatBodies: [], chatHeaders: [] };
  page.on("console", (m) => {
    if (m.type() === "error") rec.consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => rec.pageErrors.push(String(e)));
  page.on("requestfailed", (r) => rec.failed.push(`${r.url()} ${r.failure() && r.failure().errorText}`));
  page.on("request", (r) => {
    rec.requests.push(r.url());
    if (r.url().endsWith("/v1/chat/completions") && r.method() === "POST") {
      rec.chatBodies.push(JSON.parse(r.postData()));
      rec.chatHeaders.push(r.headers());
    }
  });
  await page.goto(url, { waitUntil: "load" });
  return { page, rec, close: () => context.close() };
}

// Types into the composer and presses Enter (the page's send key).
export async function ask(page, text) {
  await page.focus("#input");
  await page.keyboard.type(text);
  await page.keyboard.press("Enter");
}

// Waits until the last answer stops streaming; returns what it shows.
export async function lastAnswer(page, timeoutMs = 30000) {
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll(".msg.assistant")].pop();
    return a && !a.classList.contains("streaming") && !document.body.classList.contains("busy");
  }, { timeout: timeoutMs });
  return page.evaluate(() => {
    const a = [...document.querySelectorAll(".msg.assistant")].pop();
    const r = a.querySelector(".reasoning");
    return {
      content: a.querySelector(".content").innerText.trim(),
      reasoning: r.hidden ? null : a.querySelector(".reasoning-text").textContent,
      reasoningOpen: r.open,
      stats: a.querySelector(".stats").textContent,
      tools: [...a.querySelectorAll(".tool-card")].map((c) => ({
        name: c.querySelector(".tool-name").textContent,
        args: c.querySelector(".tool-args").textContent,
      })),
      errors: [...a.querySelectorAll(".error")].map((e) => e.textContent),
    };
  });
}

// Records, on every change of the last answer, its content text and reasoning state: the
// evidence that an answer was streamed (many growing prefixes) rather than set once.
// Also makes every response body reach the page one server-sent event per read, 20 ms apart,
// as a slow network delivers them: the nano model writes its whole answer within a few
// milliseconds, which the server and a local socket may hand over in one read, so without this
// whether the page renders an answer as it arrives would be observable only in some runs.
export async function recordStreaming(page) {
  await page.evaluate(() => {
    const read = ReadableStreamDefaultReader.prototype.read;
    ReadableStreamDefaultReader.prototype.read = async function () {
      this.__events = this.__events || [];
      if (this.__events.length === 0) {
        const r = await read.call(this);
        if (r.done || !(r.value instanceof Uint8Array)) return r;
        let start = 0;  // split after each blank line ("\n\n") ending an event
        for (let i = 1; i < r.value.length; ++i) {
          if (r.value[i] === 10 && r.value[i - 1] === 10) {
            this.__events.push(r.value.subarray(start, i + 1));
            start = i + 1;
          }
        }
        if (start < r.value.length) this.__events.push(r.value.subarray(start));
        if (this.__events.length === 0) return r;  // an empty chunk
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
      return { value: this.__events.shift(), done: false };
    };
  });
  await page.evaluate(() => {
    window.__snapshots = [];
    const obs = new MutationObserver(() => {
      const a = [...document.querySelectorAll(".msg.assistant")].pop();
      if (!a) return;
      const r = a.querySelector(".reasoning");
      const snap = {
        content: a.querySelector(".content").textContent,
        reasoning: a.querySelector(".reasoning-text").textContent,
        reasoningVisible: !r.hidden,
        reasoningOpen: r.open,
        streaming: a.classList.contains("streaming"),
      };
      const prev = window.__snapshots[window.__snapshots.length - 1];
      if (!prev || JSON.stringify(prev) !== JSON.stringify(snap)) window.__snapshots.push(snap);
    });
    obs.observe(document.getElementById("messages"),
                { subtree: true, childList: true, characterData: true, attributes: true });
  });
  return () => page.evaluate(() => window.__snapshots);
}

// Changes a setting the way a user does: opens the settings panel, clicks a checkbox or
// replaces a field's text by typing.
export async function setSetting(page, id, value) {
  if (await page.$eval("#settings", (s) => s.hidden)) await page.click("#settings-toggle");
  const sel = "#" + id;
  if (await page.$eval(sel, (e) => e.type === "checkbox")) {
    if ((await page.$eval(sel, (e) => e.checked)) !== value) await page.click(sel);
  } else {
    await page.focus(sel);
    await page.keyboard.down("Control");
    await page.keyboard.press("KeyA");
    await page.keyboard.up("Control");
    await page.keyboard.press("Backspace");
    if (String(value) !== "") await page.type(sel, String(value));
    await page.$eval(sel, (e) => e.dispatchEvent(new Event("change")));
  }
}

// mimo:num_requests_running from /metrics.
export async function runningRequests(url) {
  const text = await (await fetch(url + "/metrics")).text();
  const m = /^mimo:num_requests_running(?:\{[^}]*\})? ([0-9.e+-]+)$/m.exec(text);
  if (!m) throw new Error("no mimo:num_requests_running in /metrics:\n" + text.slice(0, 500));
  return Number(m[1]);
}

export async function finishedCount(url, reason) {
  const text = await (await fetch(url + "/metrics")).text();
  const re = new RegExp(`^mimo:request_success_total\\{[^}]*finished_reason="${reason}"[^}]*\\} ([0-9.e+-]+)$`, "m");
  const m = re.exec(text);
  if (!m) throw new Error(`no request_success_total{finished_reason="${reason}"} in /metrics`);
  return Number(m[1]);
}

// The built-in chat page of `mimo serve`, driven in headless Chromium (puppeteer-core) against
// the real server on the default model (models/mimo-v2-nano). Expectations come from outside the
// page: the nano model's fact table and column-arithmetic format (scripts/nano/data.py), the
// non-streamed API answer to the same request, and the server's /metrics.
// Run: node --test tests/webui/   (scripts/test.sh does, after building).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import {
  ROOT, ask, browserRequired, finishedCount, findBrowser, lastAnswer, launchBrowser, openPage,
  recordStreaming, runningRequests, setSetting, sleep, startServer,
} from "./harness.mjs";

const found = findBrowser();
if (found.missing && browserRequired) {
  throw new Error(`browser tests required (CI): ${found.missing}`);
}
const skip = found.missing ? `skipped: ${found.missing}` : false;

// The non-streamed answer of the API to the request body the page sent (same sampling: greedy).
async function apiAnswer(url, body, headers = {}) {
  const res = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: false, stream_options: undefined }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).choices[0].message;
}

// A prefix-growing sequence of texts: each snapshot extends the one before.
function assertGrowingPrefixes(texts, final, what) {
  const distinct = texts.filter((t, i) => t && t !== texts[i - 1]);
  assert.ok(distinct.length >= 3, `${what} appeared in ${distinct.length} steps, not streamed: ${JSON.stringify(distinct)}`);
  for (const t of distinct) assert.ok(final.startsWith(t), `${what} snapshot ${JSON.stringify(t)} is not a prefix of ${JSON.stringify(final)}`);
}

describe("web UI", { skip }, () => {
  let server, browser;
  before(async () => {
    [server, browser] = await Promise.all([startServer(), launchBrowser(found)]);
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test("GET / serves the embedded page with a same-origin-only CSP", async () => {
    const res = await fetch(server.url + "/");
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
    const csp = res.headers.get("content-security-policy");
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self';/);
    assert.match(csp, /connect-src 'self';/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
    const html = await res.text();
    assert.equal(html, fs.readFileSync(path.join(ROOT, "src/server/webui/index.html"), "utf8"));
    const js = await fetch(server.url + "/app.js");
    assert.equal(js.headers.get("content-type"), "text/javascript; charset=utf-8");
    assert.equal(js.headers.get("x-content-type-options"), "nosniff");
    assert.equal((await fetch(server.url + "/no-such-file.js")).status, 404);
  });

  test("the page sets no HTML from strings anywhere in its code", () => {
    // Model output must only ever become text; these are the APIs that parse a string as HTML.
    for (const f of ["app.js", "markdown.js"]) {
      const src = fs.readFileSync(path.join(ROOT, "src/server/webui", f), "utf8");
      assert.doesNotMatch(src, /innerHTML|outerHTML|insertAdjacentHTML|setHTML|srcdoc|document\.write|DOMParser|createContextualFragment|\beval\(|new Function/, f);
    }
  });

  test("loads with no console errors and no request to another origin", async () => {
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await page.waitForFunction(() => document.getElementById("model-name").textContent === "mimo-v2-nano");
      const origin = new URL(server.url).origin;
      assert.ok(rec.requests.length >= 4, rec.requests.join("\n"));  // page, css, 2 scripts, /v1/models
      for (const u of rec.requests) assert.equal(new URL(u).origin, origin, u);
      assert.ok(rec.requests.includes(server.url + "/v1/models"));
      assert.deepEqual(rec.consoleErrors, []);
      assert.deepEqual(rec.pageErrors, []);
      assert.deepEqual(rec.failed, []);
      // The CSP is in force: assigning markup as HTML throws (Trusted Types).
      const tt = await page.evaluate(() => {
        try { document.body.insertAdjacentHTML("beforeend", "<b>x</b>"); return "inserted"; } catch (e) { return e.name; }
      });
      assert.equal(tt, "TypeError");
    } finally {
      await close();
    }
  });

  test("a question gets a streamed answer, Enter sends and Shift+Enter is a newline", async () => {
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await page.waitForFunction(() => document.getElementById("model-name").textContent === "mimo-v2-nano");
      await setSetting(page, "temperature", 0);
      // Shift+Enter: a newline in the box, nothing sent.
      await page.focus("#input");
      await page.keyboard.type("first line");
      await page.keyboard.down("Shift");
      await page.keyboard.press("Enter");
      await page.keyboard.up("Shift");
      await page.keyboard.type("second line");
      await sleep(200);
      assert.equal(await page.$eval("#input", (e) => e.value), "first line\nsecond line");
      assert.equal(rec.chatBodies.length, 0);
      await page.$eval("#input", (e) => { e.value = ""; });

      const snapshots = await recordStreaming(page);
      await ask(page, "Where does Venlo live?");
      const a = await lastAnswer(page);
      // The fact table of the nano model (scripts/nano/data.py, World(seed=1234)): Venlo, Gostead.
      assert.match(a.content, /Gostead/);
      assert.equal(a.reasoning, null);  // thinking off: no reasoning block
      assert.equal(await page.$eval("#input", (e) => e.value), "");
      const user = await page.$$eval(".msg.user", (els) => els.map((e) => e.textContent));
      assert.deepEqual(user, ["Where does Venlo live?"]);
      // Streamed: the answer grew through several prefixes of its final text.
      const snaps = await snapshots();
      assertGrowingPrefixes(snaps.filter((s) => s.streaming).map((s) => s.content), a.content, "the answer");
      // Per-answer timing: TTFT, tokens/s, exact token count from the usage chunk, finish reason.
      assert.match(a.stats, /^TTFT \d+\.\d\d s · \d+(\.\d)? tok\/s · \d+ tokens · stop$/);
      // The request: one user message, streaming with usage, thinking explicitly off.
      const body = rec.chatBodies[0];
      assert.equal(rec.chatBodies.length, 1);
      assert.deepEqual(body.messages, [{ role: "user", content: "Where does Venlo live?" }]);
      assert.equal(body.stream, true);
      assert.deepEqual(body.stream_options, { include_usage: true });
      assert.deepEqual(body.chat_template_kwargs, { enable_thinking: false });
      assert.equal(body.temperature, 0);
      // Nothing lost or added on the way: the page shows the API's own (non-streamed) answer.
      const api = await apiAnswer(server.url, body);
      assert.equal(a.content, api.content.trim());
      const tokens = Number(/(\d+) tokens/.exec(a.stats)[1]);
      assert.ok(tokens >= 3 && tokens <= 64, a.stats);
      assert.deepEqual(rec.consoleErrors, []);
    } finally {
      await close();
    }
  });

  test("thinking on shows the reasoning apart, open while it streams", async () => {
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await setSetting(page, "temperature", 0);
      await setSetting(page, "enable-thinking", true);
      const snapshots = await recordStreaming(page);
      await ask(page, "What is 27 + 15?");
      const a = await lastAnswer(page);
      assert.deepEqual(rec.chatBodies[0].chat_template_kwargs, { enable_thinking: true });
      // The nano model's column working (scripts/nano/data.py arith_working) is the reasoning;
      // the answer holds the sum and none of the working.
      assert.match(a.reasoning, /27 \+ 15\. Ones: 7 \+ 5 = 12, write 2, carry 1\. Tens: 2 \+ 1 \+ 1 = 4\./);
      assert.match(a.content, /42/);
      assert.doesNotMatch(a.content, /Ones:/);
      const snaps = await snapshots();
      const whileThinking = snaps.filter((s) => s.streaming && s.reasoningVisible && s.reasoning && !s.content);
      assertGrowingPrefixes(whileThinking.map((s) => s.reasoning), a.reasoning, "the reasoning");
      assert.ok(whileThinking.every((s) => s.reasoningOpen), "the reasoning is open while it streams");
      assert.equal(a.reasoningOpen, false, "collapsed once the answer is there");
      await page.click(".msg.assistant .reasoning summary");
      assert.equal(await page.$eval(".msg.assistant .reasoning", (d) => d.open), true);
      const api = await apiAnswer(server.url, rec.chatBodies[0]);
      assert.equal(a.reasoning, api.reasoning_content);
      assert.equal(a.content, api.content.trim());
      assert.deepEqual(rec.consoleErrors, []);
    } finally {
      await close();
    }
  });

  test("a tool call shows its card, and a pasted result continues the chat", async () => {
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await setSetting(page, "temperature", 0);
      await page.click("#tools-example");
      await ask(page, "What is the weather in Fenwick?");
      const a = await lastAnswer(page);
      const body = rec.chatBodies[0];
      assert.deepEqual(body.tools.map((t) => t.function.name),
                       ["get_weather", "calculator", "lookup_person", "send_message"]);
      const api = await apiAnswer(server.url, body);
      assert.equal(api.tool_calls.length, 1, JSON.stringify(api));
      const call = api.tool_calls[0].function;
      assert.equal(call.name, "get_weather");
      // The card: the function name, and the arguments pretty-printed (2-space JSON).
      assert.equal(a.tools.length, 1);
      assert.equal(a.tools[0].name, "get_weather");
      assert.equal(a.tools[0].args, JSON.stringify(JSON.parse(call.arguments), null, 2));
      assert.match(a.tools[0].args, /^\{\n {2}"city": "[^"]+"\n\}$/);
      assert.match(a.stats, / · tool_calls$/);
      // Paste a result and continue (Ctrl+Enter in the box sends): the model answers from it.
      assert.equal(await page.evaluate(() => document.activeElement.className), "tool-result");
      await page.keyboard.type('{"city": "Fenwick", "temperature": 21, "condition": "sunny"}');
      await page.keyboard.down("Control");
      await page.keyboard.press("Enter");
      await page.keyboard.up("Control");
      await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 2);
      const b = await lastAnswer(page);
      assert.equal(rec.chatBodies.length, 2);
      const msgs = rec.chatBodies[1].messages;
      assert.equal(msgs.length, 3);
      assert.equal(msgs[1].role, "assistant");
      assert.equal(msgs[1].tool_calls[0].function.name, "get_weather");
      assert.deepEqual(JSON.parse(msgs[1].tool_calls[0].function.arguments), JSON.parse(call.arguments));
      assert.deepEqual(msgs[2], { role: "tool", tool_call_id: msgs[1].tool_calls[0].id,
                                  content: '{"city": "Fenwick", "temperature": 21, "condition": "sunny"}' });
      assert.match(b.content, /21/);
      assert.match(b.content, /sunny/);
      assert.deepEqual(rec.consoleErrors, []);
    } finally {
      await close();
    }
  });

  test("Stop ends a long answer and the server frees the request within a second", async () => {
    // A long answer: the nano model ends every answer within ~70 tokens whatever it is asked
    // (checked: "Count from 1 to 1000." stops after 58), and the random-weight checkpoints of
    // scripts/make_tiny_model.py have vocabularies of 512/640 ids, which the Qwen3 tokenizer of
    // the nano model (151669 ids) cannot drive. So the page's "Ignore end of answer" setting
    // (ignore_eos) keeps the nano model generating to max_tokens: 2000 real tokens, ~20 s here.
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await setSetting(page, "temperature", 0);
      await setSetting(page, "enable-thinking", true);
      await setSetting(page, "max-tokens", 2000);
      await setSetting(page, "ignore-eos", true);
      const aborted = await finishedCount(server.url, "abort");
      const ranOut = await finishedCount(server.url, "length");
      await ask(page, "Count from 1 to 1000.");
      const shown = () => page.evaluate(() => {
        const a = [...document.querySelectorAll(".msg.assistant")].pop();
        return a ? a.querySelector(".content").textContent.length + a.querySelector(".reasoning-text").textContent.length : 0;
      });
      // Streaming for a while, and the server is running it.
      await page.waitForFunction(() => {
        const a = [...document.querySelectorAll(".msg.assistant")].pop();
        return a && a.querySelector(".content").textContent.length > 150;
      }, { timeout: 15000 });
      assert.equal(await runningRequests(server.url), 1);
      assert.equal(rec.chatBodies[0].ignore_eos, true);
      assert.equal(rec.chatBodies[0].max_tokens, 2000);
      await page.click("#stop");
      const t0 = Date.now();
      let running = 1;
      const polls = [];
      while (running !== 0 && Date.now() - t0 < 3000) {
        running = await runningRequests(server.url);
        polls.push(`${Date.now() - t0} ms: ${running}`);
        if (running !== 0) await sleep(20);
      }
      const elapsed = Date.now() - t0;
      assert.equal(running, 0);
      assert.ok(elapsed < 1000, `the request still ran ${elapsed} ms after Stop (${polls.join(", ")})`);
      // Cancelled by the server (not run to its end), its KV blocks freed.
      assert.equal(await finishedCount(server.url, "abort"), aborted + 1);
      assert.equal(await finishedCount(server.url, "length"), ranOut);
      const metrics = await (await fetch(server.url + "/metrics")).text();
      assert.match(metrics, /^mimo:kv_cache_usage_perc\{[^}]*\} 0$/m);
      // The page: the answer is marked stopped, stays as far as it got, Send is back.
      const a = await lastAnswer(page);
      assert.match(a.stats, / · stopped$/);
      assert.ok(a.content.length > 150);
      const len = await shown();
      await sleep(300);
      assert.equal(await shown(), len);
      assert.equal(await page.$eval("#stop", (e) => e.hidden), true);
      assert.equal(await page.$eval("#send", (e) => e.hidden), false);
      assert.deepEqual(rec.pageErrors, []);
    } finally {
      await close();
    }
  });

  test("model output carrying markup renders as text (stubbed server answer)", async () => {
    // The page's chat request is answered by this stub: an SSE stream whose reasoning, content
    // and tool call carry live markup. None of it may run or become an element.
    const probe = {
      reasoning: `<img src=x onerror="window.__xss='reasoning'">thinking`,
      content: "Hi <script>window.__xss='script'</script> and <img src=x onerror=\"window.__xss='img'\"> " +
               "**bold <b>b</b>** and `<i>code</i>` and *it*\n\n" +
               "```html\n<script>window.__xss='fence'</script>\n<img src=x onerror=alert(1)>\n```\n\n" +
               "- item <svg onload=\"window.__xss='svg'\">\n- [link](javascript:window.__xss='link')",
      toolName: `<img src=x onerror="window.__xss='name'">`,
      toolArgs: JSON.stringify({ q: "<script>window.__xss='args'</script>" }),
    };
    const chunk = (delta, finish = null) => "data: " + JSON.stringify({
      id: "chatcmpl-stub", object: "chat.completion.chunk", created: 0, model: "mimo-v2-nano",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) + "\n\n";
    const sse = chunk({ role: "assistant", content: "" }) +
      chunk({ reasoning_content: probe.reasoning }) +
      chunk({ content: probe.content.slice(0, 40) }) +
      chunk({ content: probe.content.slice(40) }) +
      chunk({ tool_calls: [{ index: 0, id: "call_x", type: "function",
                             function: { name: probe.toolName, arguments: probe.toolArgs } }] }) +
      chunk({}, "tool_calls") + "data: [DONE]\n\n";
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await page.setRequestInterception(true);
      page.on("request", (r) => {
        if (r.url().endsWith("/v1/chat/completions")) {
          r.respond({ status: 200, contentType: "text/event-stream", body: sse });
        } else {
          r.continue();
        }
      });
      await ask(page, "<img src=x onerror=\"window.__xss='user'\">");
      const a = await lastAnswer(page);
      await sleep(300);  // give any injected handler the chance to fire
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      // Not one element from the model's markup exists; the formatting that is ours does.
      const tags = await page.$$eval("#messages *", (els) => [...new Set(els.map((e) => e.tagName.toLowerCase()))]);
      for (const bad of ["img", "script", "svg", "a", "b", "i", "iframe"]) assert.ok(!tags.includes(bad), `<${bad}> in ${tags}`);
      assert.equal(await page.$eval(".msg.user", (e) => e.textContent), "<img src=x onerror=\"window.__xss='user'\">");
      assert.equal(a.reasoning, probe.reasoning);
      assert.match(a.content, /Hi <script>window\.__xss='script'<\/script> and <img src=x onerror="window\.__xss='img'">/);
      assert.equal(await page.$eval(".msg.assistant .content strong", (e) => e.textContent), "bold <b>b</b>");
      assert.equal(await page.$eval(".msg.assistant .content p code", (e) => e.textContent), "<i>code</i>");
      assert.equal(await page.$eval(".msg.assistant .content em", (e) => e.textContent), "it");
      assert.equal(await page.$eval(".msg.assistant .content pre code", (e) => e.textContent),
                   "<script>window.__xss='fence'</script>\n<img src=x onerror=alert(1)>");
      assert.deepEqual(await page.$$eval(".msg.assistant .content li", (els) => els.map((e) => e.textContent)),
                       [`item <svg onload="window.__xss='svg'">`, "[link](javascript:window.__xss='link')"]);
      assert.deepEqual(a.tools, [{ name: probe.toolName,
                                   args: JSON.stringify(JSON.parse(probe.toolArgs), null, 2) }]);
      assert.deepEqual(rec.pageErrors, []);
      assert.deepEqual(rec.consoleErrors, []);  // no CSP violation: nothing even tried to load
    } finally {
      await close();
    }
  });

  test("a server error carrying markup shows as text (stubbed)", async () => {
    const { page, close } = await openPage(browser, server.url + "/");
    try {
      await page.setRequestInterception(true);
      page.on("request", (r) => {
        if (r.url().endsWith("/v1/chat/completions")) {
          r.respond({ status: 500, contentType: "application/json",
                      body: JSON.stringify({ error: { message: "<img src=x onerror=\"window.__xss=1\">boom" } }) });
        } else {
          r.continue();
        }
      });
      await ask(page, "hello");
      await page.waitForSelector(".msg.assistant .error");
      await sleep(200);
      assert.equal(await page.$eval(".msg.assistant .error", (e) => e.textContent),
                   `HTTP 500: <img src=x onerror="window.__xss=1">boom`);
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.equal(await page.$("#messages img"), null);
    } finally {
      await close();
    }
  });

  test("works in a phone-sized window", async () => {
    const { page, close } = await openPage(browser, server.url + "/",
                                           { viewport: { width: 375, height: 740, isMobile: true, hasTouch: true } });
    try {
      await setSetting(page, "temperature", 0);
      await page.click("#tools-example");  // the settings panel open, with the tools JSON in it
      await ask(page, "What is the weather in Fenwick?");
      const a = await lastAnswer(page);
      assert.equal(a.tools[0].name, "get_weather");
      const layout = await page.evaluate(() => {
        const box = (sel) => document.querySelector(sel).getBoundingClientRect().toJSON();
        return { scrollWidth: document.documentElement.scrollWidth, width: innerWidth, height: innerHeight,
                 input: box("#input"), send: box("#send"), answer: box(".msg.assistant"),
                 card: box(".tool-card"), settings: box("#settings") };
      });
      assert.ok(layout.scrollWidth <= layout.width, `horizontal overflow: ${JSON.stringify(layout)}`);
      for (const k of ["input", "send", "answer", "card", "settings"]) {
        assert.ok(layout[k].left >= 0 && layout[k].right <= layout.width, `${k} off screen: ${JSON.stringify(layout)}`);
      }
      assert.ok(layout.send.bottom <= layout.height && layout.input.bottom <= layout.height, JSON.stringify(layout));
    } finally {
      await close();
    }
  });

  test("server errors are shown in the page", async () => {
    const { page, rec, close } = await openPage(browser, server.url + "/");
    try {
      await page.waitForFunction(() => document.getElementById("model-name").textContent === "mimo-v2-nano");
      await setSetting(page, "temperature", -1);
      await ask(page, "What is 2 + 3?");
      await page.waitForSelector(".msg.assistant .error");
      const shown = await page.$eval(".msg.assistant .error", (e) => e.textContent);
      // The message the server gives for this very request.
      const res = await fetch(server.url + "/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(rec.chatBodies[0]),
      });
      assert.equal(res.status, 400);
      const { error } = await res.json();
      assert.equal(shown, `HTTP 400: ${error.message}`);
      assert.equal(await page.$eval(".msg.assistant .stats", (e) => e.textContent), "error");
      // The turn was not sent: its bubble is marked and the text is back in the box.
      assert.equal(await page.$eval(".msg.user", (e) => e.classList.contains("unsent")), true);
      assert.equal(await page.$eval("#input", (e) => e.value), "What is 2 + 3?");
      assert.equal(await page.$eval("#send", (e) => e.hidden), false);
    } finally {
      await close();
    }
  });
});

describe("web UI options", { skip }, () => {
  let browser;
  before(async () => { browser = await launchBrowser(found); });
  after(async () => { await browser?.close(); });

  test("with --api-key the page asks for the key and sends it", async () => {
    const server = await startServer(["--api-key", "sesame-123"]);
    try {
      const { page, rec, close } = await openPage(browser, server.url + "/");
      try {
        await page.waitForSelector("#key-form:not([hidden])");
        assert.equal(await page.$eval("#model-name", (e) => e.textContent), "API key needed");
        await page.type("#api-key", "wrong");
        await page.keyboard.press("Enter");
        await page.waitForFunction(() => document.getElementById("key-error").textContent !== "");
        assert.equal(await page.$eval("#key-form", (e) => e.hidden), false);
        await page.click("#api-key", { clickCount: 3 });
        await page.type("#api-key", "sesame-123");
        await page.keyboard.press("Enter");
        await page.waitForFunction(() => document.getElementById("model-name").textContent === "mimo-v2-nano");
        assert.equal(await page.$eval("#key-form", (e) => e.hidden), true);
        await setSetting(page, "temperature", 0);
        await ask(page, "Where does Venlo live?");
        const a = await lastAnswer(page);
        assert.match(a.content, /Gostead/);
        assert.equal(rec.chatHeaders[0].authorization, "Bearer sesame-123");
        // The key really is required: the same request without it is refused.
        const res = await fetch(server.url + "/v1/chat/completions", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(rec.chatBodies[0]) });
        assert.equal(res.status, 401);
      } finally {
        await close();
      }
    } finally {
      await server.stop();
    }
  });

  test("--no-webui turns the page off and leaves the API on", async () => {
    const server = await startServer(["--no-webui"]);
    try {
      for (const p of ["/", "/app.js", "/index.html"]) {
        assert.equal((await fetch(server.url + p)).status, 404, p);
      }
      assert.equal((await fetch(server.url + "/v1/models")).status, 200);
    } finally {
      await server.stop();
    }
  });
});

// The chat page of `mimo serve`: streams /v1/chat/completions (OpenAI SSE chunks), shows the
// reasoning apart from the answer, tool calls as cards (paste a result, continue), TTFT and
// tokens/s per answer; Stop aborts the fetch, and the server cancels the request when the
// connection closes. Model output is only ever put in the page as text (textContent, Text nodes,
// markdown.js); nothing here parses a string as HTML, and the server's CSP requires Trusted Types
// for every HTML sink, so a slip would throw instead of running markup.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const ui = {
    modelName: $("model-name"),
    newChat: $("new-chat"),
    settingsToggle: $("settings-toggle"),
    settings: $("settings"),
    thinking: $("enable-thinking"),
    temperature: $("temperature"),
    maxTokens: $("max-tokens"),
    ignoreEos: $("ignore-eos"),
    useTools: $("use-tools"),
    toolsJson: $("tools-json"),
    toolsExample: $("tools-example"),
    forgetKey: $("forget-key"),
    systemPrompt: $("system-prompt"),
    keyForm: $("key-form"),
    apiKey: $("api-key"),
    keyError: $("key-error"),
    messages: $("messages"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    stop: $("stop"),
  };

  // The tools of the default model (scripts/demo/tools.json), offered by "Example tools".
  const EXAMPLE_TOOLS = [
    tool("get_weather", "Get the current weather in a city.", { city: "The city name." }),
    tool("calculator", "Evaluate an arithmetic expression.", { expression: "The expression, e.g. 2 * 3." }),
    tool("lookup_person", "Look up a person in the directory.", { name: "The person's name." }),
    tool("send_message", "Send a text message to a person.",
         { to: "Who receives the message.", text: "The message text." }),
  ];
  function tool(name, description, params) {
    const properties = {};
    for (const [k, d] of Object.entries(params)) properties[k] = { type: "string", description: d };
    return { type: "function", function: { name, description,
      parameters: { type: "object", properties, required: Object.keys(params) } } };
  }

  const state = {
    messages: [],        // the OpenAI conversation sent with every request
    model: null,         // id from /v1/models
    apiKey: localStorage.getItem("mimo.apiKey") || "",
    controller: null,    // AbortController of the request in flight
    epoch: 0,            // bumped by "New chat": a late answer of the old chat is dropped
  };

  // ---- Small DOM helpers (text only) --------------------------------------------------------
  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function nearBottom() {
    const m = ui.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }
  function scrollDown(force) {
    if (force || nearBottom()) ui.messages.scrollTop = ui.messages.scrollHeight;
  }
  function headers() {
    const h = { "Content-Type": "application/json" };
    if (state.apiKey) h.Authorization = "Bearer " + state.apiKey;
    return h;
  }

  // ---- Settings (kept in localStorage) ------------------------------------------------------
  const SETTINGS = ["enable-thinking", "temperature", "max-tokens", "use-tools", "tools-json",
                    "system-prompt"];
  function loadSettings() {
    for (const id of SETTINGS) {
      const v = localStorage.getItem("mimo.setting." + id);
      if (v === null) continue;
      const e = $(id);
      if (e.type === "checkbox") e.checked = v === "1";
      else e.value = v;
    }
  }
  function saveSetting(e) {
    localStorage.setItem("mimo.setting." + e.id, e.type === "checkbox" ? (e.checked ? "1" : "0") : e.value);
  }
  for (const id of SETTINGS) $(id).addEventListener("change", (ev) => saveSetting(ev.target));

  ui.settingsToggle.addEventListener("click", () => {
    const open = ui.settings.hidden;
    ui.settings.hidden = !open;
    ui.settingsToggle.setAttribute("aria-expanded", String(open));
  });
  ui.toolsExample.addEventListener("click", () => {
    ui.toolsJson.value = JSON.stringify(EXAMPLE_TOOLS, null, 2);
    ui.useTools.checked = true;
    saveSetting(ui.toolsJson);
    saveSetting(ui.useTools);
  });

  // ---- Errors shown in the conversation -----------------------------------------------------
  function showError(text, parent) {
    const e = el("div", "error", text);
    e.setAttribute("role", "alert");
    (parent || ui.messages).appendChild(e);
    scrollDown(true);
    return e;
  }
  // The message of an error response: OpenAI {"error": {"message"}}, else the body's text.
  async function errorText(res) {
    const body = await res.text().catch(() => "");
    let msg = body.trim();
    try {
      const j = JSON.parse(body);
      if (j && j.error) msg = typeof j.error === "string" ? j.error : j.error.message || body;
    } catch (_) { /* not JSON: keep the text */ }
    return `HTTP ${res.status}${msg ? ": " + msg : ""}`;
  }

  // ---- API key and model --------------------------------------------------------------------
  function askForKey(message) {
    ui.keyForm.hidden = false;
    ui.keyError.textContent = message || "";
    ui.apiKey.focus();
  }
  ui.keyForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.apiKey = ui.apiKey.value.trim();
    localStorage.setItem("mimo.apiKey", state.apiKey);
    loadModel();
  });
  ui.forgetKey.addEventListener("click", () => {
    state.apiKey = "";
    localStorage.removeItem("mimo.apiKey");
    ui.forgetKey.hidden = true;
    loadModel();
  });

  async function loadModel() {
    let res;
    try {
      res = await fetch("/v1/models", { headers: headers() });
    } catch (e) {
      showError("Cannot reach the server: " + e.message);
      return;
    }
    if (res.status === 401) {
      ui.modelName.textContent = "API key needed";
      askForKey(state.apiKey ? "That key was refused." : "");
      return;
    }
    if (!res.ok) {
      const msg = await errorText(res);
      if (res.status === 503 && /loading/.test(msg)) {
        ui.modelName.textContent = "loading…";  // up, still loading the model: ask again soon
        setTimeout(loadModel, 1000);
        return;
      }
      ui.modelName.textContent = "unavailable";
      showError(msg);
      return;
    }
    const j = await res.json();
    const m = j.data && j.data[0];
    if (!m) return;
    state.model = m.id;
    ui.modelName.textContent = m.id;
    if (m.max_model_len) ui.modelName.title = `served model; context ${m.max_model_len} tokens`;
    ui.keyForm.hidden = true;
    ui.keyError.textContent = "";
    ui.forgetKey.hidden = !state.apiKey;
    ui.input.focus();
  }

  // ---- Messages -----------------------------------------------------------------------------
  function addUserBubble(text) {
    const b = el("div", "msg user");
    b.appendChild(el("div", "text", text));
    ui.messages.appendChild(b);
    scrollDown(true);
    return b;
  }

  // The view of one assistant answer, updated as chunks arrive.
  class AnswerView {
    constructor() {
      this.root = el("div", "msg assistant");
      this.reasoning = el("details", "reasoning");
      this.reasoning.hidden = true;
      this.reasoning.appendChild(el("summary", "", "Reasoning"));
      this.reasoningText = el("div", "reasoning-text");
      this.reasoning.appendChild(this.reasoningText);
      this.userToggled = false;
      this.reasoning.querySelector("summary").addEventListener("click", () => { this.userToggled = true; });
      this.content = el("div", "content");
      this.tools = el("div", "tool-calls");
      this.stats = el("div", "stats", "waiting…");
      this.root.append(this.reasoning, this.content, this.tools, this.stats);
      ui.messages.appendChild(this.root);
      this.root.classList.add("streaming");
      scrollDown(true);
    }
    setReasoning(text, streaming) {
      if (!text) return;
      this.reasoning.hidden = false;
      this.reasoningText.textContent = text;
      if (!this.userToggled) this.reasoning.open = streaming;  // open while it streams
    }
    setContent(text) {
      this.content.replaceChildren(window.MimoMarkdown.render(text));
    }
    setToolCalls(calls) {
      this.tools.replaceChildren(...calls.map((c) => toolCard(c)));
    }
  }

  // A tool call card: the function name and its arguments pretty-printed.
  function toolCard(call) {
    const card = el("div", "tool-card");
    const head = el("div", "tool-head");
    head.append(el("span", "tool-label", "tool call"), el("span", "tool-name", call.name || "?"));
    card.appendChild(head);
    let args = call.arguments || "";
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch (_) { /* still streaming, or not JSON: show as is */ }
    card.appendChild(el("pre", "tool-args", args));
    card.dataset.callId = call.id || "";
    return card;
  }

  // Under the cards of an answer that called tools: a result box per call, then Continue.
  function addToolResultForm(view, calls) {
    const form = el("form", "tool-results");
    const boxes = calls.map((c, i) => {
      const label = el("label", "block", `Result of ${c.name || "call " + (i + 1)}`);
      const box = el("textarea", "tool-result");
      box.rows = 3;
      box.spellcheck = false;
      box.placeholder = 'Paste what the tool returned, e.g. {"temperature": 21}';
      const id = `tool-result-${Date.now()}-${i}`;
      box.id = id;
      label.htmlFor = id;
      view.tools.children[i].append(label, box);
      // Ctrl+Enter (or Cmd+Enter) in a result box sends the results; Enter alone is a newline.
      box.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
          ev.preventDefault();
          form.requestSubmit();
        }
      });
      return box;
    });
    const button = el("button", "", "Send tool results");
    button.type = "submit";
    const hint = el("span", "hint");
    form.append(button, hint);
    view.tools.appendChild(form);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (state.controller) return;
      if (boxes.some((b) => b.value.trim() === "")) {
        hint.textContent = "Paste a result for every call first.";
        return;
      }
      calls.forEach((c, i) => {
        state.messages.push({ role: "tool", tool_call_id: c.id, content: boxes[i].value });
        boxes[i].readOnly = true;
      });
      form.remove();
      runCompletion();
    });
    boxes[0].focus();
  }

  // ---- One streamed completion --------------------------------------------------------------
  function requestBody(tools) {
    const body = {
      messages: (ui.systemPrompt.value.trim()
        ? [{ role: "system", content: ui.systemPrompt.value }] : []).concat(state.messages),
      stream: true,
      stream_options: { include_usage: true },
      chat_template_kwargs: { enable_thinking: ui.thinking.checked },
    };
    if (state.model) body.model = state.model;
    if (ui.temperature.value !== "") body.temperature = Number(ui.temperature.value);
    if (ui.maxTokens.value !== "") body.max_tokens = Number(ui.maxTokens.value);
    if (ui.ignoreEos.checked) body.ignore_eos = true;  // not kept across reloads, on purpose
    if (tools) body.tools = tools;
    return body;
  }

  // The tools to offer, or undefined; throws with a readable message on bad JSON.
  function toolsSetting() {
    if (!ui.useTools.checked || ui.toolsJson.value.trim() === "") return undefined;
    let t;
    try {
      t = JSON.parse(ui.toolsJson.value);
    } catch (e) {
      throw new Error("The tools setting is not valid JSON: " + e.message);
    }
    if (!Array.isArray(t)) throw new Error("The tools setting must be a JSON array.");
    return t;
  }

  function setBusy(busy) {
    ui.send.hidden = busy;
    ui.stop.hidden = !busy;
    document.body.classList.toggle("busy", busy);
  }

  // Splits SSE text into events; returns the unfinished rest.
  function takeEvents(buffer, onData) {
    const parts = buffer.split(/\r?\n\r?\n/);
    const rest = parts.pop();
    for (const ev of parts) {
      const data = ev.split(/\r?\n/).filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data) onData(data);
    }
    return rest;
  }

  function formatStats(s) {
    const parts = [];
    if (s.ttft !== null) parts.push(`TTFT ${(s.ttft / 1000).toFixed(2)} s`);
    if (s.tokens !== null) {
      const gen = (s.tLast - s.tFirst) / 1000;
      if (s.tokens > 1 && gen > 0) parts.push(`${((s.tokens - 1) / gen).toFixed(1)} tok/s`);
      parts.push(`${s.exact ? "" : "≈"}${s.tokens} tokens`);
    }
    if (s.finish) parts.push(s.finish);
    return parts.join(" · ");
  }

  async function runCompletion() {
    let tools;
    try {
      tools = toolsSetting();
    } catch (e) {
      showError(e.message);
      return false;
    }
    const view = new AnswerView();
    const epoch = state.epoch;
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    const acc = { reasoning: "", content: "", calls: [], finish: null, usage: null, error: null };
    const s = { t0: performance.now(), ttft: null, tFirst: 0, tLast: 0, tokens: null, chunks: 0,
                exact: false, finish: null };
    const render = (streaming) => {
      view.setReasoning(acc.reasoning, streaming && !acc.content && !acc.calls.length);
      view.setContent(acc.content);
      if (acc.calls.length) view.setToolCalls(acc.calls);
      view.stats.textContent = formatStats(s) || "…";
      scrollDown(false);
    };
    const onData = (data) => {
      if (data === "[DONE]") return;
      let j;
      try {
        j = JSON.parse(data);
      } catch (_) {
        acc.error = "the server sent a malformed event: " + data.slice(0, 200);
        return;
      }
      if (j.error) {
        acc.error = typeof j.error === "string" ? j.error : j.error.message || JSON.stringify(j.error);
        return;
      }
      if (j.usage) acc.usage = j.usage;
      const ch = j.choices && j.choices[0];
      if (!ch) return;
      const d = ch.delta || {};
      let got = false;
      if (d.reasoning_content) { acc.reasoning += d.reasoning_content; got = true; }
      if (d.content) { acc.content += d.content; got = true; }
      for (const tc of d.tool_calls || []) {
        const c = acc.calls[tc.index] || (acc.calls[tc.index] = { id: "", name: "", arguments: "" });
        if (tc.id) c.id = tc.id;
        if (tc.function && tc.function.name) c.name = tc.function.name;
        if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
        got = true;
      }
      if (got) {
        const now = performance.now();
        if (s.ttft === null) { s.ttft = now - s.t0; s.tFirst = now; }
        s.tLast = now;
        s.chunks++;
        s.tokens = s.chunks;  // an estimate until the usage chunk
      }
      if (ch.finish_reason) acc.finish = ch.finish_reason;
    };

    let stopped = false;
    try {
      const res = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers(), body: JSON.stringify(requestBody(tools)),
        signal: controller.signal,
      });
      if (!res.ok) {
        acc.error = await errorText(res);
        if (res.status === 401) askForKey("The server refused the API key.");
      } else {
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer = takeEvents(buffer + decoder.decode(value, { stream: true }), onData);
          render(true);
        }
        takeEvents(buffer + decoder.decode() + "\n\n", onData);
      }
    } catch (e) {
      if (e.name === "AbortError") stopped = true;
      else acc.error = "the connection failed: " + e.message;
    }
    state.controller = null;
    setBusy(false);
    view.root.classList.remove("streaming");

    if (acc.usage) {
      s.tokens = acc.usage.completion_tokens;
      s.exact = true;
    }
    s.finish = stopped ? "stopped" : acc.error ? "error" : acc.finish;
    render(false);
    if (acc.error) showError(acc.error, view.root);
    if (epoch !== state.epoch) return false;
    const produced = acc.content || acc.reasoning || acc.calls.length;
    if (!produced) {
      if (!stopped && !acc.error) view.content.textContent = "(empty answer)";
      view.root.classList.add("failed");
      return false;
    }
    const msg = { role: "assistant", content: acc.content };
    if (acc.reasoning) msg.reasoning_content = acc.reasoning;
    if (acc.calls.length && !stopped) {  // a stopped call may be cut short: not history
      msg.tool_calls = acc.calls.map((c) => ({ id: c.id, type: "function",
        function: { name: c.name, arguments: c.arguments } }));
    }
    state.messages.push(msg);
    if (acc.calls.length && !stopped && !acc.error) addToolResultForm(view, acc.calls);
    return true;
  }

  // ---- Composer -----------------------------------------------------------------------------
  async function send() {
    const text = ui.input.value;
    if (state.controller || text.trim() === "") return;
    ui.input.value = "";
    const bubble = addUserBubble(text);
    state.messages.push({ role: "user", content: text });
    const n = state.messages.length;
    const ok = await runCompletion();
    if (!ok && state.messages.length === n) {
      // Nothing came back: take the turn out of the history and give the text back to edit.
      state.messages.pop();
      bubble.classList.add("unsent");
      if (ui.input.value === "") ui.input.value = text;
    }
    if (!ui.messages.contains(document.activeElement)) ui.input.focus();  // not from a tool result box
  }

  ui.composer.addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  ui.input.addEventListener("keydown", (ev) => {
    // Enter sends; Shift+Enter (the default action) inserts a newline; IME composition is left alone.
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
      ev.preventDefault();
      send();
    }
  });
  ui.stop.addEventListener("click", () => {
    if (state.controller) state.controller.abort();
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && state.controller) state.controller.abort();
  });
  ui.newChat.addEventListener("click", () => {
    if (state.controller) state.controller.abort();
    state.messages = [];
    state.epoch++;
    ui.messages.replaceChildren();
    ui.input.focus();
  });

  loadSettings();
  loadModel();
})();

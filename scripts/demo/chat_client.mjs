// The demo conversation of the README's main command (scripts/chat.sh), run through `mimo serve`'s
// HTTP API with the official `openai` npm package: a fact (streamed), arithmetic, a thinking-mode
// turn (reasoning_content apart from the answer), and a tool-call round trip (the model calls
// get_weather, this client runs scripts/demo/tools.py and sends the result back, the model answers).
//
//   node scripts/demo/chat_client.mjs --base-url http://127.0.0.1:8000/v1 [--model NAME]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(path.join(ROOT, "scripts/demo/package.json"));
const OpenAI = require("openai");

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
};
const client = new OpenAI({
  baseURL: arg("base-url", "http://127.0.0.1:8000/v1"),
  apiKey: process.env.OPENAI_API_KEY || "none",
});
const model = arg("model", undefined) || (await client.models.list()).data[0].id;
const TOOLS = JSON.parse(fs.readFileSync(path.join(ROOT, "scripts/demo/tools.json"), "utf8"));
// Greedy decoding, as `mimo chat` does with the nano model's generation_config (do_sample false).
const base = { model, temperature: 0, max_tokens: 256 };
const thinking = (on) => ({ chat_template_kwargs: { enable_thinking: on } });

function heading(t) {
  process.stdout.write(`\n== ${t}\n`);
}

// Streams one answer to stdout as it arrives; returns the full text.
async function streamed(messages) {
  process.stdout.write(`user: ${messages.at(-1).content}\nassistant: `);
  const stream = await client.chat.completions.create({ ...base, ...thinking(false), messages, stream: true });
  let text = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta?.content || "";
    text += d;
    process.stdout.write(d);
  }
  process.stdout.write("\n");
  return text;
}

heading("A fact from its table (streamed)");
await streamed([{ role: "user", content: "Where does Venlo live?" }]);

heading("Arithmetic, worked column by column");
{
  const q = "What is 27 + 15?";
  const r = await client.chat.completions.create({ ...base, ...thinking(false), messages: [{ role: "user", content: q }] });
  console.log(`user: ${q}\nassistant: ${r.choices[0].message.content}`);
  console.log(`(usage: ${r.usage.prompt_tokens} prompt + ${r.usage.completion_tokens} completion tokens)`);
}

heading("Thinking mode (reasoning_content parsed apart)");
{
  const q = "What is Pelden's job?";
  const r = await client.chat.completions.create({ ...base, ...thinking(true), messages: [{ role: "user", content: q }] });
  const m = r.choices[0].message;
  console.log(`user: ${q}\n[reasoning] ${(m.reasoning_content || "").trim()}\nassistant: ${m.content}`);
}

heading("Tool call round trip");
{
  const q = "What is the weather in Fenwick?";
  const messages = [{ role: "user", content: q }];
  console.log(`user: ${q}`);
  const r = await client.chat.completions.create({ ...base, ...thinking(false), messages, tools: TOOLS });
  const m = r.choices[0].message;
  if (!m.tool_calls?.length) {
    console.log(`assistant (no tool call, finish_reason ${r.choices[0].finish_reason}): ${m.content}`);
    process.exit(1);
  }
  messages.push(m);
  for (const call of m.tool_calls) {
    console.log(`[tool call ${call.id}] ${call.function.name}(${call.function.arguments})`);
    const run = spawnSync("/usr/bin/python3", [path.join(ROOT, "scripts/demo/tools.py")], {
      input: JSON.stringify({ name: call.function.name, arguments: JSON.parse(call.function.arguments) }),
      encoding: "utf8",
    });
    const result = run.stdout.trim();
    console.log(`[tool result] ${result}`);
    messages.push({ role: "tool", tool_call_id: call.id, content: result });
  }
  const final = await client.chat.completions.create({ ...base, ...thinking(false), messages, tools: TOOLS });
  console.log(`assistant: ${final.choices[0].message.content}`);
}

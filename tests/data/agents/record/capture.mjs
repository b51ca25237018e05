#!/usr/bin/env node
// Capture server for recording what coding agents send to an
// OpenAI/Anthropic-compatible endpoint.  Logs every request (method, path+query,
// headers minus secrets, full body) as one JSON line and answers plausibly:
//   POST /v1/messages[?beta=true]        Anthropic Messages (SSE if stream:true), text "42"
//   POST /v1/messages/count_tokens       {"input_tokens": N}
//   POST /v1/responses                   OpenAI Responses (SSE if stream:true), text "42"
//   POST /v1/chat/completions            OpenAI chat completions (SSE if stream:true), text "42"
//   GET  /v1/models                      model list (Anthropic + OpenAI fields merged)
//   anything else                        404 JSON error (logged)
// Env:
//   PORT          listen port (default 8787), host is 127.0.0.1
//   CAPTURE_LOG   JSONL output file (default ./capture.jsonl)
//   CAPTURE_MODE  "text" (always answer 42) or "tool" (answer a conversation that has
//                 no tool result yet with a call of the agent's shell tool, `echo 42`)
//   CAPTURE_ERR   JSON array of {"match": "<regex on 'METHOD /path?query'>", "status": 400,
//                 "times": 1, "body": {...}} to inject error answers
//   CAPTURE_PING  "0" to omit the Anthropic `ping` event
//   CAPTURE_STYLE "" | json | truncate | noevent | minimal | thin (see below)
//   CAPTURE_REASONING "1" to prepend a thinking block / reasoning item to every answer
//   CAPTURE_CMD   shell command put in the tool call in tool mode (default `echo 42`)
//   CAPTURE_RAW_DIR  directory where each request's exact body bytes are written (NNN.body)
import http from 'node:http';
import fs from 'node:fs';
import zlib from 'node:zlib';
import crypto from 'node:crypto';

const PORT = Number(process.env.PORT || 8787);
const LOG = process.env.CAPTURE_LOG || './capture.jsonl';
const MODE = process.env.CAPTURE_MODE || 'text';
const ERRS = JSON.parse(process.env.CAPTURE_ERR || '[]').map(e => ({ ...e, left: e.times ?? Infinity }));
const PING = process.env.CAPTURE_PING !== '0';
// CAPTURE_STYLE: "" | "json" (answer stream:true with a plain JSON body) | "truncate" (end the SSE
// before message_delta+message_stop / response.completed) | "nostop" (Anthropic: omit only
// message_stop) | "noevent" (no `event:` lines, data only) | "minimal" (Responses: only
// output_item.done + response.completed) | "thin" (minimal, and response.completed carries only
// {id,status})
const STYLE = process.env.CAPTURE_STYLE || '';
// CAPTURE_REASONING=1: prepend a thinking block (Anthropic, with signature) / a reasoning item
// (Responses, with summary + encrypted_content) to every answer, to see how agents replay them.
const REASONING = process.env.CAPTURE_REASONING === '1';
const ANSWER = '42';
const CMD = process.env.CAPTURE_CMD || 'echo 42'; // shell command used in tool mode
let seq = 0;

const SECRET = /^(authorization|x-api-key|api-key|cookie|proxy-authorization|x-goog-api-key|chatgpt-account-id)$/i;
function redact(h) {
  const o = {};
  // keep the auth scheme word (e.g. "Bearer") so the header's form stays visible
  for (const [k, v] of Object.entries(h)) o[k] = SECRET.test(k) ? (/^(Bearer|Basic)\s/i.test(v) ? v.split(/\s/)[0] + ' <redacted>' : '<redacted>') : v;
  return o;
}
function log(rec) { fs.appendFileSync(LOG, JSON.stringify(rec) + '\n'); }
const rid = (p) => p + crypto.randomBytes(12).toString('hex');
const now = () => Math.floor(Date.now() / 1000);
const approxTokens = (s) => Math.max(1, Math.ceil(Buffer.byteLength(s || '') / 4));

function decode(buf, enc) {
  try {
    if (!enc || enc === 'identity') return buf;
    if (enc === 'gzip') return zlib.gunzipSync(buf);
    if (enc === 'deflate') return zlib.inflateSync(buf);
    if (enc === 'br') return zlib.brotliDecompressSync(buf);
    if (enc === 'zstd' && zlib.zstdDecompressSync) return zlib.zstdDecompressSync(buf);
  } catch (e) { /* fallthrough */ }
  return null;
}

function sendJSON(res, status, obj, extra = {}) {
  const s = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s), ...extra });
  res.end(s);
  return { status, body: obj };
}
function sseStart(res, extra = {}) {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', ...extra });
}
const sse = (res, event, data, out) => {
  const s = (event && STYLE !== 'noevent' ? `event: ${event}\n` : '') + `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  out.push(s);
  res.write(s);
};

// ---------------------------------------------------------------- Anthropic
function anthropicHasToolResult(body) {
  // only the last message counts, so multi-turn sessions get a new tool call per user turn
  const m = (body.messages || []).slice(-1)[0];
  return !!m && Array.isArray(m.content) && m.content.some(c => c.type === 'tool_result');
}
function anthropicPickTool(body) {
  if (MODE !== 'tool' || anthropicHasToolResult(body)) return null;
  const tools = body.tools || [];
  const bash = tools.find(t => t.name === 'Bash' || t.name === 'bash');
  if (bash) return { name: bash.name, input: { command: CMD, description: 'Run the requested command' } };
  return null;
}
function anthropicMessages(req, res, body, query) {
  const model = body.model || 'unknown';
  const inTok = approxTokens(JSON.stringify(body));
  const tool = anthropicPickTool(body);
  // structured output request? answer valid JSON
  let text = ANSWER;
  const fmt = body.output_config?.format || body.output_format;
  if (fmt && fmt.type === 'json_schema') text = JSON.stringify(fakeFromSchema(fmt.schema));
  const id = rid('msg_');
  const content = tool
    ? [{ type: 'tool_use', id: rid('toolu_'), name: tool.name, input: tool.input }]
    : [{ type: 'text', text }];
  const thinkBlock = { type: 'thinking', thinking: 'The user wants 27 + 15 = 42.', signature: 'c2lnLW1pbW8tdGVzdA==' };
  if (REASONING) content.unshift(thinkBlock);
  const stop = tool ? 'tool_use' : 'end_turn';
  const usage = { input_tokens: inTok, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 5 };
  const hdr = { 'request-id': rid('req_'), 'anthropic-organization-id': '00000000-0000-0000-0000-000000000000' };
  if (!body.stream || STYLE === 'json') {
    return sendJSON(res, 200, { id, type: 'message', role: 'assistant', model, content, stop_reason: stop, stop_sequence: null, usage }, hdr);
  }
  sseStart(res, hdr);
  const out = [];
  sse(res, 'message_start', { type: 'message_start', message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } }, out);
  if (PING) sse(res, 'ping', { type: 'ping' }, out);
  let idx = 0;
  if (REASONING) {
    sse(res, 'content_block_start', { type: 'content_block_start', index: idx, content_block: { type: 'thinking', thinking: '', signature: '' } }, out);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'thinking_delta', thinking: thinkBlock.thinking } }, out);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'signature_delta', signature: thinkBlock.signature } }, out);
    sse(res, 'content_block_stop', { type: 'content_block_stop', index: idx }, out);
    idx++;
  }
  if (tool) {
    const c = content[idx];
    sse(res, 'content_block_start', { type: 'content_block_start', index: idx, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } }, out);
    const js = JSON.stringify(c.input);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'input_json_delta', partial_json: '' } }, out);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'input_json_delta', partial_json: js.slice(0, 10) } }, out);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'input_json_delta', partial_json: js.slice(10) } }, out);
  } else {
    sse(res, 'content_block_start', { type: 'content_block_start', index: idx, content_block: { type: 'text', text: '' } }, out);
    sse(res, 'content_block_delta', { type: 'content_block_delta', index: idx, delta: { type: 'text_delta', text } }, out);
  }
  sse(res, 'content_block_stop', { type: 'content_block_stop', index: idx }, out);
  if (STYLE === 'truncate') { res.end(); return { status: 200, sse: out.join(''), truncated: true }; }
  sse(res, 'message_delta', { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } }, out);
  if (STYLE !== 'nostop') sse(res, 'message_stop', { type: 'message_stop' }, out);
  res.end();
  return { status: 200, sse: out.join('') };
}

function fakeFromSchema(s) {
  if (!s || typeof s !== 'object') return ANSWER;
  switch (s.type) {
    case 'object': {
      const o = {};
      for (const [k, v] of Object.entries(s.properties || {})) o[k] = fakeFromSchema(v);
      return o;
    }
    case 'array': return [];
    case 'string': return s.enum ? s.enum[0] : ANSWER;
    case 'number': case 'integer': return 42;
    case 'boolean': return false;
    default: return s.enum ? s.enum[0] : null;
  }
}

// ---------------------------------------------------------------- OpenAI Responses
function findShellTool(tools) {
  for (const t of tools || []) {
    const name = t.name || t.function?.name;
    const params = t.parameters || t.function?.parameters || {};
    const props = params.properties || {};
    if (t.type === 'local_shell') return { kind: 'local_shell' };
    if (!['shell', 'exec_command', 'shell_command', 'bash', 'container.exec', 'run_shell_command'].includes(name)) continue;
    let args;
    if (props.cmd) args = { cmd: CMD };
    else if (props.command?.type === 'array') args = { command: ['bash', '-lc', CMD] };
    else args = { command: CMD };
    if (props.description && !args.description) args.description = 'Run the requested command';
    if (props.workdir && false) args.workdir = '.';
    return { kind: 'function', name, args };
  }
  return null;
}
function responsesHasOutput(body) {
  const inp = Array.isArray(body.input) ? body.input : [];
  const last = inp.slice(-1)[0];
  return !!last && ['function_call_output', 'custom_tool_call_output', 'local_shell_call_output'].includes(last.type);
}
function responsesCreate(req, res, body) {
  const model = body.model || 'unknown';
  const created = now();
  const id = rid('resp_');
  const inTok = approxTokens(JSON.stringify(body));
  let item;
  const tool = MODE === 'tool' && !responsesHasOutput(body) ? findShellTool(body.tools) : null;
  if (tool && tool.kind === 'function') {
    item = { id: rid('fc_'), type: 'function_call', status: 'completed', call_id: rid('call_'), name: tool.name, arguments: JSON.stringify(tool.args) };
  } else {
    item = { id: rid('msg_'), type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: ANSWER, annotations: [], logprobs: [] }] };
  }
  const usage = { input_tokens: inTok, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: inTok + 5 };
  const base = {
    id, object: 'response', created_at: created, status: 'in_progress', background: false, error: null, incomplete_details: null,
    instructions: body.instructions ?? null, max_output_tokens: body.max_output_tokens ?? null, model, output: [],
    parallel_tool_calls: body.parallel_tool_calls ?? true, previous_response_id: body.previous_response_id ?? null,
    reasoning: body.reasoning ?? null, store: body.store ?? false, temperature: body.temperature ?? 1, text: body.text ?? { format: { type: 'text' } },
    tool_choice: body.tool_choice ?? 'auto', tools: body.tools ?? [], top_p: body.top_p ?? 1, truncation: 'disabled', usage: null, user: null, metadata: {},
  };
  const rsItem = { id: rid('rs_'), type: 'reasoning', summary: [{ type: 'summary_text', text: '**Adding numbers**\n\n27 + 15 = 42.' }], encrypted_content: 'ZW5jLW1pbW8tdGVzdA==' };
  const items = REASONING ? [rsItem, item] : [item];
  const done = { ...base, status: 'completed', completed_at: now(), output: items, usage };
  if (!body.stream || STYLE === 'json') return sendJSON(res, 200, { ...done, output_text: item.type === 'message' ? ANSWER : '' }, { 'x-request-id': rid('req_') });
  sseStart(res, { 'x-request-id': rid('req_') });
  const out = [];
  let n = 0;
  const ev = (type, data) => sse(res, type, { type, sequence_number: n++, ...data }, out);
  if (STYLE === 'thin') {
    // output_item.done events + response.completed whose response holds only id and status
    items.forEach((it, i) => ev('response.output_item.done', { output_index: i, item: it }));
    ev('response.completed', { response: { id, status: 'completed' } });
    res.end();
    return { status: 200, sse: out.join('') };
  }
  if (STYLE === 'minimal') {
    // only the item-done events and response.completed
    items.forEach((it, i) => ev('response.output_item.done', { output_index: i, item: it }));
    ev('response.completed', { response: done });
    res.end();
    return { status: 200, sse: out.join('') };
  }
  ev('response.created', { response: base });
  ev('response.in_progress', { response: base });
  let oi = 0;
  if (REASONING) {
    const st = rsItem.summary[0].text;
    ev('response.output_item.added', { output_index: oi, item: { id: rsItem.id, type: 'reasoning', summary: [] } });
    ev('response.reasoning_summary_part.added', { item_id: rsItem.id, output_index: oi, summary_index: 0, part: { type: 'summary_text', text: '' } });
    ev('response.reasoning_summary_text.delta', { item_id: rsItem.id, output_index: oi, summary_index: 0, delta: st });
    ev('response.reasoning_summary_text.done', { item_id: rsItem.id, output_index: oi, summary_index: 0, text: st });
    ev('response.reasoning_summary_part.done', { item_id: rsItem.id, output_index: oi, summary_index: 0, part: rsItem.summary[0] });
    ev('response.output_item.done', { output_index: oi, item: rsItem });
    oi++;
  }
  if (item.type === 'message') {
    ev('response.output_item.added', { output_index: oi, item: { ...item, status: 'in_progress', content: [] } });
    ev('response.content_part.added', { item_id: item.id, output_index: oi, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
    ev('response.output_text.delta', { item_id: item.id, output_index: oi, content_index: 0, delta: ANSWER, logprobs: [] });
    ev('response.output_text.done', { item_id: item.id, output_index: oi, content_index: 0, text: ANSWER, logprobs: [] });
    ev('response.content_part.done', { item_id: item.id, output_index: oi, content_index: 0, part: item.content[0] });
    ev('response.output_item.done', { output_index: oi, item });
  } else {
    ev('response.output_item.added', { output_index: oi, item: { ...item, status: 'in_progress', arguments: '' } });
    ev('response.function_call_arguments.delta', { item_id: item.id, output_index: oi, delta: item.arguments });
    ev('response.function_call_arguments.done', { item_id: item.id, output_index: oi, name: item.name, arguments: item.arguments });
    ev('response.output_item.done', { output_index: oi, item });
  }
  if (STYLE === 'truncate') { res.end(); return { status: 200, sse: out.join(''), truncated: true }; }
  ev('response.completed', { response: done });
  res.end();
  return { status: 200, sse: out.join('') };
}

// ---------------------------------------------------------------- OpenAI chat completions
function chatHasToolResult(body) { const m = (body.messages || []).slice(-1)[0]; return !!m && m.role === 'tool'; }
function chatCompletions(req, res, body) {
  const model = body.model || 'unknown';
  const id = rid('chatcmpl-');
  const created = now();
  const inTok = approxTokens(JSON.stringify(body));
  const tool = MODE === 'tool' && !chatHasToolResult(body) ? findShellTool(body.tools) : null;
  const usage = { prompt_tokens: inTok, completion_tokens: 5, total_tokens: inTok + 5 };
  const tc = tool ? { id: rid('call_'), type: 'function', function: { name: tool.name, arguments: JSON.stringify(tool.args) } } : null;
  if (!body.stream || STYLE === 'json') {
    const msg = tc ? { role: 'assistant', content: null, tool_calls: [tc] } : { role: 'assistant', content: ANSWER };
    return sendJSON(res, 200, { id, object: 'chat.completion', created, model, choices: [{ index: 0, message: msg, finish_reason: tc ? 'tool_calls' : 'stop', logprobs: null }], usage });
  }
  sseStart(res);
  const out = [];
  const chunk = (delta, finish, extra = {}) => sse(res, null, { id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }], ...extra }, out);
  chunk({ role: 'assistant', content: '' }, null);
  if (tc) {
    chunk({ tool_calls: [{ index: 0, id: tc.id, type: 'function', function: { name: tc.function.name, arguments: '' } }] }, null);
    chunk({ tool_calls: [{ index: 0, function: { arguments: tc.function.arguments } }] }, null);
    chunk({}, 'tool_calls');
  } else {
    chunk({ content: ANSWER }, null);
    chunk({}, 'stop');
  }
  if (body.stream_options?.include_usage) sse(res, null, { id, object: 'chat.completion.chunk', created, model, choices: [], usage }, out);
  sse(res, null, '[DONE]', out);
  res.end();
  return { status: 200, sse: out.join('') };
}

function models(res) {
  const ids = ['mimo-test', 'claude-sonnet-4-5', 'gpt-5'];
  const data = ids.map(id => ({ id, type: 'model', display_name: id, created_at: '2025-01-01T00:00:00Z', object: 'model', created: 1735689600, owned_by: 'mimo' }));
  return sendJSON(res, 200, { object: 'list', data, has_more: false, first_id: ids[0], last_id: ids[ids.length - 1] });
}

// ---------------------------------------------------------------- server
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', c => chunks.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    const n = ++seq;
    const dec = decode(raw, req.headers['content-encoding']);
    const text = dec ? dec.toString('utf8') : null;
    let body = null;
    if (text) { try { body = JSON.parse(text); } catch { body = text; } }
    const rec = { seq: n, time: new Date().toISOString(), method: req.method, path: req.url, headers: redact(req.headers), body_bytes: raw.length, decoded_bytes: dec ? dec.length : null, body };
    if (dec === null && raw.length) rec.body_base64 = raw.toString('base64');
    if (process.env.CAPTURE_RAW_DIR && raw.length) {
      // exact request bytes as received (before any content-encoding is undone)
      fs.mkdirSync(process.env.CAPTURE_RAW_DIR, { recursive: true });
      fs.writeFileSync(`${process.env.CAPTURE_RAW_DIR}/${String(n).padStart(3, '0')}.body`, raw);
    }
    const url = new URL(req.url, 'http://x');
    const p = url.pathname.replace(/\/+$/, '');
    const key = `${req.method} ${req.url}`;
    let result;
    try {
      const inj = ERRS.find(e => e.left > 0 && new RegExp(e.match).test(key));
      if (inj) {
        inj.left--;
        result = sendJSON(res, inj.status, inj.body || { type: 'error', error: { type: 'invalid_request_error', message: `injected ${inj.status}` } });
      } else if (req.method === 'POST' && /\/messages\/count_tokens$/.test(p)) {
        result = sendJSON(res, 200, { input_tokens: approxTokens(text) });
      } else if (req.method === 'POST' && /\/messages$/.test(p)) {
        result = anthropicMessages(req, res, body || {}, url.searchParams);
      } else if (req.method === 'POST' && /\/responses$/.test(p)) {
        result = responsesCreate(req, res, body || {});
      } else if (req.method === 'POST' && /\/chat\/completions$/.test(p)) {
        result = chatCompletions(req, res, body || {});
      } else if ((req.method === 'GET' || req.method === 'HEAD') && /\/models$/.test(p)) {
        result = models(res);
      } else if (req.method === 'GET' && p === '/api/version') {
        // Ollama-style probes (codex --oss --local-provider ollama)
        result = sendJSON(res, 200, { version: '0.13.4' });
      } else if (req.method === 'GET' && p === '/api/tags') {
        result = sendJSON(res, 200, { models: ['mimo-test', 'gpt-oss:20b'].map(n => ({ name: n, model: n, modified_at: '2025-01-01T00:00:00Z', size: 1, digest: '0'.repeat(64), details: { format: 'gguf', family: 'mimo', parameter_size: '1B', quantization_level: 'Q8_0' } })) });
      } else {
        result = sendJSON(res, 404, { type: 'error', error: { type: 'not_found_error', message: `no route ${req.method} ${p}` } });
      }
    } catch (e) {
      result = sendJSON(res, 500, { error: { message: String(e.stack || e) } });
    }
    rec.response = result;
    log(rec);
    process.stderr.write(`[capture] #${n} ${req.method} ${req.url} -> ${result.status}\n`);
  });
});
server.on('upgrade', (req, socket) => {
  const n = ++seq;
  log({ seq: n, time: new Date().toISOString(), method: req.method, path: req.url, headers: redact(req.headers), upgrade: true, response: { status: 404 } });
  process.stderr.write(`[capture] #${n} UPGRADE ${req.method} ${req.url} -> 404\n`);
  socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
});
server.listen(PORT, '127.0.0.1', () => process.stderr.write(`[capture] listening on 127.0.0.1:${PORT} mode=${MODE} log=${LOG}\n`));

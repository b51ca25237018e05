#!/usr/bin/env python3
# Writes the seeds of tests/fuzz/request_parsers_fuzz.cc's /v1/messages (byte 0 = 6),
# count_tokens (7) and /v1/responses (8) cases into tests/fuzz/corpus/request_parsers/: the
# recorded agent requests (tests/data/agents) with their strings shortened and tools dropped to fit
# fuzz.sh's -max_len (16384), and hand-written bodies for the paths they do not take. Thinking
# blocks and encrypted reasoning items are signed as ApiServer::Sign does, under the harness's
# fixed key, so the fuzzer starts from signatures that verify (the item ids and response ids are
# those of the harness's ResponseStore). Run: python3 tests/fuzz/request_parsers_seeds.py
import base64, copy, hashlib, hmac, json, os
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
OUT = ROOT + '/tests/fuzz/corpus/request_parsers'
KEY = b'mimo-fuzz-signing-key'  # request_parsers_fuzz.cc's kSigningKey
LIMIT = 12000

def sign(kind, text):
    return base64.b64encode(hmac.new(KEY, kind.encode() + b'\0' + text.encode(), hashlib.sha256).digest()).decode()

def trim(j, n=160):
    if isinstance(j, dict): return {k: trim(v, n) for k, v in j.items()}
    if isinstance(j, list): return [trim(v, n) for v in j]
    if isinstance(j, str) and len(j) > n: return j[:n]
    return j

def load(name):
    return json.load(open(f'{ROOT}/tests/data/agents/{name}.json'))['body']

def dump(j):
    return json.dumps(j, separators=(',', ':'), ensure_ascii=False).encode()

def write(name, which, body, n=160):
    body = trim(body, n)
    # Fewer tools until it fits (the recorded ones carry long schemas).
    while len(dump(body)) > LIMIT and len(body.get('tools', [])) > 3:
        body['tools'].pop(-2 if body['tools'][-1].get('type') in ('web_search', 'tool_search') else -1)
    data = bytes([which]) + dump(body)
    assert len(data) <= 16384, (name, len(data))
    open(f'{OUT}/{name}.bin', 'wb').write(data)
    print(name, len(data), 'bytes,', len(body.get('tools', [])), 'tools')

# /v1/messages: Claude Code's first request.
b = load('claude-code-01-first'); b['model'] = 'mimo-v2-nano'; b['max_tokens'] = 1024
write('messages_claude_code', 6, b)
# count_tokens: the same body without the sampling fields.
c = copy.deepcopy(b)
for k in ('max_tokens', 'stream', 'metadata', 'context_management'): c.pop(k, None)
write('count_tokens_claude_code', 7, c)
# The second request, its thinking block signed by this server (kept in the prompt).
b = load('claude-code-02-tool-result-with-thinking'); b['model'] = 'mimo-v2-nano'; b['max_tokens'] = 1024
for m in b['messages']:
    if m['role'] == 'assistant':
        for blk in m['content']:
            if blk.get('type') == 'thinking':
                blk['signature'] = sign('anthropic-thinking', blk['thinking'])
write('messages_thinking_signed', 6, b)
# display "omitted": an empty thinking block carrying "<hmac>.<base64 text>", then a prefill, a
# tool_choice, thinking with a budget, stop sequences and output_config.format.
b = {'model': 'mimo-v2-nano', 'max_tokens': 512, 'system': [{'type': 'text', 'text': 'You are terse.', 'cache_control': {'type': 'ephemeral'}}],
     'messages': [{'role': 'user', 'content': 'What is 27 + 15?'},
                  {'role': 'assistant', 'content': [{'type': 'thinking', 'thinking': '', 'signature': sign('anthropic-thinking', 'Add them: 42.') + '.' + base64.b64encode(b'Add them: 42.').decode()},
                                                    {'type': 'redacted_thinking', 'data': 'opaque'},
                                                    {'type': 'text', 'text': '42'}]},
                  {'role': 'user', 'content': [{'type': 'text', 'text': 'As JSON, please.'}]},
                  {'role': 'assistant', 'content': '{"answer":'}],
     'thinking': {'type': 'enabled', 'budget_tokens': 128, 'display': 'omitted'},
     'stop_sequences': ['}'], 'temperature': 0.2, 'top_p': 0.9, 'top_k': 40,
     'tools': [{'name': 'calc', 'description': 'Adds.', 'input_schema': {'type': 'object', 'properties': {'a': {'type': 'integer'}, 'b': {'type': 'integer'}}, 'required': ['a', 'b']}, 'strict': True},
               {'type': 'web_search_20250305', 'name': 'web_search', 'max_uses': 3}],
     'tool_choice': {'type': 'auto', 'disable_parallel_tool_use': True},
     'output_config': {'format': {'type': 'json_schema', 'schema': {'type': 'object', 'properties': {'answer': {'type': 'integer'}}, 'required': ['answer'], 'additionalProperties': False}}}}
write('messages_omitted_prefill', 6, b)

# /v1/responses: Codex's first request, its second (another provider's reasoning item, plus one
# this server signed), the custom-tool one, opencode's (items without a type).
b = load('codex-01-first'); b['model'] = 'mimo-v2-nano'; b['max_output_tokens'] = 1024
write('responses_codex', 8, b)
b = load('codex-02-tool-output-with-reasoning'); b['model'] = 'mimo-v2-nano'; b['max_output_tokens'] = 1024
i = next(k for k, it in enumerate(b['input']) if it.get('type') == 'reasoning')
mine = {'type': 'reasoning', 'id': 'rs_mimo', 'summary': [], 'content': None,
        'encrypted_content': 'mimo1.' + base64.b64encode('Run it with exec_command.'.encode()).decode() + '.' + sign('responses-reasoning', 'Run it with exec_command.')}
b['input'].insert(i, mine)
write('responses_codex_reasoning', 8, b)
b = load('codex-03-gpt-5.5-custom-tool'); b.pop('model'); b['max_output_tokens'] = 1024
write('responses_custom_tool', 8, b, n=400)
b = load('opencode-03-responses-tool-result'); b['model'] = 'mimo-v2-nano'; b['max_output_tokens'] = 1024
write('responses_opencode', 8, b)
# Continuing stored responses: previous_response_id, and the AI SDK's item_reference items.
b = {'model': 'mimo-v2-nano', 'previous_response_id': 'resp_fuzz_2', 'instructions': 'Answer briefly.',
     'input': [{'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'And the size?'}]}],
     'reasoning': {'effort': 'low', 'summary': 'auto'}, 'store': True, 'stream': True, 'temperature': 0.7, 'top_p': 0.95,
     'text': {'format': {'type': 'json_schema', 'name': 'size', 'strict': True, 'schema': {'type': 'object', 'properties': {'bytes': {'type': 'integer'}}, 'required': ['bytes']}}},
     'metadata': {'run': 'fuzz'}, 'user': 'u1'}
write('responses_previous', 8, b)
b = {'model': 'mimo-v2-nano', 'input': [
        {'role': 'user', 'content': 'List the files.'},
        {'type': 'item_reference', 'id': 'rs_fuzz_1'},
        {'type': 'item_reference', 'id': 'fc_fuzz_1'},
        {'type': 'function_call_output', 'call_id': 'call_fuzz_1', 'output': 'a.txt'},
        {'type': 'item_reference', 'id': 'msg_fuzz_2'},
        {'type': 'custom_tool_call', 'call_id': 'call_p', 'name': 'apply_patch', 'input': '*** Begin Patch\n*** End Patch'},
        {'type': 'custom_tool_call_output', 'call_id': 'call_p', 'output': [{'type': 'input_text', 'text': 'Done'}]},
        {'role': 'developer', 'content': 'Be brief.'},
        {'type': 'message', 'role': 'user', 'content': 'Now delete it.'}],
     'tools': [{'type': 'function', 'name': 'shell', 'parameters': {'type': 'object', 'properties': {'command': {'type': 'array', 'items': {'type': 'string'}}}}},
               {'type': 'namespace', 'name': 'fs', 'tools': [{'type': 'function', 'name': 'rm', 'parameters': {'type': 'object', 'properties': {'path': {'type': 'string'}}}}]},
               {'type': 'custom', 'name': 'apply_patch', 'description': 'Patch files.', 'format': {'type': 'grammar', 'syntax': 'lark', 'definition': 'start: /.+/'}},
               {'type': 'web_search'}],
     'tool_choice': {'type': 'allowed_tools', 'mode': 'required', 'tools': [{'type': 'function', 'name': 'rm'}, {'type': 'function', 'name': 'shell'}]},
     'parallel_tool_calls': False, 'include': ['reasoning.encrypted_content'], 'max_output_tokens': 256}
write('responses_item_reference', 8, b)

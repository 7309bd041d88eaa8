// SPDX-License-Identifier: MIT
// The official SDKs against dsv4-api (tests/e2e/test_api.py sdk): prints one JSON object with
// the text each call produced. usage: node api-sdk.mjs BASE_URL MODEL MESSAGE
import { createRequire } from 'node:module';
import path from 'node:path';

// ES modules ignore NODE_PATH: resolve the packages from tools/npm/node_modules (NODE_PATH)
const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const OpenAI = require('openai').OpenAI;
const Anthropic = require('@anthropic-ai/sdk').Anthropic;

const [base, model, message] = process.argv.slice(2);
const oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const ant = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
const messages = [{ role: 'user', content: message }];
const out = {};

const r = await oai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
out.chat = r.choices[0].message.content;

const s = await oai.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0,
                                             stream: true, stream_options: { include_usage: true } });
out.chat_stream = '';
for await (const chunk of s) {
  if (chunk.choices.length) out.chat_stream += chunk.choices[0].delta.content ?? '';
  else out.usage = chunk.usage;
}

const c = await oai.completions.create({ model, prompt: 'The sky', max_tokens: 12, temperature: 0 });
out.completion = c.choices[0].text;

const m = await ant.messages.create({ model, messages, max_tokens: 24, temperature: 0 });
out.messages = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

const ms = ant.messages.stream({ model, messages, max_tokens: 24, temperature: 0 });
out.messages_stream = '';
ms.on('text', (t) => { out.messages_stream += t; });
await ms.finalMessage();

// a tool round trip as an agent sends it: the call, its result, tools declared
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: {
  type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const t = await oai.chat.completions.create({ model, max_tokens: 8, temperature: 0, tools,
  messages: [...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18C' }] });
out.tools_finish = t.choices[0].finish_reason;

try {
  await oai.chat.completions.create({ model, messages, temperature: 9 });
} catch (e) {
  out.bad_status = e.status;
  out.bad_param = e.param;
}
process.stdout.write(JSON.stringify(out) + '\n');

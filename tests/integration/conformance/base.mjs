// The conformance matrix's basic features: text, system prompts, images,
// tools and their results, sampling, the output cap, streaming and cache
// usage (see conformance.test.mjs for how each cell is judged).

import { deep, keyValue, when, PNG_B64 } from './_lib.mjs';

const PNG_URL = `data:image/png;base64,${PNG_B64}`;
const HTTPS_IMAGE = 'https://example.com/cat.png';
const SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

const userParts = (nonce, ...parts) => [{ role: 'user', content: [{ type: 'text', text: `look ${nonce}` }, ...parts] }];
const respParts = (nonce, ...parts) =>
  [{ role: 'user', content: [{ type: 'input_text', text: `look ${nonce}` }, ...parts] }];

const TOOLS = {
  openai: [{ type: 'function', function: { name: 'get_weather', description: 'the weather', parameters: SCHEMA } }],
  anthropic: [{ name: 'get_weather', description: 'the weather', input_schema: SCHEMA }],
  responses: [{ type: 'function', name: 'get_weather', description: 'the weather', parameters: SCHEMA }],
};

const toolEvidence = {
  openai: when('tools[].function', (u) => u.tools?.[0]?.function?.name === 'get_weather'),
  'openai-responses': when('tools[] (function)', (u) => u.tools?.[0]?.type === 'function' && u.tools[0].name === 'get_weather'),
  anthropic: when('tools[].input_schema', (u) => u.tools?.[0]?.name === 'get_weather' && u.tools[0].input_schema),
  gemini: when('functionDeclarations', (u) => keyValue(u, 'functionDeclarations')?.[0]?.name === 'get_weather'),
  bedrock: when('toolConfig.tools[].toolSpec', (u) => u.toolConfig?.tools?.[0]?.toolSpec?.name === 'get_weather'),
  ollama: when('tools[].function', (u) => u.tools?.[0]?.function?.name === 'get_weather'),
};

/** The names of the tool calls in an answer, in order. */
function toolCalls(client, j) {
  if (client === 'openai') return (j?.choices?.[0]?.message?.tool_calls ?? []).map((c) => c.function?.name);
  if (client === 'anthropic') return (j?.content ?? []).filter((c) => c.type === 'tool_use').map((c) => c.name);
  return (j?.output ?? []).filter((o) => o.type === 'function_call').map((o) => o.name);
}

// A sampling parameter: the same name in the three client formats.
function sampling(id, label, field, value, names) {
  return {
    id,
    label,
    request: {
      openai: (b) => ({ ...b, [field]: value }),
      anthropic: (b) => ({ ...b, [field]: value }),
      responses: (b) => ({ ...b, [field]: value }),
    },
    evidence: {
      openai: when(field, (u) => u[field] === value),
      'openai-responses': when(field, (u) => u[field] === value),
      anthropic: when(field, (u) => u[field] === value),
      gemini: when(`generationConfig.${names.gemini}`, (u) => u.generationConfig?.[names.gemini] === value),
      bedrock: when(`inferenceConfig.${names.bedrock}`, (u) => u.inferenceConfig?.[names.bedrock] === value),
      ollama: when(`options.${names.ollama}`, (u) => u.options?.[names.ollama] === value),
    },
  };
}

export default [
  {
    id: 'text',
    label: 'text message',
    request: { openai: (b) => b, anthropic: (b) => b, responses: (b) => b },
    // The client's text, whole, as one string of the provider's body.
    evidence: Object.fromEntries(['openai', 'openai-responses', 'anthropic', 'gemini', 'bedrock', 'ollama']
      .map((d) => [d, (u, p, nonce) => (deep(u, (o) => Object.values(o).includes(`hi ${nonce}`)) ? 'text' : null)])),
  },
  {
    id: 'system',
    label: 'system prompt',
    request: {
      openai: (b) => ({ ...b, messages: [{ role: 'system', content: 'be brief' }, ...b.messages] }),
      anthropic: (b) => ({ ...b, system: 'be brief' }),
      responses: (b) => ({ ...b, instructions: 'be brief' }),
    },
    evidence: {
      openai: when('system message', (u) => ['system', 'developer'].includes(u.messages?.[0]?.role)),
      'openai-responses': when('instructions', (u) => typeof u.instructions === 'string'),
      anthropic: when('system', (u) => u.system !== undefined),
      gemini: when('systemInstruction', (u) => u.systemInstruction !== undefined),
      bedrock: when('system', (u) => Array.isArray(u.system) && u.system.length > 0),
      ollama: when('system message', (u) => u.messages?.[0]?.role === 'system'),
    },
  },
  {
    id: 'image.base64',
    label: 'image: base64 (PNG)',
    request: {
      openai: (b, n) => ({ ...b, messages: userParts(n, { type: 'image_url', image_url: { url: PNG_URL } }) }),
      anthropic: (b, n) => ({
        ...b, messages: userParts(n, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_B64 } }),
      }),
      responses: (b, n) => ({ ...b, input: respParts(n, { type: 'input_image', image_url: PNG_URL }) }),
    },
    evidence: {
      openai: when('image_url (data URL)', (u) => deep(u, (o) => o.type === 'image_url' && o.image_url?.url === PNG_URL)),
      'openai-responses': when('input_image (data URL)', (u) => deep(u, (o) => o.type === 'input_image' && o.image_url === PNG_URL)),
      anthropic: when('image (base64 source)', (u) => deep(u, (o) => o.type === 'image' && o.source?.data === PNG_B64)),
      gemini: when('inlineData image/png', (u) => deep(u, (o) => o.inlineData?.mimeType === 'image/png' && o.inlineData.data === PNG_B64)),
      bedrock: when('image (png bytes)', (u) => deep(u, (o) => o.image?.format === 'png' && o.image.source?.bytes === PNG_B64)),
      ollama: when('images[]', (u) => deep(u, (o) => Array.isArray(o.images) && o.images[0] === PNG_B64)),
    },
  },
  {
    id: 'image.url',
    label: 'image: https URL',
    request: {
      openai: (b, n) => ({ ...b, messages: userParts(n, { type: 'image_url', image_url: { url: HTTPS_IMAGE } }) }),
      anthropic: (b, n) => ({ ...b, messages: userParts(n, { type: 'image', source: { type: 'url', url: HTTPS_IMAGE } }) }),
      responses: (b, n) => ({ ...b, input: respParts(n, { type: 'input_image', image_url: HTTPS_IMAGE }) }),
    },
    evidence: {
      openai: when('image_url (URL)', (u) => deep(u, (o) => o.type === 'image_url' && o.image_url?.url === HTTPS_IMAGE)),
      'openai-responses': when('input_image (URL)', (u) => deep(u, (o) => o.type === 'input_image' && o.image_url === HTTPS_IMAGE)),
      anthropic: when('image (url source)', (u) => deep(u, (o) => o.type === 'image' && o.source?.url === HTTPS_IMAGE)),
    },
  },
  {
    id: 'tools',
    label: 'function tools',
    request: {
      openai: (b) => ({ ...b, tools: TOOLS.openai }),
      anthropic: (b) => ({ ...b, tools: TOOLS.anthropic }),
      responses: (b) => ({ ...b, tools: TOOLS.responses }),
    },
    evidence: toolEvidence,
    answer: (client, driver, j) => (toolCalls(client, j).join() === 'get_weather' ? null
      : `not one get_weather call: ${JSON.stringify(j).slice(0, 300)}`),
  },
  {
    id: 'answer.parallel_calls',
    label: 'answer: two tool calls in one turn',
    kind: 'answer',
    selector: (sel) => `${sel}#parallel=2`,
    request: {
      openai: (b) => ({ ...b, tools: [...TOOLS.openai, { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } }] }),
      anthropic: (b) => ({ ...b, tools: [...TOOLS.anthropic, { name: 'get_time', input_schema: { type: 'object' } }] }),
      responses: (b) => ({ ...b, tools: [...TOOLS.responses, { type: 'function', name: 'get_time', parameters: { type: 'object' } }] }),
    },
    mapped: 'both calls, in order',
    answer: (client, driver, j) => (toolCalls(client, j).join() === 'get_weather,get_time' ? null
      : `calls ${toolCalls(client, j)}: ${JSON.stringify(j).slice(0, 300)}`),
  },
  {
    id: 'answer.reasoning',
    label: 'answer: reasoning text',
    kind: 'answer',
    selector: (sel) => `${sel}#reasoning=3`,
    request: { openai: (b) => b, anthropic: (b) => b, responses: (b) => b },
    mapped: 'reasoning in the client\'s form',
    answer: (client, driver, j) => {
      const r = client === 'openai' ? j?.choices?.[0]?.message?.reasoning_content
        : client === 'anthropic' ? j?.content?.find((c) => c.type === 'thinking')?.thinking
          : deep(j?.output, (o) => o.type === 'summary_text')?.text;
      return typeof r === 'string' && r.length > 0 ? null : `no reasoning: ${JSON.stringify(j).slice(0, 300)}`;
    },
  },
  {
    id: 'answer.max_tokens_stop',
    label: 'answer: cut by the output cap (stop reason)',
    kind: 'answer',
    selector: (sel) => `${sel}#chunks=40`,
    request: {
      openai: (b) => ({ ...b, max_tokens: 16 }),
      anthropic: (b) => ({ ...b, max_tokens: 16 }),
      responses: (b) => ({ ...b, max_output_tokens: 16 }),
    },
    mapped: 'length / max_tokens / incomplete',
    answer: (client, driver, j) => {
      const why = client === 'openai' ? j?.choices?.[0]?.finish_reason
        : client === 'anthropic' ? j?.stop_reason : j?.incomplete_details?.reason;
      const want = { openai: 'length', anthropic: 'max_tokens', responses: 'max_output_tokens' }[client];
      return why === want ? null : `stop reason ${why}, not ${want}`;
    },
  },
  {
    id: 'tools.strict',
    label: 'function tools with strict schemas',
    request: {
      openai: (b) => ({ ...b, tools: [{ ...TOOLS.openai[0], function: { ...TOOLS.openai[0].function, strict: true } }] }),
      anthropic: (b) => ({ ...b, tools: [{ ...TOOLS.anthropic[0], strict: true }] }),
      responses: (b) => ({ ...b, tools: [{ ...TOOLS.responses[0], strict: true }] }),
    },
    evidence: {
      openai: when('function.strict', (u) => u.tools?.[0]?.function?.strict === true),
      'openai-responses': when('strict', (u) => u.tools?.[0]?.strict === true),
      anthropic: when('strict', (u) => u.tools?.[0]?.strict === true),
      bedrock: when('toolSpec.strict', (u) => deep(u.toolConfig, (o) => o.strict === true)),
      gemini: (u) => (deep(u, (o) => o.strict !== undefined) ? null : 'omitted: no such field (the schema is still sent)'),
      ollama: (u) => (deep(u, (o) => o.strict !== undefined) ? null : 'omitted: no such field (the schema is still sent)'),
    },
  },
  {
    id: 'cache_control',
    label: 'prompt-cache marker (cache_control)',
    request: {
      anthropic: (b, n) => ({
        ...b, messages: [{ role: 'user', content: [{ type: 'text', text: `long context ${n}`, cache_control: { type: 'ephemeral' } }] }],
      }),
    },
    evidence: {
      anthropic: when('cache_control', (u) => deep(u, (o) => o.cache_control?.type === 'ephemeral')),
      bedrock: when('cachePoint', (u) => deep(u, (o) => o.cachePoint !== undefined)),
      openai: (u) => (JSON.stringify(u).includes('cache_control') ? null : 'omitted: caching is automatic'),
      'openai-responses': (u) => (JSON.stringify(u).includes('cache_control') ? null : 'omitted: caching is automatic'),
      gemini: (u) => (JSON.stringify(u).includes('cache_control') ? null : 'omitted: caching is automatic'),
      ollama: (u) => (JSON.stringify(u).includes('cache_control') ? null : 'omitted: no such field'),
    },
  },
  {
    id: 'tool_result',
    label: 'a tool call and its result in the history',
    request: {
      openai: (b, n) => ({
        ...b,
        tools: TOOLS.openai,
        messages: [
          { role: 'user', content: `weather? ${n}` },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
      }),
      anthropic: (b, n) => ({
        ...b,
        tools: TOOLS.anthropic,
        messages: [
          { role: 'user', content: `weather? ${n}` },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
        ],
      }),
      responses: (b, n) => ({
        ...b,
        tools: TOOLS.responses,
        input: [
          { role: 'user', content: `weather? ${n}` },
          { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        ],
      }),
    },
    evidence: {
      openai: when('tool message', (u) => u.messages?.some((m) => m.role === 'tool' && m.content === 'sunny')),
      'openai-responses': when('function_call_output', (u) => deep(u, (o) => o.type === 'function_call_output' && o.output === 'sunny')),
      anthropic: when('tool_result', (u) => deep(u, (o) => o.type === 'tool_result')),
      gemini: when('functionResponse', (u) => deep(u, (o) => o.functionResponse?.name === 'get_weather')),
      bedrock: when('toolResult', (u) => deep(u, (o) => o.toolResult !== undefined)),
      ollama: when('tool message', (u) => u.messages?.some((m) => m.role === 'tool')),
    },
    // After a tool result a model answers with text.
    answer: (client, driver, j) => {
      const text = client === 'openai' ? j?.choices?.[0]?.message?.content
        : client === 'anthropic' ? j?.content?.find((c) => c.type === 'text')?.text
          : deep(j?.output, (o) => o.type === 'output_text')?.text;
      return typeof text === 'string' && text.length > 0 ? null : `no text after the tool result: ${JSON.stringify(j).slice(0, 200)}`;
    },
  },
  sampling('temperature', 'temperature', 'temperature', 0.3, { gemini: 'temperature', bedrock: 'temperature', ollama: 'temperature' }),
  sampling('top_p', 'top_p', 'top_p', 0.9, { gemini: 'topP', bedrock: 'topP', ollama: 'top_p' }),
  {
    id: 'max_tokens',
    label: 'output cap (max_tokens / max_output_tokens)',
    request: { openai: (b) => b, anthropic: (b) => b, responses: (b) => b },
    evidence: {
      openai: when('max_tokens', (u) => (u.max_completion_tokens ?? u.max_tokens) === 64),
      'openai-responses': when('max_output_tokens', (u) => u.max_output_tokens === 64),
      anthropic: when('max_tokens', (u) => u.max_tokens === 64),
      gemini: when('generationConfig.maxOutputTokens', (u) => u.generationConfig?.maxOutputTokens === 64),
      bedrock: when('inferenceConfig.maxTokens', (u) => u.inferenceConfig?.maxTokens === 64),
      ollama: when('options.num_predict', (u) => u.options?.num_predict === 64),
    },
  },
  {
    id: 'stream',
    label: 'streaming (SSE in the client\'s event shapes, to its end)',
    request: {
      openai: (b) => ({ ...b, stream: true }),
      anthropic: (b) => ({ ...b, stream: true }),
      responses: (b) => ({ ...b, stream: true }),
    },
    evidence: {
      openai: when('stream', (u) => u.stream === true),
      'openai-responses': when('stream', (u) => u.stream === true),
      anthropic: when('stream', (u) => u.stream === true),
      gemini: (u, p) => (p.includes(':streamGenerateContent') ? 'streamGenerateContent' : null),
      bedrock: (u, p) => (p.includes('/converse-stream') ? 'converse-stream' : null),
      ollama: when('stream', (u) => u.stream === true),
    },
    answer: (client, driver, text) => {
      const end = { openai: 'data: [DONE]', anthropic: 'event: message_stop', responses: 'event: response.completed' }[client];
      return typeof text === 'string' && text.includes(end) ? null : `the stream does not end with ${end}`;
    },
  },
  {
    id: 'usage.cache_read',
    label: 'answer: cache reads reported in the client\'s usage',
    kind: 'answer',
    selector: (sel) => `${sel}#cache_read=2`,
    request: { openai: (b) => b, anthropic: (b) => b, responses: (b) => b },
    skip: { ollama: 'Ollama reports no cache usage' },
    mapped: 'cache reads reported',
    answer: (client, driver, j) => {
      const got = client === 'openai' ? j?.usage?.prompt_tokens_details?.cached_tokens
        : client === 'anthropic' ? j?.usage?.cache_read_input_tokens
          : j?.usage?.input_tokens_details?.cached_tokens;
      return got === 2 ? null : `cache reads ${got} in ${JSON.stringify(j?.usage)}`;
    },
  },
];

// Conformance matrix entries (issue 21; docs/canonical.md): structured
// output, reasoning, tool choice, parallel tool use, stop, seed, penalties,
// top_k and server tools. Each entry says how every client format that can
// express the feature sends it, and where to find it in the body each
// driver sent upstream (null: it is not there).

const SCHEMA = {
  type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false,
};
const PARAMS = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

// One function tool, in each client format.
const tools = {
  openai: [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: PARAMS } }],
  anthropic: [{ name: 'get_weather', description: 'weather', input_schema: PARAMS }],
  responses: [{ type: 'function', name: 'get_weather', description: 'weather', parameters: PARAMS }],
};

const gen = (up) => up.generationConfig ?? {};
const fcc = (up) => up.toolConfig?.functionCallingConfig ?? {};
const tc = (up) => up.toolConfig?.toolChoice ?? {};
const opts = (up) => up.options ?? {};
const amrf = (up) => up.additionalModelRequestFields ?? {};
const has = (v) => v !== undefined && v !== null;

/** The structured-output form of each driver's upstream body. */
const schemaForm = {
  openai: (up) => (up.response_format?.type === 'json_schema' ? 'response_format json_schema' : null),
  'openai-responses': (up) => (up.text?.format?.type === 'json_schema' ? 'text.format json_schema' : null),
  anthropic: (up) => (up.output_config?.format?.type === 'json_schema' ? 'output_config.format json_schema' : null),
  gemini: (up) => (gen(up).responseJsonSchema ? 'responseJsonSchema' : null),
  bedrock: (up) => (typeof up.outputConfig?.textFormat?.structure?.jsonSchema?.schema === 'string'
    ? 'outputConfig.textFormat json_schema' : null),
  ollama: (up) => (typeof up.format === 'object' && up.format ? 'format (schema)' : null),
};

/** The reasoning form of each driver's upstream body. */
const reasoningForm = {
  openai: (up) => (up.reasoning_effort ? `reasoning_effort ${up.reasoning_effort}` : null),
  'openai-responses': (up) => (up.reasoning?.effort ? `reasoning.effort ${up.reasoning.effort}` : null),
  anthropic: (up) => (up.thinking?.budget_tokens ? `thinking.budget_tokens ${up.thinking.budget_tokens}`
    : up.output_config?.effort ? `output_config.effort ${up.output_config.effort}` : null),
  gemini: (up) => {
    const t = gen(up).thinkingConfig ?? {};
    if (has(t.thinkingLevel)) return `thinkingLevel ${t.thinkingLevel}`;
    return has(t.thinkingBudget) ? `thinkingBudget ${t.thinkingBudget}` : null;
  },
  bedrock: (up) => (amrf(up).thinking?.budget_tokens ? `thinking.budget_tokens ${amrf(up).thinking.budget_tokens}` : null),
  ollama: (up) => (has(up.think) && up.think !== false ? `think ${up.think}` : null),
};

const withTools = (choice) => ({
  openai: (base) => ({ ...base, tools: tools.openai, ...choice.openai }),
  anthropic: (base) => ({ ...base, tools: tools.anthropic, ...choice.anthropic }),
  responses: (base) => ({ ...base, tools: tools.responses, ...choice.responses }),
});

/** Checks a structured answer: the text must be JSON with the required key. */
function jsonAnswer(clientFormat, driver, json) {
  let text;
  if (clientFormat === 'openai') text = json.choices?.[0]?.message?.content;
  else if (clientFormat === 'anthropic') text = (json.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
  else text = (json.output ?? []).flatMap((o) => o.content ?? []).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
  try {
    const v = JSON.parse(text);
    return v && typeof v === 'object' ? null : `answer is not a JSON object: ${text}`;
  } catch {
    return `answer is not JSON: ${String(text).slice(0, 80)}`;
  }
}

export default [
  {
    id: 'format.json_schema',
    label: 'structured output: JSON schema',
    request: {
      openai: (base) => ({ ...base, response_format: { type: 'json_schema', json_schema: { name: 'city', schema: SCHEMA, strict: true } } }),
      anthropic: (base) => ({ ...base, output_config: { format: { type: 'json_schema', schema: SCHEMA } } }),
      responses: (base) => ({ ...base, text: { format: { type: 'json_schema', name: 'city', schema: SCHEMA, strict: true } } }),
    },
    evidence: schemaForm,
    answer: jsonAnswer,
  },
  {
    id: 'format.json_object',
    label: 'structured output: JSON object (no schema)',
    request: {
      openai: (base) => ({ ...base, response_format: { type: 'json_object' } }),
      responses: (base) => ({ ...base, text: { format: { type: 'json_object' } } }),
    },
    evidence: {
      openai: (up) => (up.response_format?.type === 'json_object' ? 'response_format json_object' : null),
      'openai-responses': (up) => (up.text?.format?.type === 'json_object' ? 'text.format json_object' : null),
      anthropic: () => null,
      gemini: (up) => (gen(up).responseMimeType === 'application/json' && !gen(up).responseJsonSchema ? 'responseMimeType application/json' : null),
      bedrock: () => null,
      ollama: (up) => (up.format === 'json' ? 'format json' : null),
    },
  },
  {
    id: 'reasoning.effort',
    label: 'reasoning: effort (medium)',
    request: {
      openai: (base) => ({ ...base, reasoning_effort: 'medium', max_tokens: undefined }),
      anthropic: (base) => ({ ...base, max_tokens: 16384, output_config: { effort: 'medium' } }),
      responses: (base) => ({ ...base, reasoning: { effort: 'medium' } }),
    },
    evidence: reasoningForm,
  },
  {
    id: 'reasoning.budget',
    label: 'reasoning: token budget (2048)',
    request: {
      anthropic: (base) => ({ ...base, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: 2048 } }),
    },
    evidence: reasoningForm,
  },
  {
    id: 'tool_choice.none',
    label: 'tool choice: none',
    request: withTools({ openai: { tool_choice: 'none' }, anthropic: { tool_choice: { type: 'none' } }, responses: { tool_choice: 'none' } }),
    evidence: {
      openai: (up) => (up.tool_choice === 'none' ? 'tool_choice none' : null),
      'openai-responses': (up) => (up.tool_choice === 'none' ? 'tool_choice none' : null),
      anthropic: (up) => (up.tool_choice?.type === 'none' ? 'tool_choice.type none' : null),
      gemini: (up) => (fcc(up).mode === 'NONE' ? 'functionCallingConfig.mode NONE' : null),
      bedrock: () => null,
      ollama: (up) => (!up.tools?.length ? 'no tools offered' : null),
    },
  },
  {
    id: 'tool_choice.required',
    label: 'tool choice: required / any',
    request: withTools({ openai: { tool_choice: 'required' }, anthropic: { tool_choice: { type: 'any' } }, responses: { tool_choice: 'required' } }),
    evidence: {
      openai: (up) => (up.tool_choice === 'required' ? 'tool_choice required' : null),
      'openai-responses': (up) => (up.tool_choice === 'required' ? 'tool_choice required' : null),
      anthropic: (up) => (up.tool_choice?.type === 'any' ? 'tool_choice.type any' : null),
      gemini: (up) => (fcc(up).mode === 'ANY' && !fcc(up).allowedFunctionNames ? 'functionCallingConfig.mode ANY' : null),
      bedrock: (up) => (tc(up).any ? 'toolChoice.any' : null),
      ollama: () => null,
    },
  },
  {
    id: 'tool_choice.named',
    label: 'tool choice: a named tool',
    request: withTools({
      openai: { tool_choice: { type: 'function', function: { name: 'get_weather' } } },
      anthropic: { tool_choice: { type: 'tool', name: 'get_weather' } },
      responses: { tool_choice: { type: 'function', name: 'get_weather' } },
    }),
    evidence: {
      openai: (up) => (up.tool_choice?.function?.name === 'get_weather' ? 'tool_choice.function.name' : null),
      'openai-responses': (up) => (up.tool_choice?.name === 'get_weather' ? 'tool_choice.name' : null),
      anthropic: (up) => (up.tool_choice?.type === 'tool' && up.tool_choice.name === 'get_weather' ? 'tool_choice.type tool' : null),
      gemini: (up) => (fcc(up).allowedFunctionNames?.includes('get_weather') ? 'mode ANY + allowedFunctionNames' : null),
      bedrock: (up) => (tc(up).tool?.name === 'get_weather' ? 'toolChoice.tool.name' : null),
      ollama: () => null,
    },
  },
  {
    id: 'parallel_tool_calls.false',
    label: 'parallel tool use off',
    request: withTools({
      openai: { parallel_tool_calls: false },
      anthropic: { tool_choice: { type: 'auto', disable_parallel_tool_use: true } },
      responses: { parallel_tool_calls: false },
    }),
    evidence: {
      openai: (up) => (up.parallel_tool_calls === false ? 'parallel_tool_calls false' : null),
      'openai-responses': (up) => (up.parallel_tool_calls === false ? 'parallel_tool_calls false' : null),
      anthropic: (up) => (up.tool_choice?.disable_parallel_tool_use === true ? 'tool_choice.disable_parallel_tool_use' : null),
      gemini: () => null,
      bedrock: () => null,
      ollama: () => null,
    },
  },
  {
    id: 'stop',
    label: 'stop sequences',
    request: {
      openai: (base) => ({ ...base, stop: ['###'] }),
      anthropic: (base) => ({ ...base, stop_sequences: ['###'] }),
    },
    evidence: {
      openai: (up) => (up.stop ? 'stop' : null),
      'openai-responses': () => null,
      anthropic: (up) => (up.stop_sequences ? 'stop_sequences' : null),
      gemini: (up) => (gen(up).stopSequences ? 'stopSequences' : null),
      bedrock: (up) => (up.inferenceConfig?.stopSequences ? 'inferenceConfig.stopSequences' : null),
      ollama: (up) => (opts(up).stop ? 'options.stop' : null),
    },
  },
  {
    id: 'seed',
    label: 'seed',
    request: { openai: (base) => ({ ...base, seed: 7 }) },
    evidence: {
      openai: (up) => (has(up.seed) ? 'seed' : null),
      'openai-responses': () => null,
      anthropic: () => null,
      gemini: (up) => (has(gen(up).seed) ? 'generationConfig.seed' : null),
      bedrock: () => null,
      ollama: (up) => (has(opts(up).seed) ? 'options.seed' : null),
    },
  },
  {
    id: 'penalties',
    label: 'presence / frequency penalties',
    request: { openai: (base) => ({ ...base, presence_penalty: 0.5, frequency_penalty: 0.5 }) },
    evidence: {
      openai: (up) => (has(up.presence_penalty) && has(up.frequency_penalty) ? 'presence_penalty, frequency_penalty' : null),
      'openai-responses': () => null,
      anthropic: () => null,
      gemini: (up) => (has(gen(up).presencePenalty) && has(gen(up).frequencyPenalty) ? 'presencePenalty, frequencyPenalty' : null),
      bedrock: () => null,
      ollama: (up) => (has(opts(up).presence_penalty) && has(opts(up).frequency_penalty) ? 'options.presence_penalty, frequency_penalty' : null),
    },
  },
  {
    id: 'top_k',
    label: 'top_k',
    request: { anthropic: (base) => ({ ...base, top_k: 5 }) },
    evidence: {
      openai: () => null,
      'openai-responses': () => null,
      anthropic: (up) => (has(up.top_k) ? 'top_k' : null),
      gemini: (up) => (has(gen(up).topK) ? 'generationConfig.topK' : null),
      bedrock: (up) => (has(amrf(up).top_k) ? 'additionalModelRequestFields.top_k' : null),
      ollama: (up) => (has(opts(up).top_k) ? 'options.top_k' : null),
    },
  },
  {
    id: 'server_tool.web_search',
    label: 'server tool: web search (Anthropic)',
    request: {
      anthropic: (base) => ({ ...base, tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 1 }] }),
    },
    evidence: {
      openai: () => null,
      'openai-responses': () => null,
      anthropic: (up) => ((up.tools ?? []).some((t) => t.type === 'web_search_20250305') ? 'tools[].type web_search_20250305' : null),
      gemini: () => null,
      bedrock: () => null,
      ollama: () => null,
    },
  },
  {
    id: 'web_search_options',
    label: 'web search options (OpenAI chat)',
    request: { openai: (base) => ({ ...base, web_search_options: {} }) },
    evidence: {
      openai: (up) => (up.web_search_options ? 'web_search_options' : null),
      'openai-responses': () => null,
      anthropic: () => null,
      gemini: () => null,
      bedrock: () => null,
      ollama: () => null,
    },
  },
];

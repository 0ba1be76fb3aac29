// Conformance entries for service tiers, the end user's identity and log
// probabilities (docs/canonical.md). Evidence reads the upstream body the
// mock recorded; null means the feature did not reach the provider.

const tierEvidence = (openaiWord, anthropicWord, bedrockWord, geminiWord) => ({
  openai: (up) => (up.service_tier === openaiWord ? `service_tier ${openaiWord}` : null),
  'openai-responses': (up) => (up.service_tier === openaiWord ? `service_tier ${openaiWord}` : null),
  anthropic: (up) => (anthropicWord && up.service_tier === anthropicWord ? `service_tier ${anthropicWord}` : null),
  bedrock: (up) => (bedrockWord && up.serviceTier?.type === bedrockWord ? `serviceTier.type ${bedrockWord}` : null),
  gemini: (up) => (geminiWord && up.serviceTier === geminiWord ? `serviceTier ${geminiWord}` : null),
  ollama: () => null,
});

const tier = (id, openaiWord, anthropicClientWord, words) => ({
  id: `service_tier.${id}`,
  label: `service tier: ${id}`,
  request: {
    openai: (base) => ({ ...base, service_tier: openaiWord }),
    responses: (base) => ({ ...base, service_tier: openaiWord }),
    ...(anthropicClientWord ? { anthropic: (base) => ({ ...base, service_tier: anthropicClientWord }) } : {}),
  },
  evidence: tierEvidence(...words),
});

const lpItem = (lp) => Array.isArray(lp) && lp.length > 0 && typeof lp[0].token === 'string' && typeof lp[0].logprob === 'number';

export default [
  tier('flex', 'flex', null, ['flex', null, 'flex', 'flex']),
  tier('priority', 'priority', null, ['priority', null, 'priority', 'priority']),
  // standard: ollama has one tier, so nothing is sent and nothing is dropped;
  // its evidence is the absence of any tier member.
  {
    ...tier('standard', 'default', 'standard_only', ['default', 'standard_only', 'default', 'standard']),
    evidence: {
      ...tierEvidence('default', 'standard_only', 'default', 'standard'),
      ollama: (up) => (up.service_tier === undefined ? 'omitted: one tier' : null),
    },
  },
  {
    id: 'user.safety_identifier',
    label: 'end user: safety_identifier',
    request: {
      openai: (base) => ({ ...base, safety_identifier: 'sid-conf' }),
      responses: (base) => ({ ...base, safety_identifier: 'sid-conf' }),
    },
    evidence: {
      openai: (up) => (up.safety_identifier === 'sid-conf' ? 'safety_identifier' : null),
      'openai-responses': (up) => (up.safety_identifier === 'sid-conf' ? 'safety_identifier' : null),
      anthropic: (up) => (up.metadata?.user_id === 'sid-conf' ? 'metadata.user_id' : null),
      bedrock: (up) => (up.requestMetadata?.user === 'sid-conf' ? 'requestMetadata.user' : null),
      // Not sent by rule (docs/canonical.md, deliberate translations).
      gemini: (up) => (JSON.stringify(up).includes('sid-conf') ? null : 'omitted: no such field'),
      ollama: (up) => (JSON.stringify(up).includes('sid-conf') ? null : 'omitted: no such field'),
    },
  },
  {
    id: 'user.user',
    label: 'end user: OpenAI user',
    request: {
      openai: (base) => ({ ...base, user: 'u-conf' }),
      responses: (base) => ({ ...base, user: 'u-conf' }),
    },
    evidence: {
      openai: (up) => (up.user === 'u-conf' ? 'user' : null),
      'openai-responses': (up) => (up.user === 'u-conf' ? 'user' : null),
      anthropic: (up) => (up.metadata?.user_id === 'u-conf' ? 'metadata.user_id' : null),
      bedrock: (up) => (up.requestMetadata?.user === 'u-conf' ? 'requestMetadata.user' : null),
      gemini: (up) => (JSON.stringify(up).includes('u-conf') ? null : 'omitted: no such field'),
      ollama: (up) => (JSON.stringify(up).includes('u-conf') ? null : 'omitted: no such field'),
    },
  },
  {
    id: 'user.metadata',
    label: 'end user: Anthropic metadata.user_id',
    request: {
      anthropic: (base) => ({ ...base, metadata: { user_id: 'uid-conf' } }),
    },
    evidence: {
      openai: (up) => (up.safety_identifier === 'uid-conf' ? 'safety_identifier' : null),
      'openai-responses': (up) => (up.safety_identifier === 'uid-conf' ? 'safety_identifier' : null),
      anthropic: (up) => (up.metadata?.user_id === 'uid-conf' ? 'metadata.user_id' : null),
      bedrock: (up) => (up.requestMetadata?.user === 'uid-conf' ? 'requestMetadata.user' : null),
      gemini: (up) => (JSON.stringify(up).includes('uid-conf') ? null : 'omitted: no such field'),
      ollama: (up) => (JSON.stringify(up).includes('uid-conf') ? null : 'omitted: no such field'),
    },
  },
  {
    id: 'logprobs.top',
    label: 'log probabilities with 2 alternatives',
    request: {
      openai: (base) => ({ ...base, logprobs: true, top_logprobs: 2 }),
      responses: (base) => ({ ...base, top_logprobs: 2, include: ['message.output_text.logprobs'] }),
    },
    evidence: {
      openai: (up) => (up.logprobs === true && up.top_logprobs === 2 ? 'logprobs, top_logprobs 2' : null),
      gemini: (up) =>
        up.generationConfig?.responseLogprobs === true && up.generationConfig?.logprobs === 2
          ? 'generationConfig.responseLogprobs, logprobs 2'
          : null,
      'openai-responses': (up) =>
        up.top_logprobs === 2 && up.include?.includes('message.output_text.logprobs')
          ? 'top_logprobs 2, include message.output_text.logprobs'
          : null,
      anthropic: () => null,
      bedrock: () => null,
      ollama: () => null,
    },
    answer: (clientFormat, driver, json) => {
      if (clientFormat === 'openai') {
        return lpItem(json.choices?.[0]?.logprobs?.content) ? null : 'no choices[0].logprobs.content';
      }
      if (clientFormat === 'responses') {
        const msg = (json.output ?? []).find((o) => o.type === 'message');
        return lpItem(msg?.content?.[0]?.logprobs) ? null : 'no output_text logprobs';
      }
      return null;
    },
  },
  // The tier that served, reported back in the client's shape.
  {
    id: 'answer.service_tier',
    label: 'answer: the tier that served',
    kind: 'answer',
    request: {
      openai: (base) => ({ ...base, service_tier: 'default' }),
      responses: (base) => ({ ...base, service_tier: 'default' }),
      anthropic: (base) => ({ ...base, service_tier: 'standard_only' }),
    },
    skip: { ollama: 'Ollama has one tier and names none' },
    mapped: 'reported',
    answer: (client, driver, j) => {
      const got = client === 'anthropic' ? j?.usage?.service_tier : j?.service_tier;
      const want = client === 'anthropic' ? 'standard' : 'default';
      return got === want ? null : `tier ${got}, not ${want}`;
    },
  },
];

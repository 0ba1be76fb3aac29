// Conformance matrix entries for documents and audio input (issue 21;
// docs/canonical.md, "Documents and audio"). Each entry says how every
// client format that can express the feature sends it, and how to find it
// in the body each driver sent upstream (null: it is not there).

// The smallest well-formed inputs: a PDF and a WAV header, as base64.
export const PDF = Buffer.from('%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n').toString('base64');
export const WAV = Buffer.from('RIFF$\0\0\0WAVEfmt ').toString('base64');
export const PDF_URL = 'https://example.com/paper.pdf';
export const TEXT = 'The mock document says: the sky is green.';

// Every content part / block of every message of an upstream body, per wire format.
const parts = {
  openai: (up) => (up.messages ?? []).flatMap((m) => (Array.isArray(m.content) ? m.content : [])),
  'openai-responses': (up) => (Array.isArray(up.input) ? up.input : []).flatMap((m) => (Array.isArray(m.content) ? m.content : [])),
  anthropic: (up) => (up.messages ?? []).flatMap((m) => (Array.isArray(m.content) ? m.content : [])),
  gemini: (up) => (up.contents ?? []).flatMap((c) => c.parts ?? []),
  bedrock: (up) => (up.messages ?? []).flatMap((m) => m.content ?? []),
  ollama: () => [],
};

/** The document/audio form each driver's upstream body carries, or null. */
export const forms = {
  openai: (up) => {
    const p = parts.openai(up).find((x) => x.type === 'file' || x.type === 'input_audio');
    if (!p) return null;
    if (p.type === 'input_audio') return `input_audio ${p.input_audio.format}`;
    const mt = /^data:([^;]+);base64,/.exec(p.file?.file_data ?? '');
    return mt ? `file file_data ${mt[1]}` : null;
  },
  'openai-responses': (up) => {
    const p = parts['openai-responses'](up).find((x) => x.type === 'input_file');
    if (!p) return null;
    if (p.file_url) return 'input_file file_url';
    const mt = /^data:([^;]+);base64,/.exec(p.file_data ?? '');
    return mt ? `input_file file_data ${mt[1]}` : null;
  },
  anthropic: (up) => {
    const p = parts.anthropic(up).find((x) => x.type === 'document');
    if (!p) return null;
    return `document ${p.source.type} source${p.citations?.enabled ? ', citations.enabled' : ''}`;
  },
  gemini: (up) => {
    const p = parts.gemini(up).find((x) => x.inlineData && !x.inlineData.mimeType.startsWith('image/') || x.fileData);
    if (!p) return null;
    return p.inlineData ? `inlineData ${p.inlineData.mimeType}` : `fileData ${p.fileData.mimeType}`;
  },
  bedrock: (up) => {
    const p = parts.bedrock(up).find((x) => x.document);
    if (!p) return null;
    const d = p.document;
    return `document ${d.format} source.${Object.keys(d.source)[0]}${d.citations?.enabled ? ', citations.enabled' : ''}`;
  },
  ollama: () => null,
};

/** The first document/audio part of an upstream body, in its wire format (for tests). */
export function mediaPart(driver, up) {
  const ps = parts[driver](up);
  switch (driver) {
    case 'openai': return ps.find((x) => x.type === 'file' || x.type === 'input_audio');
    case 'openai-responses': return ps.find((x) => x.type === 'input_file');
    case 'anthropic': return ps.find((x) => x.type === 'document');
    case 'gemini': return ps.find((x) => (x.inlineData && !x.inlineData.mimeType.startsWith('image/')) || x.fileData);
    case 'bedrock': return ps.find((x) => x.document)?.document;
    default: return undefined;
  }
}

const withEvidence = (check) => Object.fromEntries(Object.entries(forms).map(([d, f]) => [d, (up) => {
  const v = f(up);
  return v && check(v) ? v : null;
}]));

const oaiUser = (base, nonce, part) => ({
  ...base, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, part] }],
});
const antUser = (base, nonce, block) => ({
  ...base, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, block] }],
});
const respUser = (base, nonce, part) => ({
  ...base, input: [{ role: 'user', content: [{ type: 'input_text', text: `read this ${nonce}` }, part] }],
});

export default [
  {
    id: 'document.pdf',
    label: 'document: PDF as base64',
    request: {
      openai: (base, nonce) => oaiUser(base, nonce, { type: 'file', file: { filename: 'paper.pdf', file_data: `data:application/pdf;base64,${PDF}` } }),
      anthropic: (base, nonce) => antUser(base, nonce, { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF } }),
      responses: (base, nonce) => respUser(base, nonce, { type: 'input_file', filename: 'paper.pdf', file_data: `data:application/pdf;base64,${PDF}` }),
    },
    evidence: withEvidence((v) => /pdf|base64/.test(v)),
  },
  {
    id: 'document.url',
    label: 'document: PDF by URL',
    request: {
      anthropic: (base, nonce) => antUser(base, nonce, { type: 'document', source: { type: 'url', url: PDF_URL } }),
      responses: (base, nonce) => respUser(base, nonce, { type: 'input_file', file_url: PDF_URL }),
    },
    evidence: withEvidence((v) => /url|fileData/.test(v)),
  },
  {
    id: 'document.text',
    label: 'document: plain text source',
    request: {
      anthropic: (base, nonce) => antUser(base, nonce, { type: 'document', source: { type: 'text', media_type: 'text/plain', data: TEXT } }),
    },
    evidence: withEvidence((v) => /text|txt/.test(v)),
  },
  {
    id: 'document.citations',
    label: 'document: citations enabled',
    request: {
      anthropic: (base, nonce) => antUser(base, nonce, { type: 'document', source: { type: 'text', media_type: 'text/plain', data: TEXT }, citations: { enabled: true } }),
    },
    evidence: withEvidence((v) => v.includes('citations.enabled')),
  },
  {
    id: 'audio.wav',
    label: 'audio input: WAV',
    request: {
      openai: (base, nonce) => oaiUser(base, nonce, { type: 'input_audio', input_audio: { data: WAV, format: 'wav' } }),
    },
    evidence: withEvidence((v) => /wav/.test(v)),
  },
];

// The budget race (docs/budgets.md, docs/BENCHMARKS.md): N concurrent
// streaming clients spread over the data planes each send requests against
// one key until the gateway refuses them; then, once every attempt's
// ledger row has landed, what the window spent is compared with the
// budget. Used by limits_e2e.test.mjs and tests/bench/limits_race.mjs.

import * as h from './harness.mjs';

/**
 * Runs the race. ports: the data planes' ports (clients are spread over
 * them in turn); apiKey: the key every client uses; route: the selector;
 * maxTokens: [lo, hi] drawn uniformly per request (the mock answers
 * min(max_tokens, its chunks) tokens, so answers vary in length);
 * clients: how many run at once; prompt: the user message (default: a
 * short sentence). Resolves with the counts.
 */
export async function runRace({ ports, apiKey, route, clients = 50, maxTokens = [1, 64], perClientMax = 200, prompt = null }) {
  const counts = { ok: 0, refused: 0, other: 0, statuses: {}, codes: {} };
  const one = async (i) => {
    const port = ports[i % ports.length];
    for (let n = 0; n < perClientMax; n++) {
      const mt = maxTokens[0] + Math.floor(Math.random() * (maxTokens[1] - maxTokens[0] + 1));
      const s = await h.openStream(port, {
        headers: { authorization: `Bearer ${apiKey}` },
        body: {
          model: route, stream: true, max_tokens: mt,
          messages: [{ role: 'user', content: prompt ?? `race client ${i} request ${n}: say something` }],
        },
        timeoutMs: 60_000,
      });
      await s.readAll(60_000);
      counts.statuses[s.status] = (counts.statuses[s.status] ?? 0) + 1;
      if (s.status === 200) {
        counts.ok++;
        continue;
      }
      const j = h.tryParseJson(s.raw);
      const code = j?.error?.code ?? '?';
      counts.codes[code] = (counts.codes[code] ?? 0) + 1;
      if (s.status === 402 || s.status === 429) {
        counts.refused++;
        return;
      }
      counts.other++;
      return;
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, i) => one(i)));
  return counts;
}

/** What limit_id spent in its current window once `attempts` ledger rows
 * of key_id have landed (BigInt picodollars, tokens or requests). */
export async function settledSpent(pg, limitId, keyId, attempts, { timeoutMs = 30_000 } = {}) {
  await h.waitFor(() => Number(pg.sql(`SELECT count(*) FROM ledger WHERE key_id = '${keyId}'`)) >= attempts,
    { timeoutMs, what: `${attempts} ledger rows of ${keyId}` });
  const spent = pg.sql(`SELECT coalesce(sum(spent), 0) FROM limit_windows WHERE limit_id = '${limitId}'`);
  return BigInt(spent);
}

/** Overshoot in percent of the amount (0 when under). */
export function overshootPct(spent, amount) {
  const over = spent - BigInt(amount);
  return over > 0n ? Number((over * 1_000_000n) / BigInt(amount)) / 10_000 : 0;
}

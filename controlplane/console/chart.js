// A bar chart as SVG built with DOM APIs (no library, no inline style).
import { fraction, toBigInt } from './money.js';

const NS = 'http://www.w3.org/2000/svg';

function s(tag, attrs = {}, ...children) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

/**
 * bars: [{label, value (BigInt/Number), text (the exact value shown), series}]
 * One bar per item, scaled to the largest; each has a <title> with its
 * exact value and data attributes for tools.
 */
export function barChart(title, bars, { seriesNames = [] } = {}) {
  const n = bars.length;
  const width = Math.max(320, 60 + n * 48);
  const height = 280;
  const top = 20;
  const bottom = 96;
  const left = 8;
  const plotH = height - top - bottom;
  let max = 0n;
  for (const b of bars) {
    const v = toBigInt(b.value) ?? 0n;
    if (v > max) max = v;
  }
  const svg = s('svg', {
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title, class: 'chart', preserveAspectRatio: 'xMinYMin meet',
  });
  svg.append(s('title', {}, title));
  svg.append(s('line', { x1: left, y1: top + plotH, x2: width - 4, y2: top + plotH, class: 'axis' }));
  const maxBar = bars.find((b) => (toBigInt(b.value) ?? 0n) === max);
  if (maxBar) svg.append(s('text', { x: left, y: top - 4, class: 'tick' }, `max ${maxBar.text}`));
  bars.forEach((b, i) => {
    const v = toBigInt(b.value) ?? 0n;
    const h = Math.max(v > 0n ? 1 : 0, Math.round(fraction(v, max) * plotH));
    const x = left + 8 + i * 48;
    const series = Math.max(0, seriesNames.indexOf(b.series)) % 8;
    const rect = s('rect', {
      x, y: top + plotH - h, width: 32, height: h, class: `col s${series}`,
      'data-label': b.label, 'data-value': v.toString(), 'data-text': b.text,
    }, s('title', {}, `${b.label}: ${b.text}`));
    svg.append(rect);
    const lbl = b.label.length > 24 ? `${b.label.slice(0, 23)}…` : b.label;
    svg.append(s('text', { x: x + 16, y: top + plotH + 12, class: 'tick', transform: `rotate(30 ${x + 16} ${top + plotH + 12})` }, lbl));
  });
  return svg;
}

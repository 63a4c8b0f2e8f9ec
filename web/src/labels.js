// Labels and metadata in the dashboard (GET …/labels, …/labels/search): loaded once per
// matrix and labels hash, the label in hover text, points coloured by a metadata column
// (categorical: a qualitative palette, the most frequent values first; numeric: the sequential
// map), and search through the daemon, so the page and a script get the same row indices.

// 50 qualitative colours, one per category before "other" (TensorBoard's Projector also stops at
// 50): Tableau 10, their light companions (Tableau 20), then 30 hues on the golden angle at three
// lightnesses, so that neighbours in the list differ in hue and lightness.
export const MAX_CATEGORIES = 50;
const TABLEAU20 = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac',
    '#a0cbe8', '#ffbe7d', '#ff9d9a', '#86bcb6', '#8cd17d', '#f1ce63', '#d4a6c8', '#fabfd2', '#d7b5a6', '#79706e'];
function hsl(h, s, l) {
    const f = (n) => {
        const k = (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
        return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)))).toString(16).padStart(2, '0');
    };
    return '#' + f(0) + f(8) + f(4);
}
export const PALETTE = TABLEAU20.concat(Array.from({ length: MAX_CATEGORIES - TABLEAU20.length },
    (_, i) => hsl((i * 137.508 + 15) % 360, 0.62, [0.38, 0.55, 0.72][i % 3])));
export const OTHER = '#7f7f7f';

const cache = new Map(); // labels hash -> Promise of the parsed labels

// The labels of a matrix (its catalogue entry's `labels` summary: rows, columns with their
// types, sha256), fetched once per hash as TSV (GET …/labels?format=tsv: a cell and a tab, no
// quotes or escapes; GPT-2's vocabulary with two more columns: 699 kB against 900 kB as JSON) and parsed in
// runs of lines, each a task of its own, so that no long task holds the page while the points
// are drawn. null when it has none. fetchText(url) answers the reply's text.
// Resolves to { rows, names, columns: { NAME: [cells] }, numeric: [NAME] }: numeric columns'
// cells as numbers (null for an empty cell), the others as strings.
export function loadLabels(info, path, fetchText) {
    if (!info || !info.labels) return Promise.resolve(null);
    const key = info.labels.sha256;
    if (!cache.has(key)) {
        const p = fetchText(path + '?format=tsv').then((text) => parseTsv(text, info.labels));
        p.catch(() => cache.delete(key));
        cache.set(key, p);
    }
    return cache.get(key);
}

const PARSE_LINES = 20000; // lines parsed in one task

// The daemon's TSV of labels (a header row unless there is one column; tabs and line breaks in
// cells were written as spaces) typed by the catalogue's summary of its columns.
export async function parseTsv(text, summary) {
    const names = summary.columns.map((c) => c.name);
    const numeric = summary.columns.filter((c) => c.type === 'numeric').map((c) => c.name);
    const isNum = names.map((n) => numeric.includes(n));
    const n = summary.rows;
    const cols = names.map(() => new Array(n));
    let at = 0;
    if (names.length > 1) at = text.indexOf('\n') + 1; // the header row
    for (let row = 0; row < n;) {
        const end = Math.min(n, row + PARSE_LINES);
        for (; row < end; row++) {
            let eol = text.indexOf('\n', at);
            if (eol < 0) eol = text.length;
            const line = text.charCodeAt(eol - 1) === 13 ? text.slice(at, eol - 1) : text.slice(at, eol);
            at = eol + 1;
            const cells = names.length > 1 ? line.split('\t') : [line];
            for (let c = 0; c < names.length; c++) {
                const v = cells[c] === undefined ? '' : cells[c];
                cols[c][row] = isNum[c] ? (v === '' ? null : Number(v)) : v;
            }
        }
        if (row < n) await new Promise((resolve) => setTimeout(resolve, 0));
    }
    const columns = {};
    names.forEach((name, c) => { columns[name] = cols[c]; });
    return { rows: n, names, columns, numeric };
}

// The label (first column) of item `row`, or ''.
export function labelOf(labels, row) {
    if (!labels || !labels.names.length) return '';
    const v = labels.columns[labels.names[0]][row];
    return v === undefined || v === null ? '' : String(v);
}

// Hover text lines for item `row`: every column, the label first, long cells cut.
export function labelLines(labels, row) {
    if (!labels) return [];
    return labels.names.slice(0, 6).map((name, i) => {
        let v = String(labels.columns[name][row] ?? '');
        if (v.length > 60) v = v.slice(0, 57) + '…';
        return i === 0 ? JSON.stringify(v) : name + ': ' + v;
    });
}

// Is column `name` numeric (every cell a finite number)?
export function isNumeric(labels, name) {
    return !!labels && labels.numeric.includes(name);
}

// The categories of a column over the plotted rows: the MAX_CATEGORIES most frequent values a
// colour each (ties by value), the rest one "other" entry that names how many values it holds.
// Returns { code: Uint8Array (per plotted point: its legend entry), legend: [{ key, value,
// count, colour }] }; an entry's key is its value, "other"'s is "\u0000other".
export function categories(labels, name, rows) {
    const col = labels.columns[name];
    const count = new Map();
    for (const r of rows) { const v = String(col[r] ?? ''); count.set(v, (count.get(v) || 0) + 1); }
    const top = [...count.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const own = Math.min(top.length, MAX_CATEGORIES);
    const entry = new Map(top.slice(0, own).map(([v], i) => [v, i]));
    const legend = top.slice(0, own).map(([v, n], i) => ({ key: v, value: v === '' ? '(empty)' : v, count: n, colour: PALETTE[i] }));
    if (top.length > own)
        legend.push({ key: OTHER_KEY, value: 'other (' + (top.length - own).toLocaleString('en') + ' values)',
            count: top.slice(own).reduce((s, e) => s + e[1], 0), colour: OTHER });
    const code = new Uint8Array(rows.length);
    rows.forEach((r, i) => { const c = entry.get(String(col[r] ?? '')); code[i] = c === undefined ? own : c; });
    return { code, legend };
}
export const OTHER_KEY = '\u0000other';

// Per-point RGBA bytes of a categorical colouring; the points of entries not in `shown` (a Set
// of keys, or null: all shown) in the faint colour.
export function categoryBytes(cats, shown, faint) {
    const table = cats.legend.map((e) => hex(!shown || shown.has(e.key) ? e.colour : faint));
    const out = new Uint8Array(cats.code.length * 4);
    for (let i = 0; i < cats.code.length; i++) out.set(table[cats.code[i]], i * 4);
    return out;
}

// The plotted positions whose entry is in `shown`.
export function positionsIn(cats, shown) {
    const want = cats.legend.map((e) => shown.has(e.key));
    const out = [];
    for (let i = 0; i < cats.code.length; i++) if (want[cats.code[i]]) out.push(i);
    return out;
}

function hex(colour) {
    const c = /^#[0-9a-f]{6}$/i.test(colour) ? colour : '#888888';
    return [parseInt(c.slice(1, 3), 16), parseInt(c.slice(3, 5), 16), parseInt(c.slice(5, 7), 16), 255];
}

// The numeric values of a column for the plotted rows, with their range.
export function numericValues(labels, name, rows) {
    const col = labels.columns[name];
    const values = rows.map((r) => Number(col[r]));
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return { values, lo, hi };
}

// Labels and metadata in the dashboard (GET …/labels, …/labels/search): loaded once per
// matrix and labels hash, the label in hover text, points coloured by a metadata column
// (categorical: a qualitative palette, the most frequent values first; numeric: the sequential
// map), and search through the daemon, so the page and a script get the same row indices.

// A qualitative palette (Tableau 10): distinct hues; values past the tenth share the grey.
export const QUALITATIVE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7',
    '#9c755f', '#bab0ac'];
export const OTHER = '#7f7f7f';

const cache = new Map(); // labels hash -> Promise of the typed JSON document

// The labels of a matrix (its catalogue entry's `labels` summary and its path), fetched once per
// hash; null when it has none. fetchJson(url) answers the parsed JSON.
export function loadLabels(info, path, fetchJson) {
    if (!info || !info.labels) return Promise.resolve(null);
    const key = info.labels.sha256;
    if (!cache.has(key)) {
        const p = fetchJson(path).then((doc) => Object.assign(doc, { names: Object.keys(doc.columns) }));
        p.catch(() => cache.delete(key));
        cache.set(key, p);
    }
    return cache.get(key);
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

// Colour assignment of a categorical column over the plotted rows: the 9 most frequent values
// get their own colour, the rest share grey. Returns { colourOf(row) -> '#rrggbb', legend }.
export function categories(labels, name, rows) {
    const col = labels.columns[name];
    const count = new Map();
    for (const r of rows) count.set(String(col[r]), (count.get(String(col[r])) || 0) + 1);
    const top = [...count.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const own = top.length <= QUALITATIVE.length ? top.length : QUALITATIVE.length - 1;
    const colour = new Map(top.slice(0, own).map(([v], i) => [v, QUALITATIVE[i]]));
    const legend = top.slice(0, own).map(([v, n]) => ({ value: v, count: n, colour: colour.get(v) }));
    if (top.length > own)
        legend.push({ value: (top.length - own) + ' other values', count: top.slice(own).reduce((s, e) => s + e[1], 0), colour: OTHER });
    return { colourOf: (r) => colour.get(String(col[r])) || OTHER, legend };
}

// Per-point RGBA bytes from '#rrggbb' colours.
export function rgbaBytes(rows, colourOf) {
    const out = new Uint8Array(rows.length * 4);
    rows.forEach((r, i) => {
        const hex = colourOf(r);
        out[i * 4] = parseInt(hex.slice(1, 3), 16);
        out[i * 4 + 1] = parseInt(hex.slice(3, 5), 16);
        out[i * 4 + 2] = parseInt(hex.slice(5, 7), 16);
        out[i * 4 + 3] = 255;
    });
    return out;
}

// The numeric values of a column for the plotted rows, with their range.
export function numericValues(labels, name, rows) {
    const col = labels.columns[name];
    const values = rows.map((r) => Number(col[r]));
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return { values, lo, hi };
}

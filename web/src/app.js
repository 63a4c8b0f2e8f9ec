// The embedscope dashboard. Every number drawn here comes from the daemon's API; this script
// only fetches, lays out and draws (no analysis is recomputed in the browser). All URLs are
// relative to the page, so it works at / and under a proxy prefix such as /embedscope/.
// The view state lives in the URL fragment (#tab=…&m=…): a link reproduces the view.
'use strict';

const Plotly = window.Plotly;

// ------------------------------------------------------------------ colour maps
// Sequential: viridis (plotly's). Cyclic: a twilight-like map (light -> blue -> dark -> red ->
// light, equal lightness on both halves) for row indices, whose ends meet.
const TWILIGHT = [
    [0.000, '#e2d9e2'], [0.125, '#a6bbd0'], [0.250, '#6a8bc2'], [0.375, '#5b4ea6'],
    [0.500, '#2f1436'], [0.625, '#7d2b5b'], [0.750, '#b65448'], [0.875, '#d2a08a'], [1.000, '#e2d9e2'],
];
const COLORMAPS = { twilight: TWILIGHT, viridis: 'Viridis' };

// ------------------------------------------------------------------ view state (URL fragment)
const DEFAULTS = {
    tab: 'geometry',
    m: 'gpt2-small/wpe', rows: '1:', exclude: '', center: 'columns', average: '',
    pc: '1,2,3', dim: '3', cmap: 'twilight', line: '1', row: '100', bins: '',
    a: 'gpt2-small/wpe', a_rows: '1:', a_center: 'columns', b: 'gpt2-small/h0.q', b_center: 'none',
    k: '10', obins: '64', blur: '1',
    model: 'gpt2-small', head: '', hbins: '64',
    cmp: 'gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe', cmp_rows: '1:,,', cmp_an: 'pca',
    threshold: '3.5', pk: '3',
};
const state = Object.assign({}, DEFAULTS);

function readHash() {
    const h = new URLSearchParams(location.hash.replace(/^#/, ''));
    for (const key of Object.keys(DEFAULTS))
        state[key] = h.has(key) ? h.get(key) : DEFAULTS[key];
}

function writeHash() {
    const h = new URLSearchParams();
    for (const key of Object.keys(DEFAULTS))
        if (state[key] !== DEFAULTS[key])
            h.set(key, state[key]);
    const text = h.toString();
    const url = location.pathname + location.search + (text ? '#' + text : '');
    if (url !== location.pathname + location.search + location.hash)
        history.replaceState(null, '', url);
}

// ------------------------------------------------------------------ small DOM helpers
function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
        if (k === 'class') node.className = v;
        else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
        else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat())
        if (c !== null && c !== undefined) node.append(c.nodeType ? c : document.createTextNode(String(c)));
    return node;
}

let uid = 0;
// A labelled control bound to state[key]; onchange(value) after the state is updated.
function control(label, key, opts, onchange) {
    const id = 'c' + (++uid) + '-' + key;
    let input;
    if (opts.choices) {
        input = el('select', { id });
        for (const c of opts.choices) {
            const [value, text] = Array.isArray(c) ? c : [c, c];
            input.append(el('option', { value }, text));
        }
        if (!opts.choices.some((c) => (Array.isArray(c) ? c[0] : c) === state[key]))
            input.append(el('option', { value: state[key] }, state[key]));
    } else {
        input = el('input', { id, type: 'text', size: opts.size || 8, placeholder: opts.placeholder || '',
            spellcheck: 'false', autocomplete: 'off' });
    }
    input.value = state[key];
    if (opts.title) input.title = opts.title;
    input.addEventListener('change', () => {
        state[key] = input.value.trim();
        writeHash();
        onchange(state[key]);
    });
    return el('span', { class: 'control' }, el('label', { for: id }, label), input);
}

function fmt(v, digits) {
    return Number(v).toPrecision(digits || 4);
}

// ------------------------------------------------------------------ API access
// A request for one panel: the relative URL, its absolute form for "copy as curl".
function apiUrl(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {}))
        if (v !== '' && v !== undefined && v !== null) q.set(k, v);
    const text = q.toString().replace(/%3A/g, ':').replace(/%2F/g, '/').replace(/%2C/g, ',');
    return path + (text ? '?' + text : '');
}

function matrixPath(id, analysis) {
    const [model, matrix] = id.split('/');
    return 'v1/models/' + encodeURIComponent(model) + '/matrices/' + encodeURIComponent(matrix || '') +
        (analysis ? '/' + analysis : '');
}

class Problem extends Error {
    constructor(doc, status) {
        super(doc.detail || doc.title || 'HTTP ' + status);
        this.doc = doc;
        this.status = status;
    }
}

async function fetchJson(url, signal) {
    const res = await fetch(url, { signal, headers: { Accept: 'application/json' } });
    const type = res.headers.get('Content-Type') || '';
    if (!res.ok) {
        let doc = { title: res.statusText, status: res.status };
        if (type.includes('json')) doc = await res.json();
        else doc.detail = (await res.text()).slice(0, 300);
        throw new Problem(doc, res.status);
    }
    return res.json();
}

// Requests in flight, for the tests and the header's indicator.
const pending = new Set();
function updateBusy() {
    document.body.classList.toggle('busy', pending.size > 0);
}

// ------------------------------------------------------------------ panels
// A panel: a titled box with a plot area, a status line (pending / error), the exact API
// request(s) behind it, and buttons: copy as curl, PNG, data (JSON).
const panels = {};

class Panel {
    constructor(id, title, parent, opts) {
        this.id = id;
        this.urls = [];
        this.data = null;
        this.controller = null;
        this.plot = el('div', { class: 'plot' + (opts && opts.tall ? ' tall' : ''), id: 'plot-' + id,
            role: 'img', 'aria-label': title });
        this.status = el('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
        this.requestLine = el('code', { class: 'request' });
        this.controls = el('div', { class: 'controls' });
        const copy = el('button', { type: 'button', onclick: () => this.copyCurl() }, 'copy as curl');
        const png = el('button', { type: 'button', onclick: () => this.png() }, 'PNG');
        const json = el('button', { type: 'button', onclick: () => this.download() }, 'data (JSON)');
        this.root = el('section', { class: 'panel' + (opts && opts.wide ? ' wide' : ''), id: 'panel-' + id,
            'aria-labelledby': 'title-' + id },
        el('div', { class: 'head' }, el('h2', { id: 'title-' + id }, title),
            el('span', { class: 'tools' }, copy, png, json)),
        this.controls, this.status, this.plot, this.requestLine);
        parent.append(this.root);
        panels[id] = this;
    }

    curl() {
        return this.urls.map((u) => "curl -fsS '" + new URL(u, document.baseURI).href + "'").join('\n');
    }

    async copyCurl() {
        const text = this.curl();
        try {
            await navigator.clipboard.writeText(text);
            this.flash('copied: ' + text);
        } catch (e) { // no clipboard outside secure contexts: show it selected instead
            window.prompt('The request behind this panel:', text);
        }
    }

    flash(text) {
        this.status.className = 'status note';
        this.status.textContent = text;
        setTimeout(() => { if (this.status.textContent === text) this.status.textContent = ''; }, 3000);
    }

    png() {
        const gd = this.plot.querySelector('.js-plotly-plot') || this.plot;
        if (gd.data) Plotly.downloadImage(gd, { format: 'png', filename: 'embedscope-' + this.id, scale: 2 });
    }

    download() {
        if (!this.data) return;
        const blob = new Blob([JSON.stringify(this.data, null, 1)], { type: 'application/json' });
        const a = el('a', { href: URL.createObjectURL(blob), download: 'embedscope-' + this.id + '.json' });
        document.body.append(a);
        a.click();
        setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    }

    // Fetch every url (relative), show progress while pending and the problem on failure,
    // then draw(results...). A newer load cancels an older one still in flight.
    async load(urls, draw) {
        if (this.controller) this.controller.abort();
        const controller = new AbortController();
        this.controller = controller;
        this.urls = urls;
        this.requestLine.textContent = this.curl();
        const t0 = performance.now();
        this.root.classList.add('pending');
        this.root.classList.remove('failed');
        this.status.className = 'status pending';
        const tick = () => {
            this.status.textContent = 'computing on the daemon… ' + ((performance.now() - t0) / 1000).toFixed(1) + ' s';
        };
        tick();
        const timer = setInterval(tick, 200);
        pending.add(this);
        updateBusy();
        try {
            const results = await Promise.all(urls.map((u) => fetchJson(u, controller.signal)));
            if (controller !== this.controller) return;
            this.data = results.length === 1 ? results[0] : results;
            this.status.textContent = '';
            this.status.className = 'status';
            const t1 = performance.now();
            await draw(...results);
            this.timing = { fetch_ms: t1 - t0, draw_ms: performance.now() - t1, total_ms: performance.now() - t0 };
            this.root.dataset.rendered = String(Number(this.root.dataset.rendered || 0) + 1);
        } catch (e) {
            if (e.name === 'AbortError') return;
            this.fail(e);
        } finally {
            clearInterval(timer);
            if (controller === this.controller) {
                this.root.classList.remove('pending');
                pending.delete(this);
                updateBusy();
            }
        }
    }

    // Drawn from another panel's response (same request): take its request and data.
    fed(from) {
        this.urls = from.urls;
        this.data = from.data;
        this.requestLine.textContent = this.curl();
        this.root.dataset.rendered = String(Number(this.root.dataset.rendered || 0) + 1);
    }

    fail(e) {
        this.root.classList.add('failed');
        this.status.className = 'status error';
        this.status.textContent = '';
        if (e instanceof Problem) {
            const d = e.doc;
            this.status.append(el('strong', {}, (d.status || e.status) + ' ' + (d.title || 'error')), ': ',
                d.detail || '', d.param ? ' (parameter ' + d.param + ')' : '', d.limit ? ' (limit ' + d.limit + ')' : '');
        } else {
            this.status.textContent = 'request failed: ' + e.message;
        }
        Plotly.purge(this.plot);
        this.plot.textContent = '';
    }
}

const BASE_LAYOUT = {
    margin: { l: 60, r: 20, t: 30, b: 50 },
    font: { family: 'system-ui, sans-serif', size: 12 },
    paper_bgcolor: '#fff', plot_bgcolor: '#fff',
};
const CONFIG = { responsive: true, displaylogo: false, scrollZoom: false };

function layout(extra) {
    return Object.assign({}, BASE_LAYOUT, extra);
}

function plot(div, traces, lay) {
    return Plotly.react(div, traces, layout(lay), CONFIG);
}

function heatmap(z, x, y, opts) {
    return Object.assign({ type: 'heatmap', z, x, y, colorscale: 'Viridis', zsmooth: false,
        hoverongaps: false }, opts);
}

// Bin centres from edges [e0, e1, ..., en] (index units), for heatmap axes.
function centres(edges) {
    const out = new Array(edges.length - 1);
    for (let i = 0; i + 1 < edges.length; i++) out[i] = (edges[i] + edges[i + 1] - 1) / 2;
    return out;
}

// ------------------------------------------------------------------ model listing
let models = [];
let limits = {}; // the daemon's request limits (GET v1): max_bins bounds the cosine heatmap
let matrixIds = [];

function matrixChoices() {
    return matrixIds.map((id) => [id, id]);
}

function selection() {
    return { rows: state.rows, exclude: state.exclude, average: state.average };
}

// ------------------------------------------------------------------ tab: geometry (PCA, spectrum, cosine)
function components() {
    const pcs = state.pc.split(',').map((s) => parseInt(s, 10)).filter((n) => n >= 1);
    const need = state.dim === '2' ? 2 : 3;
    while (pcs.length < need) pcs.push(pcs.length + 1);
    return pcs.slice(0, need);
}

function buildGeometry(root) {
    const bar = el('div', { class: 'toolbar' });
    // The helix and the spectrum first: the cosine panels (a large heatmap) wait for them.
    const refresh = () => Promise.all([loadPca(), loadSpectrum()]).then(loadCosine);
    bar.append(
        control('matrix', 'm', { choices: matrixChoices() }, refresh),
        control('rows', 'rows', { placeholder: 'start:stop', title: 'Python slice of the rows, e.g. 1: (skip GPT-2\'s position 0)' }, refresh),
        control('exclude', 'exclude', { placeholder: 'i,j,…', size: 10 }, refresh),
        control('centring', 'center', { choices: ['columns', 'rows', 'none'] }, () => { loadPca(); loadSpectrum(); }),
        control('average g', 'average', { placeholder: 'none', size: 4, title: 'average consecutive rows in groups of g' }, refresh));
    root.append(bar);
    const grid = el('div', { class: 'grid' });
    root.append(grid);

    const pca = new Panel('pca', 'PCA of the rows', grid, { tall: true, wide: true });
    pca.controls.append(
        control('components', 'pc', { size: 6, placeholder: '1,2,3', title: 'which principal components (1-based)' }, loadPca),
        control('view', 'dim', { choices: [['3', '3-D'], ['2', '2-D']] }, loadPca),
        control('colour', 'cmap', { choices: [['twilight', 'cyclic (twilight)'], ['viridis', 'sequential (viridis)']] }, loadPca),
        control('line', 'line', { choices: [['1', 'join consecutive rows'], ['0', 'points only']] }, loadPca));
    new Panel('spectrum', 'Singular spectrum', grid, { wide: true });
    const cosine = new Panel('cosine', 'Cosine similarity: binned matrix', grid);
    cosine.controls.append(control('bins', 'bins', { size: 5, placeholder: 'full',
        title: 'bins per axis; empty: one per row, up to the daemon\'s max_bins' }, loadCosine));
    new Panel('offset', 'Cosine similarity: mean by offset', grid);
    const rowPanel = new Panel('row', 'Cosine similarity of one row to the others', grid);
    rowPanel.controls.append(control('row', 'row', { size: 6, title: 'the row; or click a point in the PCA view' }, loadRow));
    refresh();
}

function loadPca() {
    const pcs = components();
    const k = Math.max(...pcs);
    const url = apiUrl(matrixPath(state.m, 'pca'), Object.assign(selection(), { center: state.center, k }));
    return panels.pca.load([url], (res) => drawPca(res, pcs));
}

function drawPca(res, pcs) {
    const rows = res.rows;
    const idx = rows.map((r) => r.index);
    const axis = (c) => rows.map((r) => r.coords[c - 1]);
    const label = (c) => 'PC' + c + ' (' + (100 * res.explained_variance_ratio[c - 1]).toFixed(1) + '% var.)';
    const lo = Math.min(...idx), hi = Math.max(...idx);
    const colour = { color: idx, colorscale: COLORMAPS[state.cmap] || TWILIGHT, cmin: lo, cmax: hi };
    const withLine = state.line !== '0';
    const hover = 'row %{customdata}<br>' + pcs.map((c, i) => 'PC' + c + ' %{' + 'xyz'[i] + ':.5g}').join('<br>') + '<extra></extra>';
    const title = res.input.matrix.id + ' rows ' + res.input.matrix.rows + ', centred: ' + res.input.matrix.center;
    if (pcs.length === 3) {
        const trace = { type: 'scatter3d', mode: withLine ? 'lines+markers' : 'markers', x: axis(pcs[0]), y: axis(pcs[1]),
            z: axis(pcs[2]), customdata: idx, hovertemplate: hover,
            marker: Object.assign({ size: 2.5, showscale: true, colorbar: { title: { text: 'row' }, thickness: 12 } }, colour),
            line: Object.assign({ width: 2 }, colour) };
        return plot(panels.pca.plot, [trace], { title: { text: title, font: { size: 12 } }, margin: { l: 0, r: 0, t: 30, b: 0 },
            scene: { xaxis: { title: { text: label(pcs[0]) } }, yaxis: { title: { text: label(pcs[1]) } },
                zaxis: { title: { text: label(pcs[2]) } }, aspectmode: 'data' }, uirevision: state.m }).then(linkPca);
    }
    const trace = { type: 'scatter', mode: withLine ? 'lines+markers' : 'markers', x: axis(pcs[0]), y: axis(pcs[1]),
        customdata: idx, hovertemplate: hover,
        marker: Object.assign({ size: 5, showscale: true, colorbar: { title: { text: 'row' }, thickness: 12 } }, colour),
        line: { width: 1, color: '#bbb' } };
    return plot(panels.pca.plot, [trace], { title: { text: title, font: { size: 12 } }, hovermode: 'closest',
        xaxis: { title: { text: label(pcs[0]) }, zeroline: false },
        yaxis: { title: { text: label(pcs[1]) }, zeroline: false, scaleanchor: 'x' } }).then(linkPca);
}

function loadSpectrum() {
    const url = apiUrl(matrixPath(state.m, 'spectrum'), Object.assign(selection(), { center: state.center }));
    return panels.spectrum.load([url], drawSpectrum);
}

function drawSpectrum(res) {
    const n = res.singular_values.length;
    const comp = Array.from({ length: n }, (_, i) => i + 1);
    const groups = res.degenerate_groups || [];
    const inGroup = new Array(n).fill(false);
    for (const [s, e] of groups) for (let i = s; i < e; i++) inGroup[i] = true;
    const shapes = groups.map(([s, e]) => ({ type: 'rect', xref: 'x', yref: 'paper', x0: s + 0.5, x1: e + 0.5, y0: 0, y1: 1,
        fillcolor: 'rgba(230,120,40,0.18)', line: { width: 0 } }));
    const marks = [['0.5', '#1b9e77'], ['0.9', '#d95f02'], ['0.99', '#7570b3']];
    for (const [p, colour] of marks) {
        const m = res.components_for[p];
        shapes.push({ type: 'line', xref: 'x2', yref: 'y2', x0: 1, x1: n, y0: +p, y1: +p, line: { dash: 'dot', width: 1, color: colour } });
        if (m) shapes.push({ type: 'line', xref: 'x2', yref: 'y2', x0: m, x1: m, y0: 0, y1: +p, line: { dash: 'dot', width: 1, color: colour } });
    }
    const annotations = marks.filter(([p]) => res.components_for[p]).map(([p, colour]) => ({
        xref: 'x2', yref: 'y2', x: Math.log10(res.components_for[p]), y: +p, text: (100 * p) + '%: ' + res.components_for[p],
        showarrow: true, arrowhead: 0, ax: 30, ay: 18, font: { color: colour, size: 11 } }));
    const traces = [
        { type: 'scatter', mode: 'lines+markers', x: comp, y: res.singular_values, name: 'singular value',
            marker: { size: 4, color: inGroup.map((g) => (g ? '#e66101' : '#3b528b')) }, line: { color: '#3b528b', width: 1 },
            hovertemplate: 'σ%{x} = %{y:.6g}<extra></extra>' },
        { type: 'scatter', mode: 'lines', x: comp, y: res.cumulative, xaxis: 'x2', yaxis: 'y2', name: 'cumulative variance',
            line: { color: '#21908d' }, hovertemplate: '%{x} components: %{y:.4f}<extra></extra>' },
    ];
    return plot(panels.spectrum.plot, traces, {
        grid: { rows: 1, columns: 2, pattern: 'independent' }, showlegend: false, shapes, annotations,
        xaxis: { title: { text: 'component (orange: degenerate groups, ' + groups.length + ')' } },
        yaxis: { title: { text: 'singular value' }, type: 'log' },
        xaxis2: { title: { text: 'components (log)' }, type: 'log' },
        yaxis2: { title: { text: 'cumulative explained variance' }, range: [0, 1.02] },
        title: { text: res.input.matrix.id + ': rank ' + res.rank + ', 50/90/99 % at ' +
            ['0.5', '0.9', '0.99'].map((p) => res.components_for[p]).join('/') + ' components', font: { size: 12 } },
    });
}

function loadCosine() {
    const sel = selection();
    panels.cosine.load([apiUrl(matrixPath(state.m, 'cosine'), Object.assign({}, sel, { mode: 'matrix', bins: state.bins || fullBins() }))],
        drawCosineMatrix);
    panels.offset.load([apiUrl(matrixPath(state.m, 'cosine'), Object.assign({}, sel, { mode: 'offset' }))], drawOffset);
    loadRow();
}

function drawCosineMatrix(res) {
    const x = centres(res.col_edges), y = centres(res.row_edges);
    return plot(panels.cosine.plot, [heatmap(res.values, x, y, { zmin: -1, zmax: 1, colorbar: { title: { text: 'cos' }, thickness: 12 },
        hovertemplate: 'rows ≈%{y:.0f} × %{x:.0f}: %{z:.4f}<extra></extra>' })],
    { title: { text: res.input.matrix.id + ', ' + res.input.bins + '×' + res.input.bins + ' bins', font: { size: 12 } },
        xaxis: { title: { text: 'row' } }, yaxis: { title: { text: 'row' }, autorange: 'reversed', scaleanchor: 'x' } });
}

function drawOffset(res) {
    return plot(panels.offset.plot, [{ type: 'scatter', mode: 'lines', x: res.offsets, y: res.mean, line: { color: '#31688e' },
        hovertemplate: 'offset %{x}: %{y:.4f}<extra></extra>' }],
    { xaxis: { title: { text: 'offset |i − j|' } }, yaxis: { title: { text: 'mean cosine similarity' } } });
}

// Full resolution (one bin per item) when the daemon's max_bins allows it, else max_bins.
function fullBins() {
    const [model, name] = state.m.split('/');
    const m = models.find((x) => x.name === model);
    const matrix = m && m.matrices.find((x) => x.name === name);
    const items = matrix ? matrix.items : 1024;
    return limits.max_bins ? Math.min(items, limits.max_bins) : Math.min(items, 512);
}

function loadRow() {
    const url = apiUrl(matrixPath(state.m, 'cosine'), Object.assign(selection(), { row: state.row }));
    panels.row.load([url], drawRow);
}

function drawRow(res) {
    const r = res.input.row;
    const at = res.rows.indexOf(r);
    const traces = [{ type: 'scatter', mode: 'lines', x: res.rows, y: res.similarity, line: { color: '#440154' },
        hovertemplate: 'row %{x}: %{y:.4f}<extra></extra>' }];
    if (at >= 0) traces.push({ type: 'scatter', mode: 'markers', x: [r], y: [res.similarity[at]], marker: { size: 9, color: '#fde725',
        line: { color: '#000', width: 1 } }, hoverinfo: 'skip' });
    return plot(panels.row.plot, traces, { showlegend: false, title: { text: 'row ' + r + ' of ' + res.input.matrix.id, font: { size: 12 } },
        xaxis: { title: { text: 'row' } }, yaxis: { title: { text: 'cosine similarity to row ' + r } } });
}

// Linked selection: a click (or a hover held still) on a point of the PCA view selects that row.
function linkPca() {
    const gd = panels.pca.plot;
    if (gd.dataset.linked) return;
    gd.dataset.linked = '1';
    let timer = null;
    const select = (ev) => {
        const p = ev && ev.points && ev.points[0];
        if (!p || p.customdata === undefined || String(p.customdata) === state.row) return;
        state.row = String(p.customdata);
        writeHash();
        const input = panels.row.controls.querySelector('input');
        if (input) input.value = state.row;
        loadRow();
    };
    gd.on('plotly_click', (ev) => { clearTimeout(timer); select(ev); });
    gd.on('plotly_hover', (ev) => { clearTimeout(timer); timer = setTimeout(() => select(ev), 400); });
    gd.on('plotly_unhover', () => clearTimeout(timer));
}

// ------------------------------------------------------------------ tab: capture and overlap
function buildCapture(root) {
    const bar = el('div', { class: 'toolbar' });
    const refresh = () => { loadCapture(); loadOverlap(); };
    bar.append(
        control('A', 'a', { choices: matrixChoices() }, refresh),
        control('A rows', 'a_rows', { placeholder: 'all', size: 6 }, refresh),
        control('A centring', 'a_center', { choices: ['columns', 'rows', 'none'] }, refresh),
        control('B', 'b', { choices: matrixChoices() }, refresh),
        control('B centring', 'b_center', { choices: ['none', 'columns', 'rows'] }, refresh),
        control('k', 'k', { size: 4, title: 'the top-k subspace of A that captures B\'s singular vectors' }, loadCapture));
    root.append(bar);
    const grid = el('div', { class: 'grid' });
    root.append(grid);
    new Panel('capture', 'Capture of B\'s singular vectors by A\'s top-k subspace', grid);
    const overlap = new Panel('overlap', 'Squared overlaps of singular vectors (A × B)', grid);
    overlap.controls.append(control('bins', 'obins', { size: 4 }, loadOverlap),
        control('blur', 'blur', { size: 4, title: 'Gaussian blur (in bins) applied by the daemon' }, loadOverlap));
    refresh();
}

function pairParams() {
    return { a: state.a, a_rows: state.a_rows, a_center: state.a_center, b: state.b, b_center: state.b_center };
}

function loadCapture() {
    panels.capture.load([apiUrl('v1/capture', Object.assign(pairParams(), { k: state.k }))], (res) => {
        const x = res.capture.map((_, i) => i + 1);
        return plot(panels.capture.plot, [
            { type: 'scatter', mode: 'lines', x, y: res.capture, name: 'capture', line: { color: '#31688e' },
                hovertemplate: 'B vector %{x}: %{y:.4f}<extra></extra>' },
            { type: 'scatter', mode: 'lines', x: [1, x.length], y: [res.baseline, res.baseline], name: 'k/d baseline',
                line: { dash: 'dash', color: '#e66101' } }],
        { title: { text: res.input.a.id + ' top-' + res.input.k + ' vs ' + res.input.b.id + ' (sum ' + fmt(res.sum) + ')', font: { size: 12 } },
            legend: { x: 1, xanchor: 'right', y: 1 }, xaxis: { title: { text: 'singular vector of B (by rank)' }, type: 'log' },
            yaxis: { title: { text: 'fraction captured' }, range: [0, 1.02] } });
    });
}

function loadOverlap() {
    panels.overlap.load([apiUrl('v1/overlap', Object.assign(pairParams(), { bins: state.obins, blur: state.blur }))], (res) =>
        plot(panels.overlap.plot, [heatmap(res.overlap, centres(res.col_edges).map((v) => v + 1), centres(res.row_edges).map((v) => v + 1),
            { colorbar: { title: { text: 'overlap²' }, thickness: 12 }, hovertemplate: 'A ≈%{y:.0f}, B ≈%{x:.0f}: %{z:.4g}<extra></extra>' })],
        { title: { text: res.input.a.id + ' × ' + res.input.b.id + ', ' + res.input.bins + ' bins, blur ' + res.input.blur, font: { size: 12 } },
            xaxis: { title: { text: 'singular vector of B' } }, yaxis: { title: { text: 'singular vector of A' }, autorange: 'reversed' } }));
}

// ------------------------------------------------------------------ tab: layers and heads
function buildHeads(root) {
    const bar = el('div', { class: 'toolbar' });
    bar.append(control('model', 'model', { choices: models.map((m) => m.name) }, () => { state.head = ''; writeHash(); buildHeadsPanels(); }),
        el('span', { class: 'hint' }, 'Click a head in the grid or the ranking to see its attention pattern.'));
    root.append(bar);
    const grid = el('div', { class: 'grid', id: 'heads-grid' });
    root.append(grid);
    buildHeadsPanels();
}

function buildHeadsPanels() {
    const grid = document.getElementById('heads-grid');
    for (const id of ['layers', 'ranking', 'grid', 'pattern']) if (panels[id]) { Plotly.purge(panels[id].plot); delete panels[id]; }
    grid.textContent = '';
    new Panel('layers', 'Alignment of each layer\'s weights with W_pos\'s top-k subspace', grid);
    new Panel('ranking', 'Positional-only attention: heads ranked by previous-position score', grid);
    new Panel('grid', 'Previous-position score, layer × head', grid);
    const pattern = new Panel('pattern', 'One head\'s attention pattern (from positions alone)', grid);
    pattern.controls.append(control('bins', 'hbins', { size: 4 }, loadPattern));
    loadLayers();
    loadRanking();
}

function posMatrix() {
    const m = models.find((x) => x.name === state.model);
    const wpe = m && m.matrices.find((x) => x.name === 'wpe');
    return wpe ? wpe.id : state.model + '/wpe';
}

function loadLayers() {
    const url = apiUrl('v1/alignment/layers', { model: state.model, r: posMatrix(), r_rows: '1:', r_center: 'columns', k: state.k });
    panels.layers.load([url], (res) => {
        const kinds = ['q', 'k', 'v', 'o'];
        const ylabels = [], z = [];
        let ms = [];
        for (const layer of res.layers)
            for (const kind of kinds) {
                if (!layer[kind]) continue;
                ms = layer[kind].top_mean.map((t) => 'top ' + t.m);
                ylabels.push('L' + layer.layer + ' ' + kind.toUpperCase());
                z.push(layer[kind].top_mean.map((t) => t.mean));
            }
        return plot(panels.layers.plot, [heatmap(z, ms, ylabels, { zmin: 0, zmax: 1, colorbar: { title: { text: 'mean capture' }, thickness: 12 },
            texttemplate: '%{z:.2f}', hovertemplate: '%{y}, %{x} singular vectors: %{z:.4f}<extra></extra>' })],
        { title: { text: 'W_pos ' + res.input.r.id + ' top-' + res.input.k + ' (baseline k/d = ' + fmt(res.baseline, 3) + ')', font: { size: 12 } },
            yaxis: { autorange: 'reversed', type: 'category' }, xaxis: { type: 'category' }, margin: { l: 70, r: 20, t: 30, b: 40 } });
    });
}

function headLabel(h) {
    return 'L' + h.layer + 'H' + h.head;
}

function loadRanking() {
    panels.ranking.load([apiUrl('v1/attention/ranking', { model: state.model })], (res) => {
        const heads = res.heads;
        const top = heads.slice(0, 24);
        const nl = Math.max(...heads.map((h) => h.layer)) + 1, nh = Math.max(...heads.map((h) => h.head)) + 1;
        const z = Array.from({ length: nl }, () => new Array(nh).fill(null));
        for (const h of heads) z[h.layer][h.head] = h.prev;
        if (!state.head) {
            state.head = heads[0].layer + ':' + heads[0].head;
            writeHash();
        }
        const drawn = Promise.all([
            plot(panels.ranking.plot, [{ type: 'bar', x: top.map(headLabel), y: top.map((h) => h.prev), customdata: top.map((h) => h.layer + ':' + h.head),
                marker: { color: top.map((h) => h.prev), colorscale: 'Viridis', cmin: 0, cmax: Math.max(...heads.map((h) => h.prev)) },
                hovertemplate: '%{x}: previous %{y:.4f}<extra></extra>' }],
            { margin: { l: 60, r: 20, t: 20, b: 80 }, xaxis: { title: { text: 'head (rank order)', standoff: 12 }, type: 'category', automargin: true }, yaxis: { title: { text: 'attention to the previous position' } } }),
            plot(panels.grid.plot, [heatmap(z, Array.from({ length: nh }, (_, i) => i), Array.from({ length: nl }, (_, i) => i),
                { colorbar: { title: { text: 'prev' }, thickness: 12 }, texttemplate: nh * nl <= 48 ? '%{z:.0%}' : '',
                    textfont: { size: 9 }, xgap: 1, ygap: 1,
                    hovertemplate: 'layer %{y}, head %{x}: %{z:.4f}<extra></extra>' })],
            { xaxis: { title: { text: 'head' }, dtick: 1 }, yaxis: { title: { text: 'layer' }, dtick: 1, autorange: 'reversed' } }),
        ]);
        return drawn.then(() => {
            panels.grid.fed(panels.ranking);
            const pick = (ev) => {
                const p = ev && ev.points && ev.points[0];
                if (!p) return;
                state.head = p.customdata !== undefined ? String(p.customdata) : p.y + ':' + p.x;
                writeHash();
                loadPattern();
            };
            panels.ranking.plot.on('plotly_click', pick);
            panels.grid.plot.on('plotly_click', pick);
            loadPattern();
        });
    });
}

function loadPattern() {
    const [layer, head] = state.head.split(':');
    panels.pattern.load([apiUrl('v1/attention/pattern', { model: state.model, layer, head, bins: state.hbins })], (res) =>
        plot(panels.pattern.plot, [heatmap(res.values, centres(res.col_edges), centres(res.row_edges),
            { colorbar: { title: { text: 'attention' }, thickness: 12 }, hovertemplate: 'query ≈%{y:.0f}, key ≈%{x:.0f}: %{z:.4g}<extra></extra>' })],
        { title: { text: state.model + ' layer ' + res.input.layer + ' head ' + res.input.head + ' (positions only, binned mean)', font: { size: 12 } },
            xaxis: { title: { text: 'key position' } }, yaxis: { title: { text: 'query position' }, autorange: 'reversed', scaleanchor: 'x' } }));
}

// ------------------------------------------------------------------ tab: side by side
function buildCompare(root) {
    const bar = el('div', { class: 'toolbar' });
    bar.append(control('matrices', 'cmp', { size: 44, title: 'comma-separated model/matrix ids (at most 8)' }, loadCompare),
        control('rows (one per matrix)', 'cmp_rows', { size: 8 }, loadCompare),
        control('analysis', 'cmp_an', { choices: [['pca', 'PCA (3-D)'], ['spectrum', 'spectrum']] }, loadCompare));
    root.append(bar);
    new Panel('compare', 'Side by side', root, { wide: true });
    loadCompare();
}

function loadCompare() {
    const pca = state.cmp_an === 'pca';
    const url = apiUrl('v1/compare', { matrices: state.cmp, analysis: state.cmp_an, rows: state.cmp_rows, k: pca ? 3 : '' });
    panels.compare.load([url], (res) => {
        const n = res.results.length;
        if (pca) {
            const traces = [], lay = { margin: { l: 0, r: 0, t: 30, b: 0 }, showlegend: false, annotations: [] };
            res.results.forEach((r, i) => {
                const idx = r.rows.map((x) => x.index);
                const c = { color: idx, colorscale: TWILIGHT, cmin: Math.min(...idx), cmax: Math.max(...idx) };
                const scene = 'scene' + (i ? i + 1 : '');
                traces.push({ type: 'scatter3d', mode: 'lines+markers', scene, x: r.rows.map((x) => x.coords[0]), y: r.rows.map((x) => x.coords[1]),
                    z: r.rows.map((x) => x.coords[2]), customdata: idx, marker: Object.assign({ size: 2 }, c), line: Object.assign({ width: 2 }, c),
                    hovertemplate: r.input.matrix.id + ' row %{customdata}<extra></extra>' });
                const pct = (j) => 'PC' + (j + 1) + ' ' + (100 * r.explained_variance_ratio[j]).toFixed(0) + '%';
                lay[scene] = { domain: { x: [i / n, (i + 1) / n], y: [0, 0.92] }, aspectmode: 'data',
                    xaxis: { title: { text: pct(0) } }, yaxis: { title: { text: pct(1) } }, zaxis: { title: { text: pct(2) } } };
                lay.annotations.push({ text: r.input.matrix.id + ' (' + r.input.matrix.rows + ')', x: (i + 0.5) / n, y: 1, xref: 'paper', yref: 'paper',
                    showarrow: false, font: { size: 13 } });
            });
            return plot(panels.compare.plot, traces, lay);
        }
        const traces = [];
        res.results.forEach((r) => {
            const x = r.singular_values.map((_, i) => i + 1);
            traces.push({ type: 'scatter', mode: 'lines', x, y: r.singular_values.map((v) => v / r.singular_values[0]), name: r.input.matrix.id + ' σ/σ₁' });
            traces.push({ type: 'scatter', mode: 'lines', x, y: r.cumulative, xaxis: 'x2', yaxis: 'y2', name: r.input.matrix.id + ' cumulative' });
        });
        return plot(panels.compare.plot, traces, { grid: { rows: 1, columns: 2, pattern: 'independent' },
            xaxis: { title: { text: 'component' }, type: 'log' }, yaxis: { title: { text: 'σ / σ₁' }, type: 'log' },
            xaxis2: { title: { text: 'components' }, type: 'log' }, yaxis2: { title: { text: 'cumulative explained variance' }, range: [0, 1.02] } });
    });
}

// ------------------------------------------------------------------ tab: periodicity and outliers
function buildPeriodic(root) {
    const bar = el('div', { class: 'toolbar' });
    bar.append(control('matrix', 'm', { choices: matrixChoices() }, () => { loadPeriodicity(); loadOutliers(); }),
        control('rows', 'rows', { size: 6 }, loadPeriodicity),
        control('components', 'pk', { size: 3 }, loadPeriodicity),
        control('outlier threshold', 'threshold', { size: 4, title: 'robust z-score (median/MAD) above which a row norm is flagged' }, loadOutliers));
    root.append(bar);
    const grid = el('div', { class: 'grid' });
    root.append(grid);
    new Panel('periodicity', 'Periodicity of the top principal components', grid);
    new Panel('outliers', 'Row norms and outliers', grid);
    loadPeriodicity();
    loadOutliers();
}

function table(head, rows) {
    return el('table', { class: 'values' }, el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c))))));
}

function loadPeriodicity() {
    const url = apiUrl(matrixPath(state.m, 'periodicity'), { rows: state.rows, k: state.pk });
    panels.periodicity.load([url], (res) => {
        const comps = res.components;
        const extra = panels.periodicity.root.querySelector('table');
        if (extra) extra.remove();
        const num = (v, d) => (v === null || v === undefined ? '—' : fmt(v, d));
        const p = (c) => (c.significance ? num(c.significance.p_value, 3) : '—');
        panels.periodicity.plot.before(table(['component', 'period (rows)', 'cycles', 'peak share', 'p (Fisher g)', 'no period because'],
            comps.map((c) => ['PC' + (c.index + 1), num(c.period), num(c.cycles), num(c.peak_share, 3), p(c), c.no_period_reason || ''])));
        return plot(panels.periodicity.plot, [{ type: 'bar', x: comps.map((c) => 'PC' + (c.index + 1)), y: comps.map((c) => c.period),
            marker: { color: comps.map((c) => c.peak_share), colorscale: 'Viridis', cmin: 0, cmax: 1, showscale: true,
                colorbar: { title: { text: 'peak share' }, thickness: 12 } },
            hovertemplate: '%{x}: period %{y:.1f} rows<extra></extra>' }],
        { title: { text: res.input.matrix.id + ' rows ' + res.input.matrix.rows + ': ' + fmt(res.turns, 3) + ' helix turns in the PC' +
            (res.turn_plane[0] + 1) + '/PC' + (res.turn_plane[1] + 1) + ' plane', font: { size: 12 } },
        yaxis: { title: { text: 'dominant period (rows)' } } });
    });
}

function loadOutliers() {
    const url = apiUrl(matrixPath(state.m, 'outliers'), { threshold: state.threshold });
    panels.outliers.load([url], (res) => {
        const flagged = new Set(res.flagged);
        return plot(panels.outliers.plot, [
            { type: 'scatter', mode: 'markers', x: res.rows, y: res.norms, name: 'row norm',
                marker: { size: 4, color: res.rows.map((r) => (flagged.has(r) ? '#d7301f' : '#3b528b')) },
                customdata: res.scores, hovertemplate: 'row %{x}: norm %{y:.5g}, score %{customdata:.3g}<extra></extra>' }],
        { showlegend: false, title: { text: res.n_flagged + ' rows flagged (red) at robust z > ' + res.threshold + '; median norm ' + fmt(res.median), font: { size: 12 } },
            xaxis: { title: { text: 'row' } }, yaxis: { title: { text: 'L2 norm' } } });
    });
}

// ------------------------------------------------------------------ tabs
const TABS = [
    ['geometry', 'Helix, spectrum, cosine', buildGeometry],
    ['capture', 'Capture & overlap', buildCapture],
    ['heads', 'Layers & heads', buildHeads],
    ['compare', 'Side by side', buildCompare],
    ['periodic', 'Periodicity & outliers', buildPeriodic],
];

function showTab(name) {
    const tab = TABS.find((t) => t[0] === name) || TABS[0];
    state.tab = tab[0];
    writeHash();
    for (const b of document.querySelectorAll('#tabs button'))
        b.setAttribute('aria-selected', String(b.dataset.tab === tab[0]));
    for (const p of Object.values(panels)) Plotly.purge(p.plot);
    for (const k of Object.keys(panels)) delete panels[k];
    const main = document.getElementById('main');
    main.textContent = '';
    const root = el('div', { class: 'tab', id: 'tab-' + tab[0], role: 'tabpanel' });
    main.append(root);
    tab[2](root);
}

async function start() {
    readHash();
    const nav = document.getElementById('tabs');
    for (const [name, title] of TABS)
        nav.append(el('button', { type: 'button', role: 'tab', 'data-tab': name, onclick: () => showTab(name) }, title));
    try {
        const [root, list] = await Promise.all([fetchJson('v1'), fetchJson('v1/models')]);
        limits = root.limits || {};
        models = list.models;
        matrixIds = models.flatMap((m) => m.matrices.map((x) => x.id));
    } catch (e) {
        const boot = document.getElementById('boot');
        boot.className = 'status error';
        boot.textContent = 'cannot list the models: ' + e.message;
        return;
    }
    showTab(state.tab);
    window.addEventListener('hashchange', () => {
        const before = JSON.stringify(state);
        readHash();
        if (JSON.stringify(state) !== before) showTab(state.tab);
    });
}

// For the browser tests and the curious: the panels, their data and timings.
window.embedscope = { panels, state, pending, showTab };
start();

// The embedscope dashboard. Every number drawn here comes from the daemon's API; this script
// only fetches, lays out and draws (no analysis is recomputed in the browser). All URLs are
// relative to the page, so it works at / and under a proxy prefix such as /embedscope/.
// The view state lives in the URL fragment (#tab=…&m=…): a link reproduces the view.
import { Chart, scaleTable } from './chart.js';
import { PointView } from './points.js';
import { addBookmarks, exportBookmarks, parseBookmarks, readBookmarks, removeBookmark } from './bookmarks.js';
import { categories, categoryBytes, isNumeric, labelLines, loadLabels, numericValues, positionsIn } from './labels.js';

// plotly is loaded on the first plot, after the next frame, as a script of its own: its evaluation
// is one main-thread task (0.2-0.4 s on a loaded machine), which must not run before the WebGL point
// view has painted nor delay the first fetches. Only the 2-D panels of the other tabs use it (a
// partial build, 1.2 MB): the geometry tab draws with chart.js (uPlot) and points.js, and the
// side-by-side PCA with points.js. index.html names it.
const PLOTLY_SRC = document.currentScript && document.currentScript.dataset.plotly;
let plotlyLoaded = null; // Promise of Plotly
function loadPlotly() {
    if (!plotlyLoaded) {
        plotlyLoaded = afterPaint().then(() => new Promise((resolve, reject) => {
            const script = el('script', { src: PLOTLY_SRC });
            script.onload = () => setTimeout(() => resolve(window.Plotly), 0);
            script.onerror = () => { plotlyLoaded = null; reject(new Error('the plotting script ' + PLOTLY_SRC + ' did not load')); };
            document.head.append(script);
        }));
    }
    return plotlyLoaded;
}

// Removes a plot drawn by plotly (if one was).
function purgePlot(div) {
    if (div.plotly) div.plotly.purge(div);
    delete div.plotly;
}

// Resolves once the frame now being prepared has been painted (a task after the next animation frame).
function afterPaint() {
    return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

// Resolves in a task of its own: plots waiting together each draw in their own task, so that no
// main-thread task holds several plotly draws (input and painting run between them).
// A performance mark for the benchmarks (bench/explorer.mjs reads them; nothing in the page does):
// embedscope:ID:data (a panel's replies have arrived), embedscope:ID:drawn (it has drawn them),
// embedscope:select (a row selected), embedscope:labels (the labels joined the points) and the
// point view's embedscope:points:first and embedscope:points:all (its first and last frame of a
// new data set).
export function mark(name) {
    if (performance.mark) performance.mark('embedscope:' + name);
}

function nextTask() {
    return new Promise((resolve) => setTimeout(resolve, 0));
}

// ------------------------------------------------------------------ colour maps
// Sequential: viridis (plotly's). Cyclic: a twilight-like map (light -> blue -> dark -> red ->
// light, equal lightness on both halves) for row indices, whose ends meet.
const TWILIGHT = [
    [0.000, '#e2d9e2'], [0.125, '#a6bbd0'], [0.250, '#6a8bc2'], [0.375, '#5b4ea6'],
    [0.500, '#2f1436'], [0.625, '#7d2b5b'], [0.750, '#b65448'], [0.875, '#d2a08a'], [1.000, '#e2d9e2'],
];
// viridis at nine stops (matplotlib's values): dark violet to yellow, both ends distinct.
const VIRIDIS = [
    [0.000, '#440154'], [0.125, '#472d7b'], [0.250, '#3b528b'], [0.375, '#2c728e'],
    [0.500, '#21918c'], [0.625, '#28ae80'], [0.750, '#5ec962'], [0.875, '#addc30'], [1.000, '#fde725'],
];
const COLORMAPS = { twilight: TWILIGHT, viridis: VIRIDIS };

// ------------------------------------------------------------------ view state (URL fragment)
const DEFAULTS = {
    tab: 'geometry',
    m: 'gpt2-small/wpe', rows: '1:', exclude: '', center: 'columns', average: '',
    proj: 'pca', pc: '1,2,3', dim: '3', cmap: 'viridis', cam: '', nk: '10', nmetric: 'cosine', nspace: 'full', line: '1', row: '100', bins: '',
    a: 'gpt2-small/wpe', a_rows: '1:', a_center: 'columns', b: 'gpt2-small/h0.q', b_center: 'none',
    k: '10', obins: '64', blur: '1',
    model: 'gpt2-small', head: '', hbins: '64',
    cmp: 'gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe', cmp_rows: '1:;;', cmp_an: 'pca',
    threshold: '3.5', pk: '3',
    colorby: '', show: '', q: '', qre: '0', qcase: '0', qcol: '',
    async: '0',
};
const state = Object.assign({}, DEFAULTS);

// The default of a key in the current state: a matrix's selection and line follow that matrix
// (a hand-written #m=mine/wte must not inherit the first matrix's rows=1:), the rest DEFAULTS.
function defaultOf(key) {
    if (key === 'rows') return defaultRows(state.m);
    if (key === 'a_rows') return defaultRows(state.a);
    if (key === 'line') return defaultLine(state.m);
    return DEFAULTS[key];
}
const MATRIX_DEPENDENT = ['rows', 'a_rows', 'line'];

function readHash() {
    const h = new URLSearchParams(location.hash.replace(/^#/, ''));
    for (const key of Object.keys(DEFAULTS))
        if (!MATRIX_DEPENDENT.includes(key)) state[key] = h.has(key) ? h.get(key) : DEFAULTS[key];
    for (const key of MATRIX_DEPENDENT) state[key] = h.has(key) ? h.get(key) : defaultOf(key);
}

// Record the state in the URL: 'push' for a change of view (Back returns to the one before),
// else in place (the camera while it moves, defaults filled in).
function writeHash(mode) {
    const h = new URLSearchParams();
    for (const key of Object.keys(DEFAULTS))
        if (state[key] !== defaultOf(key))
            h.set(key, state[key]);
    const text = h.toString();
    const url = location.pathname + location.search + (text ? '#' + text : '');
    if (url !== location.pathname + location.search + location.hash)
        history[mode === 'push' ? 'pushState' : 'replaceState'](null, '', url);
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
        writeHash('push');
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

// A computing request the daemon answers later: 202 Accepted with the job's Location
// (GET v1/jobs/{id}, the job document of src/api/jobdoc.c: `state` queued | running | done |
// failed | cancelled, `progress.fraction`, `error` the problem of a failed job). The page polls
// the Location, waiting what Retry-After says (1 s when it says nothing), tells
// onProgress(job) each time, and never asks the analysis again while it runs: a done job answers
// 303 to its result, which the page follows (relative to itself) with the panel's own Accept, so
// an NPY result is read as NPY and a JSON one as JSON (the daemon serves the reply the job kept).
// A failed job throws its problem; a cancelled one a problem saying so. The job URL is taken
// relative to the page, so it works under a proxy prefix.
// async=1 in the page's fragment (#…&async=1) sends `Prefer: respond-async` with every request,
// so every uncached analysis goes through a job (the browser test uses it; so can anyone who
// wants to watch one). In the fragment, not the query: the daemon's page takes no parameters.
const sleep = (ms, signal) => new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); reject(new DOMException('aborted', 'AbortError')); }, { once: true });
});

// Seconds from a Retry-After header (a number of seconds; the daemon sends no dates), bounded.
function retryAfterMs(res, dflt) {
    const s = Number(res.headers.get('Retry-After'));
    return 1000 * Math.min(10, Math.max(0.2, Number.isFinite(s) && s > 0 ? s : dflt));
}

// A daemon path (/v1/…, as a Location or a job's url) relative to the page: under a proxy's
// prefix the page's base supplies it.
function relative(path) {
    return String(path).replace(/^.*?\/?(v1\/)/, '$1');
}

// The job's URL relative to the page: the path from v1/jobs/ on of its Location, else its id.
function jobUrl(location, doc) {
    if (location && /v1\/jobs\//.test(location)) return location.replace(/^.*?\/?(v1\/jobs\/)/, '$1');
    return doc && doc.id ? 'v1/jobs/' + encodeURIComponent(doc.id) : null;
}

// The problem a finished job that has no result carries (failed: its `error`; cancelled).
function jobProblem(job) {
    if (job.state === 'failed') {
        const doc = job.error || { title: 'The job failed', detail: 'the daemon kept no problem document for it' };
        return new Problem(doc, doc.status || 500);
    }
    return new Problem({ title: 'The job was ' + job.state, detail: 'job ' + job.id + ' ended ' + job.state + ' without a result' }, 409);
}

async function fetchSettled(url, signal, accept, onProgress) {
    const headers = { Accept: accept };
    if (state.async === '1') headers.Prefer = 'respond-async';
    const res = await fetch(url, { signal, headers });
    if (res.status !== 202) return res;
    // Let go of (a newer view, every panel sharing it gone): cancel the job, as closing the
    // connection cancels a request answered at once, so that the daemon stops work nobody waits
    // for. From the 202's headers on: a view left while its body is read cancels too.
    let where = jobUrl(res.headers.get('Location'), null);
    const cancel = () => { if (where) fetch(where, { method: 'DELETE' }).catch(() => {}); };
    if (signal && signal.aborted) cancel(); // left between the headers and this line
    else if (signal) signal.addEventListener('abort', cancel, { once: true });
    try {
        const job = await res.json().catch((e) => { if (signal && signal.aborted) throw e; return {}; });
        where = where || jobUrl(null, job);
        if (!where) throw new Problem({ title: 'Accepted without a job', detail: '202 with neither a Location nor a job id' }, 202);
        return await followJob(where, job, retryAfterMs(res, 1), url, signal, accept, onProgress);
    } finally {
        if (signal) signal.removeEventListener('abort', cancel);
    }
}

async function followJob(where, job, wait, url, signal, accept, onProgress) {
    for (;;) {
        if (onProgress) onProgress(job);
        await sleep(wait, signal);
        // redirect: manual, so that the 303 is followed relative to the page (its Location is
        // the daemon's absolute path, which would leave a proxy's prefix).
        const next = await fetch(where, { signal, headers: { Accept: 'application/json' }, cache: 'no-store', redirect: 'manual' });
        if (next.type === 'opaqueredirect' || next.status === 303) // done: its result, in the format the panel asked
            return fetch(relative(job.result || job.url || url), { signal, headers: { Accept: accept } });
        if (!next.ok) return next; // the job is gone (404) or the poll refused: the panel shows the problem
        job = await next.json();
        if (job.state === 'done') // a record that says done without its 303
            return fetch(relative(job.result || job.url), { signal, headers: { Accept: accept } });
        if (job.state !== 'queued' && job.state !== 'running') throw jobProblem(job);
        wait = retryAfterMs(next, 1);
    }
}

async function fetchJson(url, signal, onProgress) {
    const res = await fetchSettled(url, signal, 'application/json', onProgress);
    const type = res.headers.get('Content-Type') || '';
    if (!res.ok) {
        let doc = { title: res.statusText, status: res.status };
        if (type.includes('json')) doc = await res.json();
        else doc.detail = (await res.text()).slice(0, 300);
        throw new Problem(doc, res.status);
    }
    return res.json();
}

async function fetchText(url, signal) {
    const res = await fetchSettled(url, signal, 'text/plain, */*');
    if (!res.ok) {
        const doc = (res.headers.get('Content-Type') || '').includes('json') ? await res.json() : { title: res.statusText, status: res.status };
        throw new Problem(doc, res.status);
    }
    return res.text();
}

// A NumPy .npy reply (the daemon's format=npy: little-endian float64, C order) as
// { shape, data: Float64Array }. Throws on anything else, so a changed format cannot be misread.
export function parseNpy(buffer) {
    const bytes = new Uint8Array(buffer);
    if (bytes[0] !== 0x93 || String.fromCharCode(...bytes.subarray(1, 6)) !== 'NUMPY') throw new Error('not an .npy reply');
    const major = bytes[6];
    const view = new DataView(buffer);
    const hlen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
    const start = major === 1 ? 10 : 12;
    const header = new TextDecoder().decode(bytes.subarray(start, start + hlen));
    if (!/'descr':\s*'<f8'/.test(header) || /'fortran_order':\s*True/.test(header)) throw new Error('unexpected .npy layout: ' + header);
    const shape = (header.match(/'shape':\s*\(([^)]*)\)/)[1].match(/\d+/g) || []).map(Number);
    const offset = start + hlen, count = shape.reduce((a, b) => a * b, 1);
    const data = offset % 8 === 0 ? new Float64Array(buffer, offset, count) : new Float64Array(buffer.slice(offset, offset + count * 8));
    return { shape, data };
}

async function fetchNpy(url, signal, onProgress) {
    const res = await fetchSettled(url, signal, 'application/x-npy', onProgress);
    if (!res.ok) {
        const type = res.headers.get('Content-Type') || '';
        let doc = { title: res.statusText, status: res.status };
        if (type.includes('json')) doc = await res.json();
        throw new Problem(doc, res.status);
    }
    return parseNpy(await res.arrayBuffer());
}

// Fetch a panel's request: NPY for format=npy URLs, else JSON. Panels asking for the same URL at
// the same time share one request (the PCA panel reads the spectrum's reply for its variance and
// the rows the daemon resolved): each gets the parsed reply (read-only), each sees the job's
// progress, and the request is cancelled only when every panel sharing it has let go (a newer
// view), so that the daemon still stops work nobody waits for.
const inflight = new Map(); // url -> { promise, users, controller, listeners }
function fetchAny(url, signal, onProgress) {
    let e = inflight.get(url);
    if (!e) {
        const controller = new AbortController();
        const listeners = new Set();
        const progress = (doc) => listeners.forEach((f) => f(doc));
        const promise = /[?&]format=npy(&|$)/.test(url) ? fetchNpy(url, controller.signal, progress) : fetchJson(url, controller.signal, progress);
        e = { promise, users: 0, controller, listeners };
        inflight.set(url, e);
        const done = () => { if (inflight.get(url) === e) inflight.delete(url); };
        promise.then(done, done);
    }
    const entry = e;
    entry.users++;
    if (onProgress) entry.listeners.add(onProgress);
    return new Promise((resolve, reject) => {
        const leave = () => {
            entry.listeners.delete(onProgress);
            if (--entry.users === 0 && inflight.get(url) === entry) { inflight.delete(url); entry.controller.abort(); }
            reject(new DOMException('aborted', 'AbortError'));
        };
        if (signal) {
            if (signal.aborted) { leave(); return; }
            signal.addEventListener('abort', leave, { once: true });
        }
        entry.promise.then((v) => { if (signal) signal.removeEventListener('abort', leave); resolve(v); },
            (err) => { if (signal) signal.removeEventListener('abort', leave); reject(err); });
    });
}

// The rows of a selection as the daemon resolved them, decoded from its canonical text (the
// `input.matrix.rows` of every analysis answer, src/store/rowsel.c es_rows_canonical:
// comma-separated runs "a", "a:stop", "a:stop:step", and "a::step" for a descending run down to
// row 0). The page never resolves a user's rows=/exclude= itself: the daemon's rules stay the
// daemon's (a copy had drifted: it accepted rows=0:5,3 and 0:0, which the daemon refuses), and
// what the daemon refuses the panel shows as its 400.
export function canonicalRows(text) {
    const out = [];
    for (const part of String(text).split(',')) {
        if (part === '') continue;
        const [a, b, c] = part.split(':').map((v) => (v === undefined || v === '' ? null : Number(v)));
        if (!part.includes(':')) { out.push(a); continue; }
        const step = c === null || c === undefined ? 1 : c;
        const stop = b === null || b === undefined ? -1 : b;
        for (let i = a; step > 0 ? i < stop : i > stop; i += step) out.push(i);
    }
    return out;
}

// The selection the daemon last resolved for the geometry tab's matrix and rows (from the PCA's
// or the spectrum's answer): { key, index, n }.
let resolved = { key: '', index: null, n: 0 };
function selectionKey() {
    return [state.m, state.rows, state.exclude, state.average].join('\n');
}
function learnSelection(input) {
    const m = input && input.matrix;
    if (!m || m.id !== state.m || typeof m.rows !== 'string') return;
    const index = canonicalRows(m.rows);
    resolved = { key: selectionKey(), index: index.length === m.n_rows ? index : null, n: m.n_rows };
}

// While a panel waits more than a second, GET v1/jobs each second and let the pending panels
// say which decomposition they wait for and for how long it has run.
let jobsTimer = null;
function watchJobs() {
    if (jobsTimer) return;
    jobsTimer = setTimeout(async function poll() {
        if (pending.size === 0) { jobsTimer = null; return; }
        try {
            const doc = await fetchJson('v1/jobs');
            for (const p of pending) if (p.onJobs) p.onJobs(doc.jobs || []);
        } catch (e) { /* progress is a nicety: the panel still waits for its answer */ }
        jobsTimer = setTimeout(poll, 1000);
    }, 1000);
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
            role: 'figure', 'aria-label': title });
        this.status = el('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
        this.requestLine = el('code', { class: 'request' });
        this.caption = el('p', { class: 'caption' });
        this.controls = el('div', { class: 'controls' });
        this.toast = el('div', { class: 'status note toast', role: 'status', hidden: true });
        const copy = el('button', { type: 'button', onclick: () => this.copyCurl() }, 'copy as curl');
        const png = el('button', { type: 'button', onclick: () => this.png() }, 'PNG');
        const json = el('button', { type: 'button', onclick: () => this.download() }, 'data');
        this.root = el('section', { class: 'panel' + (opts && opts.wide ? ' wide' : '') + (opts && opts.span ? ' span' : ''), id: 'panel-' + id,
            'aria-labelledby': 'title-' + id },
        el('div', { class: 'head' }, el('h2', { id: 'title-' + id }, title),
            el('span', { class: 'tools' }, copy, opts && opts.list ? null : png, json)),
        this.controls, this.status, this.toast, this.plot, this.caption, this.requestLine);
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
        if (this.chart) {
            saveAs(this.chart.toPNG(), 'embedscope-' + this.id + '.png');
            return;
        }
        const bg = getComputedStyle(document.body).getPropertyValue('--panel').trim() || '#fff';
        if (this.view) {
            saveAs(this.view.toPNG(bg), 'embedscope-' + this.id + '.png');
            return;
        }
        if (this.views) { // side by side: the views in a row, as on the screen
            const shots = this.views.map((v) => v.toCanvas(bg));
            const out = el('canvas', { width: shots.reduce((a, c) => a + c.width, 0), height: Math.max(...shots.map((c) => c.height)) });
            const ctx = out.getContext('2d');
            ctx.fillStyle = bg;
            ctx.fillRect(0, 0, out.width, out.height);
            shots.reduce((x, c) => { ctx.drawImage(c, x, 0); return x + c.width; }, 0);
            saveAs(out.toDataURL('image/png'), 'embedscope-' + this.id + '.png');
            return;
        }
        const gd = this.plot.querySelector('.js-plotly-plot') || this.plot;
        if (gd.data && this.plot.plotly) this.plot.plotly.downloadImage(gd, { format: 'png', filename: 'embedscope-' + this.id, scale: 2 });
    }

    // The panel's main reply as the daemon sent it (the last request: JSON, or NPY for the
    // point view's coordinates), saved under a name that says which.
    // A panel waiting for a click downloads the reply it would draw (asking for it is the click).
    async download() {
        const url = this.urls[this.urls.length - 1];
        if (!url) { this.say('nothing to download: this panel has made no request'); return; }
        const npy = /[?&]format=npy(&|$)/.test(url);
        this.say('data: asking the daemon for ' + url);
        try {
            const res = await fetchSettled(url, undefined, npy ? 'application/x-npy' : 'application/json',
                (job) => this.say('data: job ' + job.state + (job.progress ? ', ' + Math.floor(100 * job.progress.fraction) + ' % done' : '')));
            if (!res.ok) throw new Problem(await res.json().catch(() => ({ title: res.statusText })), res.status);
            const href = URL.createObjectURL(await res.blob());
            saveAs(href, 'embedscope-' + this.id + (npy ? '.npy' : '.json'));
            setTimeout(() => URL.revokeObjectURL(href), 1000);
            this.say('');
        } catch (e) {
            this.say('data: ' + (e instanceof Problem ? (e.doc.status || e.status) + ' ' + (e.doc.title || '') + ': ' : '') + e.message);
        }
    }

    // A line of its own for what the panel's buttons did (the status line may hold a button).
    say(text) {
        this.toast.textContent = text;
        this.toast.hidden = !text;
    }

    // An empty state that explains why nothing is drawn, with a button that starts it; urls
    // are the requests it would make (shown, and what "data" downloads).
    waitForClick(text, label, start, urls) {
        if (this.controller) this.controller.abort();
        this.clear();
        this.urls = urls || [];
        this.requestLine.textContent = this.curl();
        this.root.classList.remove('pending', 'failed');
        pending.delete(this);
        updateBusy();
        this.status.className = 'status note';
        this.status.textContent = text + ' ';
        this.status.append(el('button', { type: 'button', class: 'start', onclick: start }, label));
        this.root.dataset.waiting = '1';
    }

    clear() {
        if (this.view) { this.view.destroy(); this.view = null; }
        for (const v of this.views || []) v.destroy();
        this.views = null;
        this.plot.classList.remove('multi');
        if (this.chart) { this.chart.destroy(); this.chart = null; }
        purgePlot(this.plot);
        this.plot.textContent = '';
        this.caption.textContent = '';
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
        delete this.root.dataset.waiting;
        this.status.className = 'status pending';
        let progress = '', job = ''; // the decompositions it waits for (v1/jobs); its own 202 job's state
        const tick = () => {
            this.status.textContent = 'computing on the daemon… ' + ((performance.now() - t0) / 1000).toFixed(1) + ' s' + job + progress;
        };
        this.onJobs = (jobs) => { // the decompositions running for this panel's matrix (GET v1/jobs)
            // Its own matrix's decompositions when the URL names the matrix; else (layers, pairs,
            // compare) every running one, which is what the daemon is busy with.
            const mine = jobs.filter((j) => this.urls.some((u) => u.includes(matrixPath(j.key.split('@')[0]) + '/')));
            const shown = (mine.length ? mine : jobs).slice(0, 3);
            progress = shown.length ? ' · decomposing ' + shown.map((j) => j.key.split('@')[0] + ' ' + j.n_rows.toLocaleString('en') +
                ' × ' + j.d + ' (' + j.method + (j.fraction !== null && j.fraction !== undefined ? ', ' + Math.round(100 * j.fraction) + ' %' : '') +
                ', ' + j.elapsed_s.toFixed(1) + ' s)').join(', ') + (jobs.length > shown.length ? ' and ' + (jobs.length - shown.length) + ' more' : '') : '';
        };
        const onProgress = (doc) => { // a 202 job's document (v1/jobs/{id})
            const f = doc && doc.progress && doc.progress.fraction;
            job = ' · job ' + (doc && doc.state || 'accepted') + (typeof f === 'number' ? ', ' + Math.floor(100 * f) + ' % done' : '');
            if (controller === this.controller && this.root.classList.contains('pending') && !this.root.classList.contains('failed')) tick();
        };
        tick();
        const timer = setInterval(tick, 200);
        pending.add(this);
        updateBusy();
        watchJobs();
        try {
            const results = await Promise.all(urls.map((u) => fetchAny(u, controller.signal, onProgress)));
            if (controller !== this.controller) return;
            mark(this.id + ':data');
            clearInterval(timer); // the answer is here: no more "computing" while it draws
            this.data = results.length === 1 ? results[0] : results;
            this.status.textContent = '';
            this.status.className = 'status';
            const t1 = performance.now();
            await draw(...results);
            if (controller === this.controller) mark(this.id + ':drawn');
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
        this.clear();
    }
}

function saveAs(href, name) {
    const a = el('a', { href, download: name });
    document.body.append(a);
    a.click();
    a.remove();
}

// The page's colours (style.css, light or dark), for plotly and the point view.
function theme() {
    const css = getComputedStyle(document.body);
    const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
    return { fg: v('--fg', '#1d1d1f'), muted: v('--muted', '#5f6368'), line: v('--line', '#d9d9de'), panel: v('--panel', '#fff'),
        accent: v('--accent', '#31688e'), grid: v('--grid', '#eee') };
}

const BASE_LAYOUT = {
    margin: { l: 60, r: 20, t: 30, b: 50 },
};
const NARROW = window.matchMedia('(max-width: 700px)');
// No plotly logo, no scroll zoom, and only the modebar buttons that work offline (no
// "edit in Chart Studio"/"share"); the image button is the panel's PNG.
const CONFIG = { responsive: true, displaylogo: false, scrollZoom: false, showSendToCloud: false, showEditInChartStudio: false,
    displayModeBar: window.matchMedia('(max-width: 700px)').matches ? false : 'hover', // on a phone it would cover the titles
    modeBarButtonsToRemove: ['toImage', 'lasso2d', 'select2d'] };

function layout(extra) {
    const t = theme();
    const axis = { gridcolor: t.grid, zerolinecolor: t.line, linecolor: t.line };
    const base = Object.assign({}, BASE_LAYOUT, { font: { family: 'system-ui, sans-serif', size: 12, color: t.fg },
        paper_bgcolor: t.panel, plot_bgcolor: t.panel });
    const out = Object.assign(base, extra);
    if (NARROW.matches && out.title && out.title.text) // a phone: a smaller title that fits its line
        out.title = Object.assign({}, out.title, { font: { size: 10 } });
    for (const key of Object.keys(out)) if (/^[xy]axis\d*$/.test(key)) out[key] = Object.assign({}, axis, out[key]);
    if (!out.xaxis) out.xaxis = axis;
    if (!out.yaxis) out.yaxis = axis;
    return out;
}

// Draw with plotly; its modebar stays reachable by the pointer but out of the Tab order (the
// panel's own buttons come first, and eight icon buttons per plot would bury the page).
function plot(div, traces, lay) {
    return loadPlotly().then((Plotly) => nextTask().then(() => Plotly)).then((Plotly) => {
        div.plotly = Plotly;
        return Plotly.react(div, traces, layout(lay), CONFIG);
    }).then((gd) => {
        for (const b of div.querySelectorAll('.modebar-btn')) b.setAttribute('tabindex', '-1');
        return gd;
    });
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

// The matrix ids for a picker; rowsOnly: those with more than one row (a bias or a layer-norm
// gain is one row: no PCA, no spectrum, no cosine curve to show).
function matrixChoices(rowsOnly) {
    return matrixIds.filter((id) => !rowsOnly || (matrixInfo(id) || { items: 2 }).items > 1).map((id) => [id, id]);
}

// A matrix picker (rebuilt when the catalogue changes). A new matrix starts from its own default
// selection (a row range or an exclusion kept from another matrix would be a 400 or a different
// question) and the selected row is clamped to it.
function matrixControl(label, key, onchange, rowsOnly) {
    const c = control(label, key, { choices: matrixChoices(rowsOnly) }, () => {
        if (key === 'm') {
            state.rows = defaultRows(state.m);
            state.line = defaultLine(state.m);
            state.exclude = '';
            state.average = '';
            clampRow();
            writeHash();
            for (const k of ['rows', 'exclude', 'average', 'line']) {
                const input = document.querySelector('#main [id$="-' + k + '"]');
                if (input) input.value = state[k];
            }
        }
        onchange();
    });
    c.querySelector('select').dataset.matrices = rowsOnly ? 'rows' : 'all';
    return c;
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
    const refresh = () => { loadNeighbors(); return Promise.all([loadProjection(), loadSpectrum()]).then(loadCosine); };
    geometryRefresh = refresh;
    bar.append(
        matrixControl('matrix', 'm', refresh, true),
        control('rows', 'rows', { placeholder: 'start:stop', title: 'Python slice of the rows, e.g. 1: (skip GPT-2\'s position 0)' }, refresh),
        control('exclude', 'exclude', { placeholder: 'i,j,…', size: 10 }, refresh),
        control('centring', 'center', { choices: ['columns', 'rows', 'none'] }, () => { loadPca(); loadSpectrum(); loadNeighbors(); }),
        control('average g', 'average', { placeholder: 'none', size: 4, title: 'average consecutive rows in groups of g' }, refresh));
    root.append(bar);
    const grid = el('div', { class: 'grid' });
    root.append(grid);

    const pca = new Panel('pca', 'PCA of the rows', grid, { tall: true, span: true });
    pca.controls.append(
        control('projection', 'proj', { choices: PROJECTIONS.map((p) => [p.id, p.label]),
            title: 'how the rows are placed in the point view' }, () => PROJECTIONS.find((p) => p.id === state.proj).load()),
        control('components', 'pc', { size: 6, placeholder: '1,2,3', title: 'which principal components (1-based)' },
            () => { loadPca(); if (state.nspace === 'pca') loadNeighbors(); }),
        control('view', 'dim', { choices: [['3', '3-D'], ['2', '2-D']] }, loadPca),
        control('colour', 'cmap', { choices: [['twilight', 'cyclic (twilight)'], ['viridis', 'sequential (viridis)']] }, loadPca),
        control('line', 'line', { choices: [['1', 'join consecutive rows'], ['0', 'points only']] }, loadPca),
        ...labelControls(),
        el('span', { class: 'control isolate', id: 'isolate' }));
    const nb = new Panel('neighbors', 'Nearest neighbours of the selected row', grid, { list: true });
    nb.controls.append(
        control('k', 'nk', { size: 3, title: 'how many neighbours (1 to 1000)' }, loadNeighbors),
        control('metric', 'nmetric', { choices: [['cosine', 'cosine'], ['euclidean', 'euclidean']] }, loadNeighbors),
        control('space', 'nspace', { choices: [['full', 'model space'], ['pca', 'the plotted PCA space']] }, loadNeighbors));
    new Panel('spectrum', 'Singular spectrum', grid, { wide: true, tall: NARROW.matches });
    const cosine = new Panel('cosine', 'Cosine similarity: binned matrix', grid);
    cosine.controls.append(control('bins', 'bins', { size: 5, placeholder: 'auto',
        title: 'bins per axis; empty: about one per two pixels of the panel; 0: one per row' }, loadCosine));
    new Panel('offset', 'Cosine similarity: mean by offset', grid);
    const rowPanel = new Panel('row', 'Cosine similarity of one row to the others', grid);
    rowPanel.controls.append(control('row', 'row', { size: 6, title: 'the row; or click a point in the PCA view' },
        () => { markSelected(); loadRow(); loadNeighbors(); }));
    refresh();
    setTimeout(() => { if (panels.pca === pca) pcaView(); }, 0); // a task of its own: regl compiles its commands
}

// The projections the point view offers: each an id (state.proj), a label and its loader (which
// fetches, then draws through drawPca with the row index of each point).
const PROJECTIONS = [
    { id: 'pca', label: 'PCA', load: () => loadPca() },
    { id: 'umap', label: 'UMAP', load: () => loadUmap() },
];
function loadProjection() {
    return (PROJECTIONS.find((p) => p.id === state.proj) || PROJECTIONS[0]).load();
}
let geometryRefresh = null; // the geometry tab's reload of every panel (a new selection)

// ------------------------------------------------------------------ isolate
// Isolate a set of rows: they become the selection (rows=, the daemon's slice syntax, runs of
// consecutive rows as a:b) and every panel is computed again on them: the PCA of the isolated
// rows, their spectrum, cosine and neighbours. The sets: the selected row with its listed
// neighbours, the search hits, the rows of the values shown in the legend. A selection is sent in
// the URL's query (the daemon's request line is at most 8 KB), so a set whose text is longer than
// ISOLATE_MAX_CHARS is refused with a note; "every row" goes back to the matrix's own selection.
const ISOLATE_MAX_CHARS = 6000;

export function rowsText(rows) {
    const r = Array.from(new Set(rows)).sort((a, b) => a - b);
    const parts = [];
    for (let i = 0; i < r.length;) {
        let j = i;
        while (j + 1 < r.length && r[j + 1] === r[j] + 1) j++;
        if (j - i >= 2) parts.push(r[i] + ':' + (r[j] + 1));
        else for (let t = i; t <= j; t++) parts.push(String(r[t]));
        i = j + 1;
    }
    return parts.join(',');
}

function isolate(rows) {
    const text = rowsText(rows);
    if (text.length > ISOLATE_MAX_CHARS) return;
    state.rows = text;
    state.exclude = '';
    state.average = '';
    state.show = '';
    if (!rows.includes(Number(state.row))) state.row = String(Math.min(...rows));
    writeHash('push');
    for (const k of ['rows', 'exclude', 'average', 'row']) {
        const input = document.querySelector('#main input[id$="-' + k + '"]');
        if (input) input.value = state[k];
    }
    if (geometryRefresh) geometryRefresh();
}

// The isolate buttons for the sets there are now.
function refreshIsolate() {
    const box = document.getElementById('isolate');
    const d = panels.pca && panels.pca.data;
    if (!box || !d || !d.index) return;
    const sets = [];
    const picked = [Number(state.row)].concat(neighbourRows || []).filter((r) => Number.isInteger(r));
    if (picked.length > 1) sets.push(['the selected row and its neighbours', picked]);
    if (searchRows.length) sets.push(['the ' + searchRows.length.toLocaleString('en') + ' search hits', searchRows]);
    if (d.cats && d.cats.shown) sets.push(['the values shown', positionsIn(d.cats, d.cats.shown).map((i) => d.index[i])]);
    box.textContent = '';
    if (sets.length) box.append(el('span', { class: 'label' }, 'isolate'));
    for (const [what, rows] of sets) {
        const fits = rowsText(rows).length <= ISOLATE_MAX_CHARS;
        box.append(el('button', { type: 'button', class: 'small', 'data-isolate': what, disabled: !fits || undefined,
            title: fits ? 'compute every panel again on these ' + rows.length.toLocaleString('en') + ' rows' :
                'these ' + rows.length.toLocaleString('en') + ' rows are too scattered to send in a URL (the daemon takes rows in the query)',
            onclick: () => isolate(rows) }, what + (what.startsWith('the values') ? ' (' + rows.length.toLocaleString('en') + ' rows)' : '')));
    }
    if (state.rows !== defaultRows(state.m) || state.exclude)
        box.append(el('button', { type: 'button', class: 'small', 'data-isolate': 'all', onclick: () => {
            state.rows = defaultRows(state.m);
            state.exclude = '';
            writeHash('push');
            const input = document.querySelector('#main input[id$="-rows"]');
            if (input) input.value = state.rows;
            const ex = document.querySelector('#main input[id$="-exclude"]');
            if (ex) ex.value = '';
            if (geometryRefresh) geometryRefresh();
        } }, 'every row'));
}

// The catalogue entry of a matrix id, or null.
function matrixInfo(id) {
    const [model, name] = String(id).split('/');
    const m = models.find((x) => x.name === model);
    return (m && m.matrices.find((x) => x.name === name)) || null;
}

// The rows the current selection picks (indices) as the daemon resolved them, or null before
// it has answered for this selection.
function currentRows() {
    return resolved.key === selectionKey() ? resolved.index : null;
}

// The PCA coordinates as NPY (n x k float64, 8 bytes a number instead of ~40 as JSON records)
// and the spectrum's reply (the same decomposition: its explained variance for the axis titles,
// and its input saying which rows the daemon resolved, their canonical text: the row index of
// each coordinate), shared with the spectrum panel, which asks for the same URL at the same time.
// The column JSON of the coordinates is the fallback when the two disagree (average=g). The labels are fetched at the
// same time and the points drawn without waiting for them: hover text, colour by and the
// neighbours' labels follow when they have arrived (attachLabels).
function loadPca() {
    if (!panels.pca) return undefined; // its tab was left before a chained load
    const pcs = components();
    const k = Math.max(...pcs);
    const params = Object.assign(selection(), { center: state.center, k });
    const info = matrixInfo(state.m);
    const coords = apiUrl(matrixPath(state.m, 'pca'), Object.assign({}, params, { format: 'npy' }));
    const variance = spectrumUrl();
    const labels = loadLabels(info, matrixPath(state.m, 'labels'), fetchText).catch(() => null);
    const panel = panels.pca;
    return panel.load([variance, coords], async (v, c) => {
        learnSelection(v.input);
        let index = currentRows();
        if (!index || index.length !== c.shape[0]) {
            const cols = await fetchJson(apiUrl(matrixPath(state.m, 'pca'), Object.assign({}, params, { orient: 'columns' })));
            index = cols.row;
        }
        const d = { index, coords: c.data, k: c.shape[1] || 1, explained_variance_ratio: v.explained_variance_ratio,
            cumulative: v.cumulative, labels: null, summary: info && info.labels, matrix: state.m };
        panel.data = d;
        delete panel.root.dataset.labels;
        await drawPca(d, pcs);
        labels.then((l) => { if (l && panels.pca === panel && panel.data === d) attachLabels(d, l); });
    });
}

// UMAP of the selected rows (the daemon's …/umap, 2-D or 3-D as the view): a job on a large
// matrix, whose progress the panel shows like any other. The rows come from the selection the
// spectrum reply names (the same rows, in order), as for the PCA.
function loadUmap() {
    if (!panels.pca) return undefined;
    const dims = state.dim === '2' ? 2 : 3;
    const params = Object.assign(selection(), { dims });
    const info = matrixInfo(state.m);
    const coords = apiUrl(matrixPath(state.m, 'umap'), Object.assign({}, params, { format: 'npy' }));
    const labels = loadLabels(info, matrixPath(state.m, 'labels'), fetchText).catch(() => null);
    const panel = panels.pca;
    return panel.load([spectrumUrl(), coords], async (v, c) => {
        learnSelection(v.input);
        let index = currentRows();
        if (!index || index.length !== c.shape[0]) {
            const cols = await fetchJson(apiUrl(matrixPath(state.m, 'umap'), Object.assign({}, params, { orient: 'columns' })));
            index = cols.row;
        }
        const d = { index, coords: c.data, k: c.shape[1] || 1, projection: 'umap', labels: null,
            summary: info && info.labels, matrix: state.m };
        panel.data = d;
        delete panel.root.dataset.labels;
        await drawPca(d, dims === 2 ? [1, 2] : [1, 2, 3]);
        labels.then((l) => { if (l && panels.pca === panel && panel.data === d) attachLabels(d, l); });
    });
}

// The labels have arrived: they join the drawn points (hover text, colours by a column, the
// neighbours' labels). data-labels="ready" on the panel says so (for the tests).
function attachLabels(d, labels) {
    d.labels = labels;
    const panel = panels.pca;
    if (state.colorby && labels.names.includes(state.colorby)) recolour();
    labelRowButtons();
    panel.root.dataset.labels = 'ready';
    mark('labels');
}

// Per-point RGBA bytes for values through a colour scale ([[t, '#rrggbb'], ...]), by a
// 256-entry lookup table (a few ms at 50k points; interpolating per point took tens).
function colourBytes(values, scale, lo, hi) {
    const lut = scaleTable(scale);
    const out = new Uint8Array(values.length * 4);
    const span = hi > lo ? hi - lo : 1;
    for (let i = 0; i < values.length; i++) {
        const t = (values[i] - lo) / span;
        const k = 3 * Math.round(255 * (t < 0 ? 0 : t > 1 ? 1 : t) || 0);
        out[i * 4] = lut[k];
        out[i * 4 + 1] = lut[k + 1];
        out[i * 4 + 2] = lut[k + 2];
        out[i * 4 + 3] = 255;
    }
    return out;
}

// A colour bar for the point view: the gradient and its two end values.
function colourBar(scale, lo, hi, title) {
    const gradient = 'linear-gradient(to top, ' + scale.map(([t, c]) => c + ' ' + (100 * t) + '%').join(', ') + ')';
    return el('div', { class: 'colourbar', 'aria-hidden': 'true' }, el('span', {}, title), el('span', {}, String(hi)),
        el('div', { class: 'ramp', style: 'background:' + gradient }), el('span', {}, String(lo)));
}

const PREPARE_ROWS = 16384; // rows of the PCA prepared in one task

async function drawPca(d, pcs) {
    const n = d.index.length, k = d.k, dim = pcs.length;
    const points = new Float32Array(n * dim);
    // In runs of rows, each in a task of its own: on a loaded machine the first pass over 50k
    // rows (still interpreted) took up to 200 ms.
    for (let s = 0; s < n; s += PREPARE_ROWS) {
        if (s) {
            await nextTask();
            if (!panels.pca || panels.pca.data !== d) return; // another view replaced it
        }
        for (let i = s; i < Math.min(n, s + PREPARE_ROWS); i++)
            for (let c = 0; c < dim; c++) points[i * dim + c] = d.coords[i * k + pcs[c] - 1];
    }
    const umap = d.projection === 'umap', axis = umap ? 'UMAP ' : 'PC';
    const label = (c) => umap ? axis + c : 'PC' + c + ' (' + (100 * d.explained_variance_ratio[c - 1]).toFixed(1) + '% var.)';
    const panel = pcaView();
    panel.plot.setAttribute('aria-label', (umap ? 'UMAP' : 'PCA') + ' of ' + state.m + ': ' + n + ' points');
    const title = document.getElementById('title-pca');
    if (title) title.textContent = (umap ? 'UMAP' : 'PCA') + ' of the rows';
    panel.view.opts.hoverText = (i) => [('row ' + panel.data.index[i])].concat(labelLines(panel.data.labels, panel.data.index[i]),
        pcs.map((c) => axis + c + ' ' + fmt(panel.data.coords[i * panel.data.k + c - 1], 5))).join('\n');
    refreshLabelControls(d.summary);
    const colouring = pointColours(d);
    // The upload and the first frame in a task of their own: at 50k points the preparation
    // above and the software GPU's first frame would otherwise make one long task.
    await nextTask();
    if (panel !== panels.pca || panel.data !== d) return;
    panel.view.setData({ points, dim, colours: colouring.colours, line: state.line === '1',
        axisTitles: pcs.map(label) });
    markSelected();
    showColouring(panel, colouring);
    refreshIsolate();
    panel.caption.textContent = state.m + ' rows ' + (state.rows || 'all') + ' (' + n + ' points), centred: ' + state.center +
        (dim === 3 ? ' · drag to rotate, Ctrl+wheel or +/− to zoom, click a point to select its row' : ' · drag to pan, click a point to select its row');
}

// The colour bar or legend of the point view, replacing the one before.
function showColouring(panel, colouring) {
    const bar = panel.plot.querySelector('.colourbar');
    if (bar) bar.remove();
    panel.plot.append(colouring.bar);
}

// Colour the drawn points again (a column to colour by, the legend's filter, the labels have
// arrived): new colours on the GPU, the same points.
function recolour() {
    const panel = panels.pca;
    if (!panel || !panel.view || !panel.data || !panel.view.n) return;
    const colouring = pointColours(panel.data);
    panel.view.setColours(colouring.colours);
    showColouring(panel, colouring);
    refreshIsolate();
}

// The PCA panel with its point view, made on first use: buildGeometry makes it while the first
// fetches are in flight, so that its WebGL context and shaders are ready (and compiled) when the
// points arrive.
function pcaView() {
    const panel = panels.pca;
    if (!panel.view) {
        panel.plot.textContent = '';
        panel.view = new PointView(panel.plot, {
            label: 'PCA of the rows',
            onPick: (i) => selectRow(panel.data.index[i]),
            onCamera: (text) => { state.cam = text; writeHash(); },
        });
        const cam = PointView.parseCamera(state.cam);
        if (cam) panel.view.setCamera(cam);
    }
    return panel;
}

// Highlight the selected row (and its neighbours, when listed) in the point view.
function markSelected() {
    const panel = panels.pca;
    if (!panel || !panel.view || !panel.data || !panel.data.index) return; // not while its replies are being drawn
    const at = positionOf(panel.data);
    const rows = [Number(state.row)].concat(neighbourRows || [], searchRows);
    panel.view.highlight(rows.map((r) => (r >= 0 && r < at.length ? at[r] : -1)).filter((i) => i >= 0));
}
let neighbourRows = [];

// Each row's position among the plotted points (-1: not plotted), made once per data.
function positionOf(d) {
    if (!d.positions) {
        let hi = -1;
        for (const r of d.index) if (r > hi) hi = r;
        d.positions = new Int32Array(hi + 1).fill(-1);
        d.index.forEach((r, i) => { if (d.positions[r] < 0) d.positions[r] = i; });
    }
    return d.positions;
}

// ------------------------------------------------------------------ labels: colour by, search
let searchRows = []; // the rows the last search matched (highlighted)
let searchFor = ''; // the matrix and query they belong to

// The PCA panel's label controls: "colour by" (row index or a metadata column) and a search
// (substring, or a regular expression: PCRE2 on the daemon) over any column, case-insensitive unless
// "match case" is ticked. They come from the catalogue's summary of the labels (names and
// types), so they are there before the labels themselves have arrived.
function labelControls() {
    const colourBy = el('select', { id: 'c-colorby', onchange: () => { state.colorby = colourBy.value; state.show = ''; writeHash('push'); recolour(); } },
        el('option', { value: '' }, 'row index'));
    const query = el('input', { id: 'c-q', type: 'search', size: 12, placeholder: 'text or regex', spellcheck: 'false',
        autocomplete: 'off', value: state.q, title: 'find rows by a column\'s cells (GET …/labels/search); Enter selects the first match' });
    const column = el('select', { id: 'c-qcol', title: 'the column searched' }, el('option', { value: '' }, 'label'));
    const regex = el('input', { id: 'c-qre', type: 'checkbox', title: 'regular expression (PCRE2, as the daemon matches it)' });
    const cased = el('input', { id: 'c-qcase', type: 'checkbox', title: 'match upper and lower case exactly' });
    regex.checked = state.qre === '1';
    cased.checked = state.qcase === '1';
    // One history entry a search: the query's change, then the row it selects, is one step back.
    const run = () => {
        state.q = query.value; state.qre = regex.checked ? '1' : '0'; state.qcase = cased.checked ? '1' : '0'; state.qcol = column.value;
        writeHash('push');
        runSearch(true);
    };
    for (const input of [query, regex, cased, column]) input.addEventListener('change', run);
    const found = el('span', { id: 'search-result', class: 'found', role: 'status', 'aria-live': 'polite' });
    return [el('span', { class: 'control label-only', hidden: true }, el('label', { for: 'c-colorby' }, 'colour by'), colourBy),
        el('span', { class: 'control label-only', hidden: true }, el('label', { for: 'c-q' }, 'search'), query,
            el('label', { for: 'c-qcol', class: 'inline' }, 'in'), column,
            el('label', { for: 'c-qre', class: 'inline' }, regex, ' regex'),
            el('label', { for: 'c-qcase', class: 'inline' }, cased, ' match case'), found)];
}

// Show the label controls when the matrix has labels (its catalogue summary), with its
// columns to colour by and to search.
function refreshLabelControls(summary) {
    const root = panels.pca && panels.pca.controls;
    if (!root) return;
    root.querySelectorAll('.label-only').forEach((node) => { node.hidden = !summary; });
    const columns = summary ? summary.columns : [];
    const names = columns.map((c) => c.name);
    const fill = (select, first, options) => {
        if (Array.from(select.options).map((o) => o.value).join('\t') !== [first[0]].concat(options.map((o) => o[0])).join('\t')) {
            select.textContent = '';
            select.append(el('option', { value: first[0] }, first[1]), ...options.map(([v, t]) => el('option', { value: v }, t)));
        }
    };
    fill(root.querySelector('#c-colorby'), ['', 'row index'], columns.map((c) => [c.name, c.name + (c.type === 'numeric' ? ' (numeric)' : '')]));
    root.querySelector('#c-colorby').value = names.includes(state.colorby) ? state.colorby : '';
    fill(root.querySelector('#c-qcol'), ['', names[0] || 'label'], names.slice(1).map((n) => [n, n]));
    root.querySelector('#c-qcol').value = names.slice(1).includes(state.qcol) ? state.qcol : '';
    if (!summary) searchRows = [];
    else if (searchFor !== searchKey()) runSearch(false);
}

function searchKey() {
    return [state.m, state.q, state.qre, state.qcase, state.qcol].join('\n');
}

// Put each listed row's label next to it (the neighbours list), once the labels are loaded.
function labelRowButtons() {
    const labels = panels.pca && panels.pca.data && panels.pca.data.labels;
    if (!labels || !panels.neighbors) return;
    for (const button of panels.neighbors.plot.querySelectorAll('button[data-row]')) {
        if (button.nextElementSibling && button.nextElementSibling.classList.contains('label')) continue;
        const text = labelLines(labels, Number(button.dataset.row))[0];
        if (text) button.after(el('span', { class: 'label' }, ' ' + text));
    }
}

// The points' colours and the colour bar or legend: by row index through the chosen map, or by
// a metadata column (numeric: the sequential map over its range; categorical: up to 50 values a
// colour of their own, the rest "other", in a legend whose entries filter: the points of the
// values not chosen are drawn faint, and "isolate" takes the chosen ones as the rows).
function pointColours(d) {
    const labels = d.labels, name = state.colorby;
    if (!labels || !labels.names.includes(name)) {
        let lo = Infinity, hi = -Infinity;
        for (const r of d.index) { if (r < lo) lo = r; if (r > hi) hi = r; }
        const scale = COLORMAPS[state.cmap] || VIRIDIS;
        d.cats = null;
        return { colours: colourBytes(d.index, scale, lo, hi), bar: colourBar(scale, lo, hi, name && d.summary ? name + ' (loading)' : 'row') };
    }
    if (isNumeric(labels, name)) {
        d.cats = null;
        const v = numericValues(labels, name, d.index);
        return { colours: colourBytes(v.values, VIRIDIS, v.lo, v.hi), bar: colourBar(VIRIDIS, v.lo, v.hi, name) };
    }
    const cats = categories(labels, name, d.index);
    const shown = shownCategories(cats);
    d.cats = Object.assign(cats, { shown });
    const legend = el('div', { class: 'colourbar legend', role: 'group', 'aria-label': 'colours of ' + name + ': choose values to show' },
        el('span', { class: 'legend-title' }, name + (shown ? ' · ' + shown.size + ' of ' + cats.legend.length + ' shown' : '')),
        el('div', { class: 'entries' }, cats.legend.map((e) => el('button', { type: 'button', class: 'entry', 'aria-pressed': String(!!shown && shown.has(e.key)),
            title: 'show only this value (again: every value); Shift or Ctrl adds it to those shown',
            onclick: (ev) => toggleCategory(e.key, ev.shiftKey || ev.ctrlKey || ev.metaKey) },
        el('i', { style: 'background:' + e.colour }), e.value + ' (' + e.count.toLocaleString('en') + ')'))));
    if (shown) legend.append(el('button', { type: 'button', class: 'entry all', onclick: () => setShown([]) }, 'show every value'));
    return { colours: categoryBytes(cats, shown, theme().line), bar: legend };
}

// The legend's filter (state.show: the chosen values' keys, one a line) as a Set of the keys
// this colouring has, or null when nothing is chosen (every value shown).
function shownCategories(cats) {
    const keys = new Set(cats.legend.map((e) => e.key));
    const chosen = state.show ? state.show.split('\n').filter((k) => keys.has(k)) : [];
    return chosen.length ? new Set(chosen) : null;
}

function setShown(keys) {
    state.show = keys.join('\n');
    writeHash('push');
    recolour();
}

// A click on a legend entry shows that value alone (again: every value); with Shift or Ctrl it
// adds the value to those shown, or takes it away.
function toggleCategory(key, add) {
    const d = panels.pca && panels.pca.data;
    const shown = d && d.cats && d.cats.shown ? [...d.cats.shown] : [];
    if (add) setShown(shown.includes(key) ? shown.filter((k) => k !== key) : shown.concat([key]));
    else setShown(shown.length === 1 && shown[0] === key ? [] : [key]);
}

// Search a column (GET …/labels/search): highlight every match in the view and, when asked,
// select the first one. Case-insensitive (the daemon's case=insensitive, Unicode case folding)
// unless "match case" is ticked.
let searchSeq = 0; // the latest search: an earlier one answering after it is dropped
async function runSearch(select) {
    const found = document.getElementById('search-result');
    const seq = ++searchSeq;
    searchRows = [];
    searchFor = searchKey();
    if (!state.q) {
        if (found) found.textContent = '';
        markSelected();
        refreshIsolate();
        return;
    }
    const regex = state.qre === '1';
    const url = apiUrl(matrixPath(state.m, 'labels/search'), { q: state.q, regex: regex ? '1' : '0',
        case: state.qcase === '1' ? '' : 'insensitive', column: state.qcol, limit: 1000 });
    try {
        const res = await fetchJson(url);
        if (seq !== searchSeq) return; // typing, then ticking "regex", sends two searches
        searchRows = res.rows;
        if (found) found.textContent = res.total === 0 ? 'no match' : res.total.toLocaleString('en') + (res.total === 1 ? ' match' : ' matches') +
            (res.truncated ? ' (first ' + res.rows.length + ' shown)' : '') + ': row ' + res.rows[0] + ' ' + JSON.stringify(res.labels[0]);
        markSelected();
        refreshIsolate();
        if (select && res.rows.length) selectRow(res.rows[0], 'replace');
    } catch (e) {
        if (seq !== searchSeq) return;
        if (found) found.textContent = e.message;
        markSelected();
    }
}

// Select a row (a click on a point): the cosine curve shows it. A new history entry, or
// ('replace') part of the entry just pushed (a search and the row it selects are one step).
function selectRow(row, mode) {
    if (String(row) === state.row) return;
    mark('select');
    state.row = String(row);
    writeHash(mode === 'replace' ? undefined : 'push');
    const input = panels.row && panels.row.controls.querySelector('input');
    if (input) input.value = state.row;
    markSelected();
    if (panels.row) loadRow();
    if (panels.neighbors) loadNeighbors();
}

// The exact nearest neighbours of the selected row (GET …/neighbors), as a ranked list whose
// entries select their row; in the PCA space, on the components the view draws.
function loadNeighbors() {
    const panel = panels.neighbors;
    if (!panel) return;
    const params = Object.assign(selection(), { row: clampRow(), k: state.nk, metric: state.nmetric, space: state.nspace });
    if (state.nspace === 'pca') Object.assign(params, { center: state.center, components: Math.max(...components()) });
    const url = apiUrl(matrixPath(state.m, 'neighbors'), params);
    panel.load([url], (res) => {
        neighbourRows = res.rows;
        refreshIsolate();
        markSelected();
        panel.plot.textContent = '';
        const cosine = res.input.metric === 'cosine';
        const list = el('ol', { class: 'neighbors' }, res.rows.map((r, i) => el('li', {},
            el('button', { type: 'button', 'data-row': r, onclick: () => selectRow(r) }, 'row ' + r),
            el('span', { class: 'score' }, fmt(res.scores[i], 6)))));
        panel.plot.append(list);
        labelRowButtons();
        panel.caption.textContent = (cosine ? 'cosine similarity' : 'euclidean distance') + ' to row ' + res.input.row + ' in ' +
            (res.input.space === 'pca' ? 'the top ' + res.input.components + ' principal components' : 'model space (raw rows)') +
            ', exact over ' + res.input.matrix.n_rows.toLocaleString('en') + ' rows; white rings in the PCA view';
    });
}

// The spectrum of the selection (the spectrum panel's request, and the PCA panel's variance).
function spectrumUrl() {
    return apiUrl(matrixPath(state.m, 'spectrum'), Object.assign(selection(), { center: state.center }));
}

function loadSpectrum() {
    if (!panels.spectrum) return undefined; // its tab was left before a chained load
    return panels.spectrum.load([spectrumUrl()], drawSpectrum);
}

function drawSpectrum(res) {
    const n = res.singular_values.length;
    const comp = Array.from({ length: n }, (_, i) => i + 1);
    const groups = res.degenerate_groups || [];
    const inGroup = new Array(n).fill(false);
    for (const [s, e] of groups) for (let i = s; i < e; i++) inGroup[i] = true;
    const accent = theme().accent;
    // Degenerate groups are marked by their points' colour (orange), not shaded bands: in an
    // embedding most of the tail is near-degenerate and bands would cover the whole plot.
    const lines = [], notes = [];
    const marks = [['0.5', '#1b9e77'], ['0.9', '#d95f02'], ['0.99', '#7570b3']];
    for (const [p, colour] of marks) {
        const m = res.components_for[p];
        lines.push({ x0: 1, x1: n, y0: +p, y1: +p, colour });
        if (m) {
            lines.push({ x0: m, x1: m, y0: 0, y1: +p, colour });
            notes.push({ x: m, y: +p, text: (100 * p) + '%: ' + m, colour });
        }
    }
    return drawChart(panels.spectrum, {
        title: res.input.matrix.id + ': rank ' + res.rank + ', 50/90/99 % at ' +
            ['0.5', '0.9', '0.99'].map((p) => res.components_for[p]).join('/') + ' components',
        panes: [
            { x: { title: 'component (orange: degenerate groups, ' + groups.length + ')' }, y: { title: 'singular value', log: true },
                series: [{ x: comp, y: res.singular_values, mode: 'lines+markers', colour: accent, width: 1, size: 4,
                    colours: inGroup.map((g) => (g ? '#e66101' : accent)), hover: (i) => 'σ' + comp[i] + ' = ' + fmt(res.singular_values[i], 6) }] },
            { x: { title: 'components (log)', log: true }, y: { title: 'cumulative explained variance', short: 'cumulative var.', range: [0, 1.02] }, lines, notes,
                series: [{ x: comp, y: res.cumulative, mode: 'lines', colour: '#21908d', width: 2,
                    hover: (i) => comp[i] + ' components: ' + fmt(res.cumulative[i], 4) }] },
        ],
    });
}

// Draw a panel's chart (the geometry tab's uPlot charts, chart.js): made on first use.
function drawChart(panel, spec) {
    if (!panel.chart) {
        purgePlot(panel.plot);
        panel.plot.textContent = '';
        panel.chart = new Chart(panel.plot, { label: panel.plot.getAttribute('aria-label') });
    }
    panel.chart.set(spec);
}

// Above this many selected rows the all-pairs panels (n² d work) wait for a click.
const PAIRS_AUTO_ROWS = 4096;

function loadCosine() {
    if (!panels.cosine) return undefined; // its tab was left before a chained load
    const sel = selection();
    const rows = currentRows();
    const n = rows ? rows.length : (matrixInfo(state.m) || {}).items;
    const matrixUrl = apiUrl(matrixPath(state.m, 'cosine'), Object.assign({}, sel, { mode: 'matrix', bins: state.bins || screenBins(), format: 'npy' }));
    const offsetUrl = apiUrl(matrixPath(state.m, 'cosine'), Object.assign({}, sel, { mode: 'offset' }));
    if (n > PAIRS_AUTO_ROWS && !pairsAsked.has(state.m + '|' + state.rows + '|' + state.exclude)) {
        for (const [id, url] of [['cosine', matrixUrl], ['offset', offsetUrl]])
            panels[id].waitForClick('The cosine similarity of all ' + n.toLocaleString('en') + ' × ' + n.toLocaleString('en') +
                ' pairs of rows takes the daemon about ' + (n * n * (matrixInfo(state.m) || { d: 768 }).d / 1e9).toFixed(0) +
                ' G multiply-adds, so it is not started by itself.', 'compute', () => {
                pairsAsked.add(state.m + '|' + state.rows + '|' + state.exclude);
                loadCosine();
            }, [url]);
        loadRow();
        return;
    }
    panels.cosine.load([matrixUrl], drawCosineMatrix);
    panels.offset.load([offsetUrl], drawOffset);
    loadRow();
}

const pairsAsked = new Set();

// Bin edges as the daemon draws them: bin i covers [floor(i n / B), floor((i + 1) n / B)) of
// the n selected rows, B = min(bins, n), bins 0 = n.
export function binEdges(n, bins) {
    const b = bins === 0 || bins > n ? n : bins;
    return Array.from({ length: b + 1 }, (_, i) => Math.floor(i * n / b));
}

function drawCosineMatrix(res) {
    const [nb, mb] = res.shape;
    const rows = currentRows();
    const n = rows ? rows.length : nb;
    const edges = binEdges(n, nb);
    // Bin centres in row numbers when the selection is known, else in selection positions.
    const at = (e) => (rows ? rows[Math.min(e, rows.length - 1)] : e);
    const axis = Array.from({ length: nb }, (_, i) => (at(edges[i]) + at(edges[i + 1] - 1)) / 2);
    const z = Array.from({ length: nb }, (_, i) => res.data.subarray(i * mb, (i + 1) * mb));
    panels.cosine.data = res;
    panels.cosine.caption.textContent = state.m + ', ' + nb + '×' + mb + ' bins (mean cosine per bin)' +
        (state.bins ? '' : ', bins chosen for the panel\'s width; set bins=0 for one per row');
    return drawChart(panels.cosine, { panes: [{ x: { title: 'row' }, y: { title: 'row', reversed: true }, square: true, series: [],
        heat: { z, x: axis, y: axis, zmin: -1, zmax: 1, scale: VIRIDIS, title: 'cos',
            hover: (i, j) => 'rows ≈' + axis[i].toFixed(0) + ' × ' + axis[j].toFixed(0) + ': ' + fmt(z[i][j], 4) } }] });
}

function drawOffset(res) {
    return drawChart(panels.offset, { panes: [{ x: { title: 'offset |i − j|' }, y: { title: 'mean cosine similarity' },
        series: [{ x: res.offsets, y: res.mean, mode: 'lines', colour: theme().accent, width: 1.5,
            hover: (i) => 'offset ' + res.offsets[i] + ': ' + fmt(res.mean[i], 4) }] }] });
}

// Bins for the cosine heatmap: one per selected row when that fits, else about one per two
// screen pixels of the panel (more cannot be seen), never above the daemon's max_bins.
// A 1024-row matrix in a 560 px panel asks for 280 bins (0.6 MB as NPY), never the
// 2 MB-plus full grid unless bins=0 asks for it.
function screenBins() {
    const info = matrixInfo(state.m);
    const rows = currentRows();
    const items = rows ? rows.length : info ? info.items : 512;
    const width = panels.cosine ? panels.cosine.plot.getBoundingClientRect().width : 500;
    const px = Math.max(32, Math.floor((width - 100) * (window.devicePixelRatio || 1) / 2));
    return Math.max(1, Math.min(items, px, limits.max_bins || 512));
}

function loadRow() {
    if (!panels.row) return undefined; // its tab was left before a chained load
    const url = apiUrl(matrixPath(state.m, 'cosine'), Object.assign(selection(), { row: clampRow(), format: 'npy' }));
    panels.row.load([url], (res) => {
        let rows = currentRows();
        if (!rows || rows.length !== res.data.length) rows = Array.from(res.data, (_, i) => i);
        return drawRow({ rows, similarity: res.data, row: Number(clampRow()) });
    });
}

// The selected row, clamped to the matrix (a row kept from a larger matrix would be a 400).
function clampRow() {
    const info = matrixInfo(state.m);
    const r = parseInt(state.row, 10);
    if (info && Number.isInteger(r) && r >= info.items) {
        state.row = String(info.items - 1);
        writeHash();
    }
    return state.row;
}

// For a curve of many points: the lowest and the highest point of each of about `buckets`
// consecutive runs (in order), so every peak and dip is drawn with its API value and the SVG
// stays small. Returns the kept positions.
export function envelope(y, buckets) {
    const n = y.length;
    if (n <= 2 * buckets) return Array.from({ length: n }, (_, i) => i);
    const keep = [];
    for (let b = 0; b < buckets; b++) {
        const s = Math.floor(b * n / buckets), e = Math.floor((b + 1) * n / buckets);
        let lo = s, hi = s;
        for (let i = s; i < e; i++) { if (y[i] < y[lo]) lo = i; if (y[i] > y[hi]) hi = i; }
        if (lo === hi) keep.push(lo); else keep.push(Math.min(lo, hi), Math.max(lo, hi));
    }
    return keep;
}

function drawRow(res) {
    const r = res.row;
    const at = res.rows.indexOf(r);
    const keep = envelope(res.similarity, 1500);
    const x = keep.map((i) => res.rows[i]), y = keep.map((i) => res.similarity[i]);
    const series = [{ x, y, mode: 'lines', colour: theme().accent, width: 1.5, hover: (i) => 'row ' + x[i] + ': ' + fmt(y[i], 4) }];
    if (at >= 0) series.push({ x: [r], y: [res.similarity[at]], mode: 'markers', size: 9, colour: '#fde725', outline: '#000' });
    panels.row.caption.textContent = 'row ' + r + ' of ' + state.m + (keep.length < res.rows.length ?
        ' (' + res.rows.length.toLocaleString('en') + ' rows, drawn as the lowest and highest of each of 1500 runs)' : '');
    return drawChart(panels.row, { panes: [{ x: { title: 'row' }, y: { title: 'cosine similarity to row ' + r }, series }] });
}

// ------------------------------------------------------------------ tab: capture and overlap
function buildCapture(root) {
    const bar = el('div', { class: 'toolbar' });
    const refresh = () => { loadCapture(); loadOverlap(); };
    bar.append(
        matrixControl('A', 'a', refresh),
        control('A rows', 'a_rows', { placeholder: 'all', size: 6 }, refresh),
        control('A centring', 'a_center', { choices: ['columns', 'rows', 'none'] }, refresh),
        matrixControl('B', 'b', refresh),
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
    if (!panels.capture) return undefined; // its tab was left before a chained load
    panels.capture.load([apiUrl('v1/capture', Object.assign(pairParams(), { k: state.k }))], (res) => {
        const x = res.capture.map((_, i) => i + 1);
        return plot(panels.capture.plot, [
            { type: 'scatter', mode: 'lines', x, y: res.capture, name: 'capture', line: { color: theme().accent },
                hovertemplate: 'B vector %{x}: %{y:.4f}<extra></extra>' },
            { type: 'scatter', mode: 'lines', x: [1, x.length], y: [res.baseline, res.baseline], name: 'k/d baseline',
                line: { dash: 'dash', color: '#e66101' } }],
        { title: { text: res.input.a.id + ' top-' + res.input.k + ' vs ' + res.input.b.id + ' (sum ' + fmt(res.sum) + ')', font: { size: 12 } },
            legend: { x: 1, xanchor: 'right', y: 1 }, xaxis: { title: { text: 'singular vector of B (by rank)' }, type: 'log' },
            yaxis: { title: { text: 'fraction captured' }, range: [0, 1.02] } });
    });
}

function loadOverlap() {
    if (!panels.overlap) return undefined; // its tab was left before a chained load
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
    const m = models.find((x) => x.name === state.model);
    if (!m || !m.matrices.some((x) => /^h0\./.test(x.name))) {
        for (const id of ['layers', 'ranking', 'grid', 'pattern']) if (panels[id]) { panels[id].clear(); delete panels[id]; }
        grid.textContent = '';
        grid.append(el('p', { class: 'empty' }, state.model ? 'Model ' + state.model + ' has no attention layers (no h0.… weights), so there is ' +
            'nothing to show here. Choose a model with layers above.' : 'No model in the catalogue has attention layers (h0.… weights): ' +
            'load one (e.g. config/gpt2-full.json) to see layers and heads.'));
        return;
    }
    for (const id of ['layers', 'ranking', 'grid', 'pattern']) if (panels[id]) { purgePlot(panels[id].plot); delete panels[id]; }
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
    if (!panels.layers) return undefined; // its tab was left before a chained load
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
        // 20 px a row, so that 12 layers x 4 weights (48 rows) keep legible labels and values.
        panels.layers.plot.style.height = Math.max(360, 20 * ylabels.length + 90) + 'px';
        return plot(panels.layers.plot, [heatmap(z, ms, ylabels, { zmin: 0, zmax: 1, colorbar: { title: { text: 'mean capture' }, thickness: 12 },
            texttemplate: '%{z:.2f}', textfont: { size: 11 }, hovertemplate: '%{y}, %{x} singular vectors: %{z:.4f}<extra></extra>' })],
        { title: { text: 'W_pos ' + res.input.r.id + ' top-' + res.input.k + ' (baseline k/d = ' + fmt(res.baseline, 3) + ')', font: { size: 12 } },
            // On a phone the title needs the top margin to itself: the columns' labels go below.
            yaxis: { autorange: 'reversed', type: 'category', tickfont: { size: 11 } }, xaxis: { type: 'category', side: NARROW.matches ? 'bottom' : 'top' },
            margin: NARROW.matches ? { l: 60, r: 10, t: 40, b: 40 } : { l: 70, r: 20, t: 50, b: 20 } });
    });
}

function headLabel(h) {
    return 'L' + h.layer + 'H' + h.head;
}

function loadRanking() {
    if (!panels.ranking) return undefined; // its tab was left before a chained load
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
    if (!panels.pattern) return undefined; // its tab was left before a chained load
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
    if (!panels.compare) return undefined; // its tab was left before a chained load
    const pca = state.cmp_an === 'pca';
    const url = apiUrl('v1/compare', { matrices: state.cmp, analysis: state.cmp_an, rows: state.cmp_rows, k: pca ? 3 : '' });
    panels.compare.load([url], (res) => {
        if (pca) return drawComparePca(res.results);
        if (panels.compare.views) panels.compare.clear(); // the point views of the PCA before
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

// The side-by-side PCA: one WebGL point view per matrix (as the geometry tab's), each titled with
// its matrix and rows, coloured by row index on the cyclic map and joined in order; a rotation
// or zoom of one turns the others with it, so the shapes stay comparable.
function drawComparePca(results) {
    const panel = panels.compare;
    panel.clear();
    const boxes = el('div', { class: 'views' });
    panel.plot.append(boxes);
    panel.plot.classList.add('multi');
    panel.views = results.map((r) => {
        const idx = r.rows.map((x) => x.index);
        const n = idx.length, points = new Float32Array(n * 3);
        r.rows.forEach((x, i) => points.set(x.coords.slice(0, 3), i * 3));
        let lo = Infinity, hi = -Infinity;
        for (const v of idx) { if (v < lo) lo = v; if (v > hi) hi = v; }
        const name = r.input.matrix.id + ' (' + r.input.matrix.rows + ')';
        const box = el('div', { class: 'plot points-box', role: 'figure', 'aria-label': 'PCA of ' + name + ': ' + n + ' points' });
        boxes.append(el('div', { class: 'view' }, el('h3', {}, name), box));
        const view = new PointView(box, { label: 'PCA of ' + name,
            hoverText: (i) => name + ' row ' + idx[i] + '\n' + [0, 1, 2].map((c) => 'PC' + (c + 1) + ' ' + fmt(r.rows[i].coords[c], 5)).join('\n'),
            onCamera: () => { for (const other of panel.views) if (other !== view) other.setCamera(view.camera); } });
        const pct = (j) => 'PC' + (j + 1) + ' ' + (100 * r.explained_variance_ratio[j]).toFixed(0) + '%';
        view.setData({ points, dim: 3, colours: colourBytes(idx, TWILIGHT, lo, hi), line: true, axisTitles: [0, 1, 2].map(pct) });
        return view;
    });
}

// ------------------------------------------------------------------ tab: periodicity and outliers
function buildPeriodic(root) {
    const bar = el('div', { class: 'toolbar' });
    bar.append(matrixControl('matrix', 'm', () => { loadPeriodicity(); loadOutliers(); }, true),
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

// A p-value as text: one that underflowed to 0 is below every double we could print, not zero.
export function pValue(p) {
    if (p === null || p === undefined) return '—';
    if (p === 0) return '< 1e-300';
    return p < 1e-3 ? Number(p).toExponential(2) : Number(p).toPrecision(3);
}

// Why a component has no period, in words (the daemon's no_period_reason codes, docs/api.md);
// an unknown code is shown as it is.
const NO_PERIOD = {
    constant: 'the component is constant',
    edge_of_search_range: 'no peak inside the search range (a trend or half a cycle)',
    under_one_cycle: 'under one full cycle in these rows',
    not_significant: 'its peak does not stand out from noise (Fisher\'s g-test)',
};
export function noPeriodText(code) {
    return code ? NO_PERIOD[code] || code : '';
}

// A table that scrolls sideways inside its panel on a narrow screen, never the page; the
// scrolling box takes the focus, so a keyboard scrolls it too (a named region).
function tableWrap(head, rows, name) {
    return el('div', { class: 'values-wrap', tabindex: '0', role: 'region', 'aria-label': name || 'table' }, table(head, rows));
}

function table(head, rows) {
    return el('table', { class: 'values' }, el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c))))));
}

function loadPeriodicity() {
    if (!panels.periodicity) return undefined; // its tab was left before a chained load
    const url = apiUrl(matrixPath(state.m, 'periodicity'), { rows: state.rows, k: state.pk });
    panels.periodicity.load([url], (res) => {
        const comps = res.components;
        const extra = panels.periodicity.root.querySelector('.values-wrap');
        if (extra) extra.remove();
        const num = (v, d) => (v === null || v === undefined ? '—' : fmt(v, d));
        const p = (c) => (c.significance ? pValue(c.significance.p_value) : '—');
        panels.periodicity.plot.before(tableWrap(['component', 'period (rows)', 'cycles', 'peak share', 'p (Fisher g)', 'no period because'],
            comps.map((c) => ['PC' + (c.index + 1), num(c.period), num(c.cycles), num(c.peak_share, 3), p(c),
                el('span', { title: c.no_period_reason || '' }, noPeriodText(c.no_period_reason))]), 'periods of the top components'));
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
    if (!panels.outliers) return undefined; // its tab was left before a chained load
    const url = apiUrl(matrixPath(state.m, 'outliers'), { threshold: state.threshold });
    panels.outliers.load([url], (res) => {
        const flagged = new Set(res.flagged);
        return plot(panels.outliers.plot, [
            { type: 'scatter', mode: 'markers', x: res.rows, y: res.norms, name: 'row norm',
                marker: { size: 4, color: res.rows.map((r) => (flagged.has(r) ? '#e66101' : theme().accent)) },
                customdata: res.scores, hovertemplate: 'row %{x}: norm %{y:.5g}, score %{customdata:.3g}<extra></extra>' }],
        { showlegend: false, title: { text: res.n_flagged + ' rows flagged (orange) at robust z > ' + res.threshold + '; median norm ' + fmt(res.median), font: { size: 12 } },
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
    const changed = state.tab !== tab[0];
    state.tab = tab[0];
    writeHash(changed ? 'push' : undefined);
    for (const b of document.querySelectorAll('#tabs button')) {
        b.setAttribute('aria-selected', String(b.dataset.tab === tab[0]));
        b.tabIndex = b.dataset.tab === tab[0] ? 0 : -1; // one tab stop; arrows move between tabs
    }
    for (const p of Object.values(panels)) { // the view they drew is gone: so are their requests (and jobs)
        if (p.controller) p.controller.abort();
        p.clear();
    }
    for (const k of Object.keys(panels)) delete panels[k];
    const main = document.getElementById('main');
    main.textContent = '';
    const root = el('div', { class: 'tab', id: 'tab-' + tab[0], role: 'tabpanel', 'aria-labelledby': 'tabbtn-' + tab[0] });
    main.append(root);
    tab[2](root);
}

// Defaults from the loaded catalogue, never a fixed model name: the first matrix with more
// than one row (with rows 1: when it has more than 1000 — a learned position table whose row 0
// stands apart; otherwise every row); B: another matrix of the same width, preferably of the
// same model; the model of Layers & heads: the first with layer weights (h0.…); side by side:
// the first multi-row matrix of each of the first three models that have one.
function catalogueDefaults() {
    const multi = models.flatMap((m) => m.matrices.filter((x) => x.items > 1));
    const first = multi[0];
    if (!first) return;
    DEFAULTS.m = DEFAULTS.a = first.id;
    DEFAULTS.rows = DEFAULTS.a_rows = defaultRows(first.id);
    const model = first.id.split('/')[0];
    const others = multi.filter((x) => x.id !== first.id && x.d === first.d);
    const b = others.find((x) => x.id.startsWith(model + '/')) || others[0];
    if (b) DEFAULTS.b = b.id;
    const layered = models.find((m) => m.matrices.some((x) => /^h0\./.test(x.name)));
    DEFAULTS.model = layered ? layered.name : '';
    const perModel = models.map((m) => m.matrices.find((x) => x.items > 1)).filter(Boolean).slice(0, 3);
    DEFAULTS.cmp = perModel.map((x) => x.id).join(',');
    DEFAULTS.cmp_rows = perModel.map((x) => defaultRows(x.id)).join(';');
}

function defaultRows(id) {
    const info = matrixInfo(id);
    return info && info.items > 1000 && /^(wpe|pos)/.test(info.name) ? '1:' : '';
}

// Is a matrix positional (its row order means position, so joining consecutive rows draws a
// curve)? Said by the catalogue (GET v1/models): generated by a positional generator
// (provenance.source generator:sinusoidal or generator:rope), or a position table by its name
// or its tensor's (wpe, pos, position...: GPT-2's transformer.wpe.weight, BERT's
// position_embeddings, OPT's embed_positions). Token embeddings and uploads of other names are
// not: their row order means nothing, and lines would hide their clusters.
export function isPositional(info) {
    if (!info) return false;
    const prov = info.provenance || {};
    if (/^generator:(sinusoidal|rope)$/.test(prov.source || '')) return true;
    const named = (text) => /(^|[^a-z])(wpe|pos|pe)([^a-z]|\d|$)|position/i.test(text || '');
    return named(info.name) || named(prov.tensor);
}

// The line's default: on for positional matrices, off for the others.
function defaultLine(id) {
    return isPositional(matrixInfo(id)) ? '1' : '0';
}

async function loadCatalogue() {
    const res = await fetch('v1/models', { cache: 'no-store', headers: Object.assign({ Accept: 'application/json' },
        catalogueTag ? { 'If-None-Match': catalogueTag } : {}) });
    if (res.status === 304) return false;
    if (!res.ok) throw new Problem({ title: res.statusText, status: res.status }, res.status);
    catalogueTag = res.headers.get('ETag');
    models = (await res.json()).models;
    matrixIds = models.flatMap((m) => m.matrices.map((x) => x.id));
    return true;
}
let catalogueTag = null;

// The catalogue refreshes itself: every 5 s (while the page is visible) an ETag-conditional GET
// of v1/models; on a change the matrix pickers are rebuilt in place, and a view whose matrix was
// deleted falls back to the default with a note saying so.
async function pollCatalogue() {
    try {
        if (document.visibilityState === 'visible' && await loadCatalogue()) {
            const gone = ['m', 'a', 'b'].map((k) => state[k]).filter((id) => !matrixIds.includes(id));
            for (const select of document.querySelectorAll('select[data-matrices]')) {
                const value = select.value;
                select.textContent = '';
                for (const [id] of matrixChoices(select.dataset.matrices === 'rows')) select.append(el('option', { value: id }, id));
                select.value = matrixIds.includes(value) ? value : '';
            }
            if (gone.length) {
                catalogueDefaults();
                for (const key of ['m', 'a', 'b']) if (!matrixIds.includes(state[key])) state[key] = DEFAULTS[key];
                notice(gone.join(', ') + ' is no longer in the catalogue (deleted); showing ' + state.m + '.');
                writeHash();
                showTab(state.tab);
            }
        }
    } catch (e) { /* the next poll tries again */ }
    setTimeout(pollCatalogue, CATALOGUE_POLL_MS);
}
const CATALOGUE_POLL_MS = 5000;

function notice(text) {
    const box = document.getElementById('notice');
    box.textContent = text + ' ';
    box.append(el('button', { type: 'button', onclick: () => { box.hidden = true; } }, 'dismiss'));
    box.hidden = false;
}

// The tab list's keys (WAI-ARIA tabs): Left/Right move to the previous/next tab and show it,
// Home/End to the first/last.
function tabKeys(ev) {
    const names = TABS.map((t) => t[0]);
    const at = names.indexOf(state.tab);
    const to = { ArrowLeft: at - 1, ArrowRight: at + 1, Home: 0, End: names.length - 1 }[ev.key];
    if (to === undefined) return;
    ev.preventDefault();
    const name = names[(to + names.length) % names.length];
    showTab(name);
    document.getElementById('tabbtn-' + name).focus();
}

// Light or dark: the system's preference unless the header's button chose (kept in
// localStorage); plots are drawn again in the new colours.
function setupTheme() {
    const button = el('button', { type: 'button', class: 'theme', id: 'theme' });
    document.querySelector('header .docs').before(button);
    const media = window.matchMedia('(prefers-color-scheme: dark)');
    const current = () => document.documentElement.dataset.theme || (media.matches ? 'dark' : 'light');
    const label = () => { button.textContent = current() === 'dark' ? 'light mode' : 'dark mode'; };
    let saved = null;
    try { saved = localStorage.getItem('embedscope-theme'); } catch (e) { /* storage off: follow the system */ }
    if (saved === 'dark' || saved === 'light') document.documentElement.dataset.theme = saved;
    label();
    const redraw = () => { label(); if (models.length) showTab(state.tab); };
    button.addEventListener('click', () => {
        const next = current() === 'dark' ? 'light' : 'dark';
        document.documentElement.dataset.theme = next;
        try { localStorage.setItem('embedscope-theme', next); } catch (e) { /* not kept */ }
        redraw();
    });
    media.addEventListener('change', () => { if (!document.documentElement.dataset.theme) redraw(); });
}

// ------------------------------------------------------------------ bookmarks
// The header's "bookmarks" button opens a dialog: save the view under a name, open or delete
// a saved one (each a link: the page's URL with the view's fragment, shareable as it is),
// export them all as JSON, import a file of them (bookmarks.js).
function bookmarkUrl(view) {
    return location.pathname + location.search + '#' + view;
}

function setupBookmarks() {
    let storage = null;
    try { storage = window.localStorage; storage.getItem('x'); } catch (e) { storage = null; }
    const button = el('button', { type: 'button', class: 'theme', id: 'bookmarks-button', 'aria-haspopup': 'dialog' }, 'bookmarks');
    document.querySelector('header .docs').before(button);
    const name = el('input', { id: 'bm-name', type: 'text', size: 24, autocomplete: 'off', spellcheck: 'false' });
    const list = el('ul', { id: 'bm-list', class: 'bookmarks' });
    const note = el('p', { id: 'bm-note', class: 'status note', role: 'status' });
    const file = el('input', { id: 'bm-file', type: 'file', accept: 'application/json,.json' });
    const dialog = el('dialog', { id: 'bookmarks', 'aria-labelledby': 'bm-title' },
        el('h2', { id: 'bm-title' }, 'Bookmarks'),
        el('p', { class: 'hint' }, 'A bookmark keeps the whole view (every tab\'s settings, the selected row, the camera) in this browser; its link opens it anywhere.'),
        el('form', { method: 'dialog', class: 'bm-save', onsubmit: (ev) => { ev.preventDefault(); save(); } },
            el('label', { for: 'bm-name' }, 'name '), name, el('button', { type: 'submit', id: 'bm-save' }, 'save this view')),
        list,
        el('div', { class: 'bm-tools' },
            el('button', { type: 'button', id: 'bm-export', onclick: () => {
                const href = URL.createObjectURL(new Blob([exportBookmarks(storage)], { type: 'application/json' }));
                saveAs(href, 'embedscope-bookmarks.json');
                setTimeout(() => URL.revokeObjectURL(href), 1000);
            } }, 'export JSON'),
            el('label', { for: 'bm-file' }, 'import JSON '), file,
            el('button', { type: 'button', onclick: () => dialog.close() }, 'close')),
        note);
    document.body.append(dialog);
    const render = () => {
        list.textContent = '';
        const items = storage ? readBookmarks(storage) : [];
        if (!items.length) list.append(el('li', { class: 'hint' }, storage ? 'No bookmark yet.' : 'This browser keeps no local storage here.'));
        for (const b of items)
            list.append(el('li', {}, el('a', { href: bookmarkUrl(b.view), class: 'bm-link', onclick: () => dialog.close() }, b.name), ' ',
                el('code', {}, new URL(bookmarkUrl(b.view), location.href).href), ' ',
                el('button', { type: 'button', class: 'small', 'aria-label': 'delete ' + b.name, onclick: () => { removeBookmark(storage, b.name); render(); } }, 'delete')));
    };
    const save = () => {
        if (!storage || !name.value.trim()) { note.textContent = storage ? 'Give the bookmark a name.' : 'No local storage: nothing can be kept.'; return; }
        addBookmarks(storage, [{ name: name.value, view: location.hash.replace(/^#/, '') }]);
        note.textContent = 'Saved "' + name.value.trim() + '".';
        render();
    };
    file.addEventListener('change', async () => {
        try {
            const items = parseBookmarks(await file.files[0].text());
            addBookmarks(storage, items);
            note.textContent = 'Imported ' + items.length + (items.length === 1 ? ' bookmark.' : ' bookmarks.');
        } catch (e) {
            note.textContent = 'Not imported: ' + e.message;
        }
        file.value = '';
        render();
    });
    button.addEventListener('click', () => {
        name.value = (TABS.find((t) => t[0] === state.tab) || TABS[0])[1] + ': ' + (state.tab === 'heads' ? state.model : state.tab === 'compare' ? state.cmp : state.m) +
            (state.rows && state.tab === 'geometry' ? ' rows ' + state.rows.slice(0, 40) : '');
        note.textContent = '';
        render();
        dialog.showModal();
    });
}

async function start() {
    readHash();
    const nav = document.getElementById('tabs');
    for (const [name, title] of TABS)
        nav.append(el('button', { type: 'button', role: 'tab', id: 'tabbtn-' + name, 'aria-controls': 'main', 'data-tab': name,
            onclick: () => showTab(name) }, title));
    nav.addEventListener('keydown', tabKeys);
    setupTheme();
    setupBookmarks();
    try {
        const [root] = await Promise.all([fetchJson('v1'), loadCatalogue()]);
        limits = root.limits || {};
        catalogueDefaults();
        readHash();
    } catch (e) {
        const boot = document.getElementById('boot');
        boot.className = 'status error';
        boot.textContent = 'cannot list the models: ' + e.message;
        return;
    }
    showTab(state.tab);
    // Back/Forward (popstate) and an edited fragment (hashchange) redraw the view they name.
    const restore = () => {
        const before = JSON.stringify(state);
        readHash();
        if (JSON.stringify(state) !== before) showTab(state.tab);
    };
    window.addEventListener('hashchange', restore);
    window.addEventListener('popstate', restore);
    setTimeout(pollCatalogue, CATALOGUE_POLL_MS);
}

// For the browser tests and the curious: the panels, their data and timings.
window.embedscope = { panels, state, pending, showTab };
start();

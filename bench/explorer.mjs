// The dashboard at token-embedding scale, measured in headless Chromium against the real daemon
// (make bench-explorer; bench/explorer.sh starts the daemon and runs this). usage:
//   node bench/explorer.mjs DAEMON_URL OUT_JSONL [ROWS,ROWS...]
// For each size (default 50257 and 200000 rows of 768 float32 columns: 20 planted clusters plus
// Gaussian noise, seeded, uploaded with a labels table of three columns: token, cluster, length):
// - open the point view on every row (#m=bench/wNNN&rows=) and read the page's performance marks
//   (web/src/app.js mark()): the PCA replies arrived (embedscope:pca:data), the first and the last
//   frame of the points (embedscope:points:first, :all), the labels joined (embedscope:labels);
// - select SELECTIONS points by clicking them in the view, as a user does, and time from the click
//   (the pointerup's timeStamp) to the selected row's cosine curve drawn (embedscope:row:drawn) and
//   its neighbour list drawn (embedscope:neighbors:drawn), and to its ring in the view;
// - main-thread time (CDP Performance.getMetrics: TaskDuration and ScriptDuration, wall-clock and
//   so stretched by a loaded machine; ThreadTime, the main thread's CPU time, and ProcessTime, the
//   renderer's) and the longest task (PerformanceObserver 'longtask') of each phase, and the load
//   average, since the machine is shared: software WebGL and the daemon share its cores with
//   everything else.
// Prints one line per phase and appends one JSON object per size to OUT_JSONL. Nothing is
// asserted: these are figures (docs/dashboard.md, bench/results/).
import { appendFileSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../tests/browser/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const [base, out, sizesArg] = process.argv.slice(2);
if (!base || !out) {
    console.error('usage: node bench/explorer.mjs DAEMON_URL OUT_JSONL [ROWS,ROWS...]');
    process.exit(2);
}
const COLS = 768, CLUSTERS = 20;
const SELECTIONS = Number(process.env.SELECTIONS || 5);
const sizes = (sizesArg || '50257,200000').split(',').map(Number);
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
// The daemon's CPU time (user + system, /proc/PID/stat, in clock ticks of 10 ms) when
// bench/explorer.sh names its process: it serves only this benchmark, so what it spends between a
// click and the panels drawn is the selection's server CPU.
const daemonPid = process.env.EXPLORER_DAEMON_PID;
const daemonCpuMs = () => {
    if (!daemonPid) return null;
    const f = readFileSync('/proc/' + daemonPid + '/stat', 'utf8').split(') ')[1].split(' ');
    return 10 * (Number(f[11]) + Number(f[12]));
};

// Planted clusters: row i belongs to cluster i % 20 (row order means nothing, as in a vocabulary),
// its centre (3 x a Gaussian vector) plus unit Gaussian noise. Two xorshift32 streams and
// Box-Muller, seeded by the row count.
function matrix(rows, seed) {
    let a = (seed * 2654435761) | 1, b = 0x9e3779b9;
    const u = () => { // xorshift32 pair, (0, 1]
        a ^= a << 13; a ^= a >>> 17; a ^= a << 5;
        b ^= b << 17; b ^= b >>> 15; b ^= b << 26;
        return (((a >>> 0) * 4294967296 + (b >>> 0)) + 1) / 18446744073709551616;
    };
    const gauss = (n, into, scale) => {
        for (let i = 0; i < n; i += 2) {
            const r = Math.sqrt(-2 * Math.log(u())), t = 2 * Math.PI * u();
            into[i] = scale * r * Math.cos(t);
            if (i + 1 < n) into[i + 1] = scale * r * Math.sin(t);
        }
    };
    const centres = new Float64Array(CLUSTERS * COLS);
    gauss(centres.length, centres, 3);
    const header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${rows}, ${COLS}), }`;
    const pad = 64 - ((10 + header.length + 1) % 64);
    const head = Buffer.from('\x93NUMPY\x01\x00' + String.fromCharCode((header.length + pad + 1) & 255, (header.length + pad + 1) >> 8) +
        header + ' '.repeat(pad) + '\n', 'latin1');
    const body = Buffer.alloc(rows * COLS * 4);
    const values = new Float32Array(body.buffer, body.byteOffset, rows * COLS);
    const noise = new Float64Array(COLS);
    for (let i = 0; i < rows; i++) {
        gauss(COLS, noise, 1);
        const c = (i % CLUSTERS) * COLS;
        for (let j = 0; j < COLS; j++) values[i * COLS + j] = centres[c + j] + noise[j];
    }
    return Buffer.concat([head, body]);
}

function labels(rows) {
    const lines = ['token\tcluster\tlength'];
    for (let i = 0; i < rows; i++) {
        const token = 'tok' + i.toString(36);
        lines.push(token + '\tc' + (i % CLUSTERS) + '\t' + token.length);
    }
    return lines.join('\n') + '\n';
}

async function put(url, body, type) {
    const res = await fetch(url, { method: 'PUT', body, headers: { 'Content-Type': type } });
    if (res.status !== 200 && res.status !== 201) throw new Error('PUT ' + url + ': ' + res.status + ' ' + (await res.text()).slice(0, 300));
}

const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
});

const RECORDER = () => {
    window.__longtasks = [];
    new PerformanceObserver((list) => {
        for (const e of list.getEntries()) window.__longtasks.push({ start: e.startTime, ms: e.duration });
    }).observe({ type: 'longtask', buffered: true });
    // The click that selects: its pointerup's time, before the page handles it.
    window.__clicks = [];
    window.addEventListener('pointerup', (e) => window.__clicks.push(e.timeStamp), true);
};

const fmt = (v) => (v === null || v === undefined ? '-' : Math.round(v) + ' ms');

for (const rows of sizes) {
    const id = 'bench/w' + rows;
    const url = new URL('v1/models/' + id.replace('/', '/matrices/'), base).href;
    const t0 = Date.now();
    // Uploaded once: bench/explorer.sh keeps the daemon's uploads.dir and cache_dir between runs,
    // so a later run finds the matrix, its labels and its decomposition there (the data are the
    // same bits every time: seeded by the row count).
    const known = await fetch(url).then((r) => (r.ok ? r.json() : null), () => null);
    const kept = known && known.labels;
    if (!kept) {
        await put(url, matrix(rows, rows), 'application/x-npy');
        await put(url + '/labels', labels(rows), 'text/tab-separated-values');
    }
    // The decomposition once, before the page (seconds to minutes of one core at 200k, then kept in
    // cache_dir): the page is measured, not the SVD. The page's own requests (PCA as NPY, the
    // spectrum) then hit the cache.
    for (const what of ['spectrum?rows=', 'pca?rows=&format=npy']) {
        const warm = await fetch(url + '/' + what, { headers: { Prefer: 'wait=600' } });
        if (warm.status !== 200) throw new Error(what + ': ' + warm.status + ' ' + (await warm.text()).slice(0, 300));
        await warm.arrayBuffer();
    }
    console.log(`${rows} x ${COLS}: ${kept ? 'kept from an earlier run' : 'uploaded'} and decomposed in ${((Date.now() - t0) / 1000).toFixed(1)} s (load ${load()})`);
    if (process.env.EXPLORER_PREPARE_ONLY) continue;

    const context = await browser.newContext({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    await context.addInitScript(RECORDER);
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send('Performance.enable');
    const metrics = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
    const loadStart = load();
    const m0 = await metrics();
    await page.goto(base + '#m=' + encodeURIComponent(id) + '&rows=&row=0');
    await page.waitForFunction(() => performance.getEntriesByName('embedscope:points:all').length > 0 &&
        document.getElementById('panel-pca').dataset.labels === 'ready', null, { timeout: 600000 });
    await page.waitForTimeout(300);
    const m1 = await metrics();
    const first = await page.evaluate(() => {
        const at = (n) => { const e = performance.getEntriesByName('embedscope:' + n); return e.length ? e[0].startTime : null; };
        const t = { data: at('pca:data'), drawn: at('pca:drawn'), first: at('points:first'), all: at('points:all'), labels: at('labels') };
        t.longest = Math.max(0, ...window.__longtasks.filter((e) => e.start >= t.data && e.start <= t.all).map((e) => e.ms));
        t.n = window.embedscope.panels.pca.view.n;
        t.requests = performance.getEntriesByType('resource').filter((e) => /\/(pca|spectrum|labels)\?/.test(e.name))
            .map((e) => ({ what: e.name.replace(/^.*\/(\w+)\?.*$/, '$1'), start: e.startTime, end: e.responseEnd, bytes: e.encodedBodySize }));
        return t;
    });
    const opened = {
        rows, points: first.n, pca_data_ms: first.data, first_points_after_data_ms: first.first - first.data,
        all_points_after_data_ms: first.all - first.data, labels_after_data_ms: first.labels === null ? null : first.labels - first.data,
        labels_before_first_points: first.labels !== null && first.labels < first.first,
        longest_task_data_to_all_points_ms: first.longest, requests: first.requests,
        main_thread_task_s: m1.TaskDuration - m0.TaskDuration, main_thread_script_s: m1.ScriptDuration - m0.ScriptDuration,
        main_thread_cpu_s: m1.ThreadTime - m0.ThreadTime, renderer_cpu_s: m1.ProcessTime - m0.ProcessTime, load: [loadStart, load()],
    };
    console.log(`${rows}: PCA data at ${fmt(first.data)} from navigation; first points ${fmt(opened.first_points_after_data_ms)} after it, ` +
        `all ${fmt(opened.all_points_after_data_ms)}; labels joined ${fmt(opened.labels_after_data_ms)} after it; ` +
        `longest task between ${fmt(first.longest)}; main thread ${opened.main_thread_task_s.toFixed(2)} s of tasks ` +
        `(${opened.main_thread_script_s.toFixed(2)} s script; CPU: main thread ${(opened.main_thread_cpu_s || 0).toFixed(2)} s, renderer ${(opened.renderer_cpu_s || 0).toFixed(2)} s) from navigation (load ${opened.load.join(' -> ')})`);

    // Selections: click a point (each time another one, away from the last), wait for the curve
    // and the neighbour list of the row the click picked.
    const picks = [];
    for (let s = 0; s < SELECTIONS; s++) {
        await page.waitForFunction(() => ['row', 'neighbors'].every((p) => !document.getElementById('panel-' + p).classList.contains('pending')), null, { timeout: 600000 });
        const target = await page.evaluate((s) => {
            const v = window.embedscope.panels.pca.view, box = v.overlay.getBoundingClientRect();
            const p = v.project();
            // A point in the middle band of the view, spread over the data by a stride.
            for (let k = 0; k < v.n; k++) {
                const i = (Math.floor((s + 1) * v.n / 7.3) + k * 9973) % v.n;
                const x = p[i * 3], y = p[i * 3 + 1];
                if (x > box.width * 0.2 && x < box.width * 0.8 && y > box.height * 0.2 && y < box.height * 0.8)
                    return { x: box.left + x, y: box.top + y, row: window.embedscope.panels.pca.data.index[i], before: window.embedscope.state.row };
            }
            return null;
        }, s);
        if (!target) break;
        await page.evaluate(() => { performance.clearMarks('embedscope:select'); performance.clearMarks('embedscope:row:drawn'); performance.clearMarks('embedscope:neighbors:drawn'); });
        // EXPLORER_PROFILE: the page's CPU profile of each selection (CDP Profiler, 1 ms samples):
        // its functions with the most time of their own, printed.
        if (process.env.EXPLORER_PROFILE) { await cdp.send('Profiler.enable'); await cdp.send('Profiler.setSamplingInterval', { interval: 1000 }); await cdp.send('Profiler.start'); }
        const mA = await metrics(), loadA = load(), cpuA = daemonCpuMs();
        await page.mouse.click(target.x, target.y);
        const selected = await page.waitForFunction(() => {
            const st = window.embedscope.state.row;
            const ready = (p) => performance.getEntriesByName('embedscope:' + p + ':drawn').length > 0 && window.embedscope.panels[p].urls[0].includes('row=' + st + '&');
            return performance.getEntriesByName('embedscope:select').length > 0 && ready('row') && ready('neighbors') && st;
        }, null, { timeout: 600000 }).then((h) => h.jsonValue(), () => null);
        const cpuB = daemonCpuMs();
        if (process.env.EXPLORER_PROFILE) {
            const { profile } = await cdp.send('Profiler.stop');
            const self = new Map(), byId = new Map(profile.nodes.map((n) => [n.id, n]));
            const dt = profile.timeDeltas;
            profile.samples.forEach((id, i) => {
                const f = byId.get(id).callFrame, name = (f.functionName || '(anonymous)') + ' ' + f.url.replace(/^.*\//, '') + ':' + (f.lineNumber + 1);
                self.set(name, (self.get(name) || 0) + (dt[i] || 0) / 1000);
            });
            console.log('  page profile (ms of own time): ' + [...self].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([n, ms]) => n + ' ' + ms.toFixed(0)).join('; '));
        }
        await page.waitForTimeout(200);
        const mB = await metrics();
        const t = await page.evaluate(() => {
            const at = (n) => { const e = performance.getEntriesByName('embedscope:' + n); return e.length ? e[e.length - 1].startTime : null; };
            const click = window.__clicks[window.__clicks.length - 1];
            const done = Math.max(at('row:drawn'), at('neighbors:drawn'));
            // The requests' own time (Resource Timing: from the request to its last byte): the
            // daemon's and the network's share of the wait; the rest is the page's.
            // Their start after the click says whether they ran side by side (both at once) or
            // one after the other; their bytes, what came over the wire.
            const entry = (part) => performance.getEntriesByType('resource').filter((e) => e.startTime >= click && e.name.includes(part))[0];
            const req = (part) => { const e = entry(part); return e && e.responseEnd - e.startTime; };
            const started = (part) => { const e = entry(part); return e && e.startTime - click; };
            const bytes = (part) => { const e = entry(part); return e && e.encodedBodySize; };
            return { click, select: at('select') - click, row: at('row:drawn') - click, neighbors: at('neighbors:drawn') - click,
                rowFetch: req('/cosine?'), neighborsFetch: req('/neighbors?'),
                rowStart: started('/cosine?'), neighborsStart: started('/neighbors?'), rowBytes: bytes('/cosine?'), neighborsBytes: bytes('/neighbors?'),
                longest: Math.max(0, ...window.__longtasks.filter((e) => e.start + e.ms >= click && e.start <= done).map((e) => e.ms)),
                ringed: window.embedscope.panels.pca.view.highlighted.length };
        });
        const r = { row: selected, select_ms: t.select, row_curve_ms: t.row, neighbours_ms: t.neighbors,
            row_request_ms: t.rowFetch, neighbours_request_ms: t.neighborsFetch,
            row_request_started_ms: t.rowStart, neighbours_request_started_ms: t.neighborsStart,
            row_reply_bytes: t.rowBytes, neighbours_reply_bytes: t.neighborsBytes, longest_task_ms: t.longest,
            main_thread_task_ms: 1000 * (mB.TaskDuration - mA.TaskDuration), main_thread_cpu_ms: 1000 * (mB.ThreadTime - mA.ThreadTime),
            daemon_cpu_ms: cpuA === null ? null : cpuB - cpuA,
            load: [loadA, load()] };
        picks.push(r);
        console.log(`${rows}: click on row ${selected}: selected after ${fmt(r.select_ms)}, its cosine curve drawn ${fmt(r.row_curve_ms)} ` +
            `and its neighbours ${fmt(r.neighbours_ms)} after the click (their requests ${fmt(r.row_request_ms)} and ${fmt(r.neighbours_request_ms)}, ` +
            `sent ${fmt(r.row_request_started_ms)} and ${fmt(r.neighbours_request_started_ms)} after it, ${r.row_reply_bytes} and ${r.neighbours_reply_bytes} bytes; ` +
            `the daemon's CPU ${fmt(r.daemon_cpu_ms)}); longest task ${fmt(r.longest_task_ms)}, ` +
            `main thread ${fmt(r.main_thread_task_ms)} of tasks, ${fmt(r.main_thread_cpu_ms)} of CPU (load ${r.load.join(' -> ')})`);
    }
    appendFileSync(out, JSON.stringify({ when: new Date().toISOString(), chromium: browser.version(), cores: (await import('node:os')).cpus().length,
        opened, selections: picks }) + '\n');
    await context.close();
}
await browser.close();

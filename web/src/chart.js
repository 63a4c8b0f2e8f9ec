// A light canvas chart for the geometry tab's 2-D panels (the singular spectrum, the cosine
// curves and the binned cosine heatmap): lines and markers on linear or log axes, reference
// lines, notes, a heatmap image with its colour bar, hover text and PNG export.
//
// Why not plotly here: profiled in headless Chromium on the loaded development machine, plotly's
// first draw of the spectrum was one 200-500 ms main-thread task, mostly measuring its tick
// labels one by one (getBoundingClientRect in its bBox), and its heatmap painted a canvas and
// re-encoded it as a data URL (150-300 ms at 1024 x 1024). A canvas chart draws the same panels
// in a few milliseconds, so the dashboard's first view loads no plotting library at all.

const HOVER_PX = 24; // how near (CSS px) the pointer must be to a point for its hover text

// Round tick values covering [lo, hi], about `count` of them.
export function ticks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
}

// Tick label text: short, never a long run of digits (1.5e-4, 2e5, 0.25).
export function tickLabel(v) {
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(1).replace('.0e', 'e').replace('e+', 'e');
    return String(+v.toPrecision(4));
}

// Ticks for a log axis over [lo, hi] (values > 0): the powers of ten inside, with 2 and 5 between
// them when the axis spans less than three decades.
export function logTicks(lo, hi) {
    const out = [];
    const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
    const steps = b - a <= 2 ? [1, 2, 5] : [1];
    const every = Math.max(1, Math.ceil((b - a) / 8));
    for (let e = a; e <= b; e++) {
        if ((e - a) % every) continue;
        for (const s of steps) {
            const v = s * Math.pow(10, e);
            if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push(v);
        }
    }
    return out.length >= 2 ? out : ticks(lo, hi, 4);
}

// [lo, hi] of the finite (and, on a log axis, positive) values of arrays.
function extent(arrays, log) {
    let lo = Infinity, hi = -Infinity;
    for (const a of arrays)
        for (let i = 0; i < a.length; i++) {
            const v = a[i];
            if (!Number.isFinite(v) || (log && v <= 0)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    return lo <= hi ? [lo, hi] : log ? [1, 10] : [0, 1];
}

// An axis: data -> pixel between p0 and p1 (CSS px), linear or log, padded by `pad` of its span.
function makeAxis(spec, values, p0, p1, pad) {
    const log = !!spec.log;
    let [lo, hi] = spec.range ? spec.range.slice() : extent(values, log);
    const f = log ? Math.log10 : (v) => v;
    let a = f(lo), b = f(hi);
    if (!(b > a)) { a -= 0.5; b += 0.5; }
    if (!spec.range) { const p = (b - a) * pad; a -= p; b += p; }
    const [s0, s1] = spec.reversed ? [p1, p0] : [p0, p1];
    const toPx = (v) => s0 + (f(v) - a) / (b - a) * (s1 - s0);
    const lo2 = log ? Math.pow(10, a) : a, hi2 = log ? Math.pow(10, b) : b;
    return { log, toPx, lo: lo2, hi: hi2, ticks: log ? logTicks(lo2, hi2) : ticks(lo2, hi2, Math.max(2, Math.round(Math.abs(p1 - p0) / 80))),
        title: spec.title || '' };
}

// RGB of '#rrggbb'.
const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

// A colour scale ([[t, '#rrggbb'], ...]) as a 256-entry RGB lookup table.
export function scaleTable(scale) {
    const stops = scale.map(([t, hex]) => [t, ...rgb(hex)]);
    const out = new Uint8Array(256 * 3);
    for (let k = 0; k < 256; k++) {
        const t = k / 255;
        let j = 1;
        while (j < stops.length - 1 && stops[j][0] < t) j++;
        const [t0, r0, g0, b0] = stops[j - 1], [t1, r1, g1, b1] = stops[j];
        const f = t1 > t0 ? Math.min(1, Math.max(0, (t - t0) / (t1 - t0))) : 0;
        out[k * 3] = Math.round(r0 + f * (r1 - r0));
        out[k * 3 + 1] = Math.round(g0 + f * (g1 - g0));
        out[k * 3 + 2] = Math.round(b0 + f * (b1 - b0));
    }
    return out;
}

// The heatmap's cells as an image (one pixel a cell), through the scale's lookup table.
function heatImage(heat) {
    const ny = heat.z.length, nx = ny ? heat.z[0].length : 0;
    const canvas = document.createElement('canvas');
    canvas.width = Math.max(1, nx);
    canvas.height = Math.max(1, ny);
    const ctx = canvas.getContext('2d');
    const img = ctx.createImageData(canvas.width, canvas.height);
    const lut = scaleTable(heat.scale), span = heat.zmax - heat.zmin || 1;
    for (let i = 0; i < ny; i++) {
        const row = heat.z[i];
        for (let j = 0; j < nx; j++) {
            const v = row[j], o = (i * nx + j) * 4;
            if (v === null || !Number.isFinite(v)) continue; // transparent: no value
            const k = Math.round(255 * Math.min(1, Math.max(0, (v - heat.zmin) / span))) * 3;
            img.data[o] = lut[k];
            img.data[o + 1] = lut[k + 1];
            img.data[o + 2] = lut[k + 2];
            img.data[o + 3] = 255;
        }
    }
    ctx.putImageData(img, 0, 0);
    return canvas;
}

export class Chart {
    // container: an empty element sized by CSS; opts.label names the figure.
    constructor(container, opts) {
        this.opts = opts || {};
        this.container = container;
        container.classList.add('chart');
        this.canvas = document.createElement('canvas');
        this.canvas.setAttribute('role', 'img');
        this.canvas.setAttribute('aria-label', this.opts.label || 'chart');
        this.tip = document.createElement('div');
        this.tip.className = 'tip';
        this.tip.hidden = true;
        container.append(this.canvas, this.tip);
        this.spec = null;
        this.canvas.addEventListener('pointermove', (ev) => this.hover(ev));
        this.canvas.addEventListener('pointerleave', () => { this.tip.hidden = true; });
        this.resizeObserver = new ResizeObserver(() => this.redraw());
        this.resizeObserver.observe(container);
    }

    // spec: { title, columns (panes side by side; else stacked), panes: [{ x: axis, y: axis,
    // series: [{ x, y, mode: 'lines'|'markers'|'lines+markers', colour, colours, width, size,
    // hover(i) }], lines: [{ x0, x1, y0, y1, colour }], notes: [{ x, y, text, colour }],
    // heat: { z (rows of numbers), x, y (cell centres), zmin, zmax, scale, title, hover(i, j) },
    // square }] }. An axis: { title, short (a shorter title for a y axis it does not fit), log,
    // range: [lo, hi], reversed }.
    set(spec) {
        this.spec = spec;
        for (const pane of spec.panes) if (pane.heat) pane.heat.image = heatImage(pane.heat);
        this.draw();
    }

    redraw() {
        if (this.frame) return;
        this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
    }

    size() {
        const r = this.container.getBoundingClientRect();
        return { w: Math.max(1, Math.round(r.width)), h: Math.max(1, Math.round(r.height)), dpr: window.devicePixelRatio || 1 };
    }

    draw() {
        if (this.destroyed || !this.spec) return;
        const { w, h, dpr } = this.size();
        const cv = this.canvas;
        if (cv.width !== w * dpr || cv.height !== h * dpr) { cv.width = w * dpr; cv.height = h * dpr; }
        const ctx = cv.getContext('2d');
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
        const css = getComputedStyle(this.container);
        const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
        this.colours = { fg: v('--fg', '#1d1d1f'), muted: v('--muted', '#5f6368'), line: v('--line', '#d9d9de'),
            grid: v('--grid', '#eceef1'), panel: v('--panel', '#fff') };
        ctx.fillStyle = this.colours.panel;
        ctx.fillRect(0, 0, w, h);
        const spec = this.spec;
        let top = 0;
        ctx.font = '12px system-ui, sans-serif';
        if (spec.title) {
            ctx.fillStyle = this.colours.fg;
            ctx.textAlign = 'center';
            ctx.textBaseline = 'top';
            ctx.fillText(spec.title, w / 2, 4, w - 8);
            top = 22;
        }
        const n = spec.panes.length, side = spec.columns !== false && w >= 560;
        this.layout = spec.panes.map((pane, i) => {
            const box = side ? { x: i * w / n, y: top, w: w / n, h: h - top } : { x: 0, y: top + i * (h - top) / n, w, h: (h - top) / n };
            return this.drawPane(ctx, pane, box);
        });
        this.drawn = (this.drawn || 0) + 1;
    }

    // One pane in box (CSS px): axes, grid, heatmap, lines, series, notes. Returns its axes.
    drawPane(ctx, pane, box) {
        const c = this.colours;
        const right = pane.heat ? 64 : 12;
        let plot = { x: box.x + 58, y: box.y + 8, w: box.w - 58 - right, h: box.h - 8 - 42 };
        if (pane.square) { // equal units: the largest square that fits
            const s = Math.min(plot.w, plot.h);
            plot = { x: plot.x + (plot.w - s) / 2, y: plot.y, w: s, h: s };
        }
        if (plot.w < 10 || plot.h < 10) return null;
        const xs = pane.heat ? [pane.heat.x] : pane.series.map((s) => s.x).concat((pane.lines || []).map((l) => [l.x0, l.x1]));
        const ys = pane.heat ? [pane.heat.y] : pane.series.map((s) => s.y);
        const pad = pane.heat ? 0 : 0.03;
        const ax = makeAxis(pane.x, heatEdges(pane.heat, 'x') || xs, plot.x, plot.x + plot.w, pad);
        // Screen y grows downwards: a plain y axis runs from the bottom up.
        const ay = makeAxis(Object.assign({}, pane.y, { reversed: !pane.y.reversed }), heatEdges(pane.heat, 'y') || ys,
            plot.y, plot.y + plot.h, pad);
        ctx.save();
        ctx.font = '11px system-ui, sans-serif';
        // Grid lines and tick labels.
        ctx.strokeStyle = c.grid;
        ctx.fillStyle = c.muted;
        ctx.lineWidth = 1;
        ctx.textAlign = 'center';
        ctx.textBaseline = 'top';
        for (const t of ax.ticks) {
            const x = Math.round(ax.toPx(t)) + 0.5;
            if (!pane.heat) { ctx.beginPath(); ctx.moveTo(x, plot.y); ctx.lineTo(x, plot.y + plot.h); ctx.stroke(); }
            ctx.fillText(tickLabel(t), x, plot.y + plot.h + 4);
        }
        ctx.textAlign = 'right';
        ctx.textBaseline = 'middle';
        for (const t of ay.ticks) {
            const y = Math.round(ay.toPx(t)) + 0.5;
            if (!pane.heat) { ctx.beginPath(); ctx.moveTo(plot.x, y); ctx.lineTo(plot.x + plot.w, y); ctx.stroke(); }
            ctx.fillText(tickLabel(t), plot.x - 5, y);
        }
        ctx.strokeStyle = c.line;
        ctx.strokeRect(plot.x + 0.5, plot.y + 0.5, plot.w - 1, plot.h - 1);
        // Axis titles.
        ctx.fillStyle = c.fg;
        ctx.textAlign = 'center';
        ctx.textBaseline = 'bottom';
        ctx.fillText(ax.title, plot.x + plot.w / 2, plot.y + plot.h + 40, box.w - 8); // under the tick labels
        ctx.save();
        ctx.translate(box.x + 12, plot.y + plot.h / 2);
        ctx.rotate(-Math.PI / 2);
        ctx.textBaseline = 'middle';
        // A y title longer than the axis (a short pane on a phone): its short form, if it has one.
        const yTitle = pane.y.short && ctx.measureText(ay.title).width > plot.h ? pane.y.short : ay.title;
        ctx.fillText(yTitle, 0, 0, plot.h);
        ctx.restore();
        // The data, clipped to the plot area.
        ctx.save();
        ctx.beginPath();
        ctx.rect(plot.x, plot.y, plot.w, plot.h);
        ctx.clip();
        if (pane.heat) {
            ctx.imageSmoothingEnabled = false;
            const e = { x0: ax.toPx(ax.lo), x1: ax.toPx(ax.hi), y0: ay.toPx(ay.hi), y1: ay.toPx(ay.lo) };
            // Rows of z go down the screen when the y axis is reversed (row 0 at the top).
            ctx.save();
            if (!pane.y.reversed) { ctx.translate(0, e.y0 + e.y1); ctx.scale(1, -1); }
            ctx.drawImage(pane.heat.image, Math.min(e.x0, e.x1), Math.min(e.y0, e.y1), Math.abs(e.x1 - e.x0), Math.abs(e.y1 - e.y0));
            ctx.restore();
        }
        for (const l of pane.lines || []) {
            ctx.strokeStyle = l.colour || c.muted;
            ctx.setLineDash([3, 3]);
            ctx.beginPath();
            ctx.moveTo(ax.toPx(l.x0), ay.toPx(l.y0));
            ctx.lineTo(ax.toPx(l.x1), ay.toPx(l.y1));
            ctx.stroke();
        }
        ctx.setLineDash([]);
        for (const s of pane.series) this.drawSeries(ctx, s, ax, ay);
        ctx.restore();
        for (const note of pane.notes || []) {
            ctx.fillStyle = note.colour || c.fg;
            ctx.textAlign = 'left';
            ctx.textBaseline = 'top';
            ctx.fillText(note.text, Math.min(ax.toPx(note.x) + 6, plot.x + plot.w - ctx.measureText(note.text).width - 2), ay.toPx(note.y) + 4);
        }
        if (pane.heat) this.colourBar(ctx, pane.heat, { x: plot.x + plot.w + 14, y: plot.y + 14, h: Math.min(plot.h - 28, 220) });
        ctx.restore();
        return { plot, ax, ay, pane };
    }

    drawSeries(ctx, s, ax, ay) {
        const n = Math.min(s.x.length, s.y.length);
        const ok = (i) => Number.isFinite(s.y[i]) && (!ay.log || s.y[i] > 0) && (!ax.log || s.x[i] > 0);
        if (s.mode !== 'markers') {
            ctx.strokeStyle = s.colour;
            ctx.lineWidth = s.width || 1.5;
            ctx.beginPath();
            let pen = false;
            for (let i = 0; i < n; i++) {
                if (!ok(i)) { pen = false; continue; }
                const x = ax.toPx(s.x[i]), y = ay.toPx(s.y[i]);
                if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
                pen = true;
            }
            ctx.stroke();
        }
        if (s.mode === 'markers' || s.mode === 'lines+markers') {
            const r = (s.size || 4) / 2;
            for (let i = 0; i < n; i++) {
                if (!ok(i)) continue;
                ctx.fillStyle = s.colours ? s.colours[i] : s.colour;
                ctx.beginPath();
                ctx.arc(ax.toPx(s.x[i]), ay.toPx(s.y[i]), r, 0, 2 * Math.PI);
                ctx.fill();
                if (s.outline) { ctx.strokeStyle = s.outline; ctx.lineWidth = 1; ctx.stroke(); }
            }
        }
    }

    colourBar(ctx, heat, at) {
        const lut = scaleTable(heat.scale);
        for (let k = 0; k < at.h; k++) {
            const q = Math.round(255 * (1 - k / Math.max(1, at.h - 1))) * 3;
            ctx.fillStyle = 'rgb(' + lut[q] + ',' + lut[q + 1] + ',' + lut[q + 2] + ')';
            ctx.fillRect(at.x, at.y + k, 12, 1);
        }
        ctx.strokeStyle = this.colours.line;
        ctx.strokeRect(at.x + 0.5, at.y + 0.5, 11, at.h - 1);
        ctx.fillStyle = this.colours.muted;
        ctx.textAlign = 'left';
        ctx.textBaseline = 'middle';
        for (const t of ticks(heat.zmin, heat.zmax, 4)) ctx.fillText(tickLabel(t), at.x + 16, at.y + (1 - (t - heat.zmin) / (heat.zmax - heat.zmin || 1)) * (at.h - 1));
        ctx.fillStyle = this.colours.fg;
        ctx.textBaseline = 'bottom';
        ctx.fillText(heat.title || '', at.x - 2, at.y - 3);
    }

    // The hover text of the point (or cell) nearest the pointer, in a tip beside it.
    hover(ev) {
        const r = this.canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
        const text = this.textAt(px, py);
        if (!text) { this.tip.hidden = true; return; }
        this.tip.textContent = text;
        this.tip.hidden = false;
        this.tip.style.left = Math.max(0, Math.min(px + 12, r.width - this.tip.offsetWidth - 2)) + 'px';
        this.tip.style.top = (py + 12) + 'px';
    }

    textAt(px, py) {
        for (const l of this.layout || []) {
            if (!l) continue;
            const { plot, ax, ay, pane } = l;
            if (px < plot.x || px > plot.x + plot.w || py < plot.y || py > plot.y + plot.h) continue;
            if (pane.heat) {
                const h = pane.heat, find = (centres, v) => nearestIndex(centres, v);
                const invX = ax.lo + (px - ax.toPx(ax.lo)) / (ax.toPx(ax.hi) - ax.toPx(ax.lo)) * (ax.hi - ax.lo);
                const invY = ay.lo + (py - ay.toPx(ay.lo)) / (ay.toPx(ay.hi) - ay.toPx(ay.lo)) * (ay.hi - ay.lo);
                const j = find(h.x, invX), i = find(h.y, invY);
                return i >= 0 && j >= 0 && h.hover ? h.hover(i, j) : '';
            }
            let best = null, bestD = HOVER_PX * HOVER_PX;
            for (const s of pane.series) {
                if (!s.hover) continue;
                for (let i = 0; i < s.x.length; i++) {
                    const dx = ax.toPx(s.x[i]) - px, dy = ay.toPx(s.y[i]) - py, d = dx * dx + dy * dy;
                    if (d < bestD) { bestD = d; best = [s, i]; }
                }
            }
            return best ? best[0].hover(best[1]) : '';
        }
        return '';
    }

    // Client coordinates of data point (x, y) in pane p (for tests and keyboard users).
    clientPosition(p, x, y) {
        const l = this.layout[p], r = this.canvas.getBoundingClientRect();
        return { x: r.left + l.ax.toPx(x), y: r.top + l.ay.toPx(y) };
    }

    toPNG() {
        this.draw();
        return this.canvas.toDataURL('image/png');
    }

    destroy() {
        this.destroyed = true;
        this.resizeObserver.disconnect();
        if (this.frame) cancelAnimationFrame(this.frame);
        this.container.textContent = '';
        this.container.classList.remove('chart');
    }
}

// The index of the centre nearest v in an increasing array of cell centres, or -1.
function nearestIndex(centres, v) {
    let lo = 0, hi = centres.length - 1;
    if (hi < 0) return -1;
    while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (centres[mid] <= v) lo = mid; else hi = mid;
    }
    return Math.abs(centres[lo] - v) <= Math.abs(centres[hi] - v) ? lo : hi;
}

// A heatmap axis spans its cells' outer edges: half a cell beyond the first and last centres.
function heatEdges(heat, key) {
    if (!heat) return null;
    const c = heat[key];
    if (!c.length) return [[0, 1]];
    const first = c.length > 1 ? (c[1] - c[0]) / 2 : 0.5, last = c.length > 1 ? (c[c.length - 1] - c[c.length - 2]) / 2 : 0.5;
    return [[c[0] - first, c[c.length - 1] + last]];
}

// The geometry tab's 2-D panels (the singular spectrum, the cosine curves and the binned cosine
// heatmap), drawn by uPlot: one uPlot chart a pane, its axes, ticks, log scales, cursor and
// drag-to-zoom; this file turns the dashboard's chart spec into uPlot's options and adds what
// uPlot leaves to hooks: reference lines, notes, the heatmap image and its colour bar, and the
// hover text of the nearest point.
//
// Why not plotly here: profiled in headless Chromium on the loaded development machine, plotly's
// first draw of the spectrum was one 200-500 ms main-thread task, mostly measuring its tick
// labels one by one (getBoundingClientRect in its bBox), and its heatmap painted a canvas and
// re-encoded it as a data URL (150-300 ms at 1024 x 1024). uPlot (canvas, about 50 KB) draws
// the same panels in a few milliseconds, so the dashboard's first view loads no plotly at all.
import uPlot from 'uplot';

const FONT = '11px system-ui, sans-serif';
const TITLE_FONT = '12px system-ui, sans-serif';
const COLOUR_BAR_PX = 12; // the heatmap's colour strip, right of the plot
// Room (CSS px) around a square heatmap: the y axis and title (50 + 18) left, the colour strip's
// axis and title (56 + 18) right; the x axis and title (30 + 18) below, uPlot's padding above.
const HEAT_SIDES_PX = 50 + 18 + 56 + 18 + 4, HEAT_ENDS_PX = 30 + 18 + 14;

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

// The series of a pane on one shared, increasing x (uPlot's data layout): the distinct x values
// of all series, each series' y at them (null where it has no point, or where a log axis cannot
// show it), and for each series the index in its own arrays of each shared x (for hover text).
function align(series, logX, logY) {
    const seen = new Set();
    for (const s of series)
        for (let i = 0, n = Math.min(s.x.length, s.y.length); i < n; i++)
            if (Number.isFinite(s.x[i]) && (!logX || s.x[i] > 0)) seen.add(s.x[i]);
    const x = Array.from(seen).sort((a, b) => a - b);
    const at = new Map(x.map((v, k) => [v, k]));
    const ys = [], index = [];
    for (const s of series) {
        const y = new Array(x.length).fill(null), idx = new Int32Array(x.length).fill(-1);
        for (let i = 0, n = Math.min(s.x.length, s.y.length); i < n; i++) {
            const k = at.get(s.x[i]), v = s.y[i];
            if (k === undefined || !Number.isFinite(v) || (logY && v <= 0)) continue;
            y[k] = v;
            idx[k] = i;
        }
        ys.push(y);
        index.push(idx);
    }
    return { x, ys, index };
}

// uPlot series for one spec series: its line, and its markers (one marker series per colour
// when the points are coloured one by one: uPlot draws a series' points in one colour).
function uSeries(s, y) {
    const out = [], size = s.size || 4, width = s.width || 1.5;
    const markers = s.mode === 'markers' || s.mode === 'lines+markers';
    const pointsOf = (colour) => ({ show: true, size, width: s.outline ? 1 : 0, fill: colour, stroke: s.outline || colour });
    if (s.mode !== 'markers')
        out.push({ series: { stroke: s.colour, width, spanGaps: false, points: markers && !s.colours ? pointsOf(s.colour) : { show: false } }, y });
    if (markers && (s.colours || s.mode === 'markers'))
        for (const colour of s.colours ? new Set(s.colours) : [s.colour])
            out.push({ series: { stroke: colour, paths: () => null, points: pointsOf(colour) },
                y: s.colours ? y.map((v, k) => (v !== null && s.colours[s.index[k]] === colour ? v : null)) : y });
    return out;
}

function axis(c, title, extra) {
    return Object.assign({ stroke: c.fg, font: FONT, labelFont: TITLE_FONT, label: title || '', labelSize: 18, size: 46,
        grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.line, width: 1, size: 4 } }, extra);
}

// A scale from a spec axis: log, a fixed range, reversed (downwards for y).
function scale(spec, fixed) {
    const out = { time: false };
    if (spec.log) Object.assign(out, { distr: 3, log: 10 });
    const range = fixed || spec.range;
    if (range) out.range = () => range.slice();
    if (spec.reversed) out.dir = -1;
    return out;
}

// Reference lines (dashed) and notes, in the draw hook: uPlot draws neither by itself.
function drawMarks(u, pane, c) {
    const ctx = u.ctx, r = uPlot.pxRatio, b = u.bbox;
    const px = (v, key) => u.valToPos(v, key, true);
    ctx.save();
    ctx.beginPath();
    ctx.rect(b.left, b.top, b.width, b.height);
    ctx.clip();
    ctx.lineWidth = r;
    ctx.setLineDash([3 * r, 3 * r]);
    for (const l of pane.lines || []) {
        ctx.strokeStyle = l.colour || c.muted;
        ctx.beginPath();
        ctx.moveTo(px(l.x0, 'x'), px(l.y0, 'y'));
        ctx.lineTo(px(l.x1, 'x'), px(l.y1, 'y'));
        ctx.stroke();
    }
    ctx.restore();
    ctx.save();
    ctx.font = (11 * r) + 'px system-ui, sans-serif';
    ctx.textAlign = 'left';
    ctx.textBaseline = 'top';
    for (const note of pane.notes || []) {
        ctx.fillStyle = note.colour || c.fg;
        const x = Math.min(px(note.x, 'x') + 6 * r, b.left + b.width - ctx.measureText(note.text).width - 2 * r);
        ctx.fillText(note.text, x, px(note.y, 'y') + 4 * r);
    }
    ctx.restore();
}

// The heatmap image over the plot area and its colour strip beside it (the strip's ticks are
// the uPlot axis of scale z on the right).
function drawHeat(u, heat, c) {
    const ctx = u.ctx, r = uPlot.pxRatio, b = u.bbox;
    const [x0, x1] = heatEdges(heat, 'x'), [y0, y1] = heatEdges(heat, 'y');
    const left = u.valToPos(x0, 'x', true), right = u.valToPos(x1, 'x', true);
    const ya = u.valToPos(y0, 'y', true), yb = u.valToPos(y1, 'y', true);
    const top = Math.min(ya, yb), h = Math.abs(yb - ya);
    ctx.save();
    ctx.beginPath();
    ctx.rect(b.left, b.top, b.width, b.height);
    ctx.clip();
    ctx.imageSmoothingEnabled = false;
    // Row 0 of z is the first y centre: at the top when the y axis runs downwards, else flipped.
    if (ya <= yb) ctx.drawImage(heat.image, Math.min(left, right), top, Math.abs(right - left), h);
    else {
        ctx.translate(0, top + h);
        ctx.scale(1, -1);
        ctx.drawImage(heat.image, Math.min(left, right), 0, Math.abs(right - left), h);
    }
    ctx.restore();
    const lut = scaleTable(heat.scale), sx = b.left + b.width + 4 * r, w = COLOUR_BAR_PX * r;
    for (let k = 0; k < b.height; k++) {
        const q = Math.round(255 * (1 - k / Math.max(1, b.height - 1))) * 3;
        ctx.fillStyle = 'rgb(' + lut[q] + ',' + lut[q + 1] + ',' + lut[q + 2] + ')';
        ctx.fillRect(sx, b.top + k, w, 1);
    }
    ctx.strokeStyle = c.line;
    ctx.lineWidth = r;
    ctx.strokeRect(sx, b.top, w, b.height);
}

export class Chart {
    // container: an empty element sized by CSS; opts.label names the figure.
    constructor(container, opts) {
        this.opts = opts || {};
        this.container = container;
        container.classList.add('chart');
        this.titleBox = document.createElement('div');
        this.titleBox.className = 'chart-title';
        this.paneBox = document.createElement('div');
        this.paneBox.className = 'chart-panes';
        this.tip = document.createElement('div');
        this.tip.className = 'tip';
        this.tip.hidden = true;
        container.append(this.titleBox, this.paneBox, this.tip);
        this.spec = null;
        this.plots = [];
        this.drawn = 0;
        this.resizeObserver = new ResizeObserver(() => this.redraw());
        this.resizeObserver.observe(container);
    }

    // spec: { title, columns (panes side by side; else stacked), panes: [{ x: axis, y: axis,
    // series: [{ x, y, mode: 'lines'|'markers'|'lines+markers', colour, colours, width, size,
    // outline, hover(i) }], lines: [{ x0, x1, y0, y1, colour }], notes: [{ x, y, text, colour }],
    // heat: { z (rows of numbers), x, y (cell centres), zmin, zmax, scale, title, hover(i, j) },
    // square }] }. An axis: { title, short (a shorter title for a y axis it does not fit), log,
    // range: [lo, hi], reversed }.
    set(spec) {
        this.spec = spec;
        for (const pane of spec.panes) if (pane.heat) pane.heat.image = heatImage(pane.heat);
        this.build();
    }

    // The colours of the page (light or dark) where the chart is.
    colours() {
        const css = getComputedStyle(this.container);
        const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
        return { fg: v('--fg', '#1d1d1f'), muted: v('--muted', '#5f6368'), line: v('--line', '#d9d9de'),
            grid: v('--grid', '#eceef1'), panel: v('--panel', '#fff') };
    }

    // Pane sizes (CSS px): side by side when wide enough, else stacked.
    sizes() {
        const r = this.container.getBoundingClientRect();
        const top = this.spec.title ? this.titleBox.getBoundingClientRect().height : 0;
        const n = this.spec.panes.length, side = this.spec.columns !== false && r.width >= 560;
        this.paneBox.classList.toggle('stacked', !side);
        const w = Math.max(1, Math.floor(side ? r.width / n : r.width)), h = Math.max(1, Math.floor(side ? r.height - top : (r.height - top) / n));
        return this.spec.panes.map((pane) => {
            if (!pane.square) return { width: w, height: h };
            // Equal units: the largest square plot area that fits beside the axes and colour bar.
            const s = Math.max(10, Math.min(w - HEAT_SIDES_PX, h - HEAT_ENDS_PX));
            return { width: Math.min(w, s + HEAT_SIDES_PX), height: Math.min(h, s + HEAT_ENDS_PX) };
        });
    }

    build() {
        for (const u of this.plots) u.destroy();
        this.plots = [];
        this.tip.hidden = true;
        this.titleBox.textContent = this.spec.title || '';
        this.titleBox.hidden = !this.spec.title;
        const c = this.colours(), sizes = this.sizes();
        this.spec.panes.forEach((pane, p) => {
            const opts = pane.heat ? this.heatOptions(pane, c) : this.lineOptions(pane, c, sizes[p].height);
            Object.assign(opts, sizes[p], { legend: { show: false } });
            opts.hooks = Object.assign({}, opts.hooks, {
                draw: [(u) => { opts.drawExtra(u); this.drawn++; }],
                setCursor: [(u) => this.hover(u, pane)],
            });
            opts.cursor = Object.assign({ drag: { x: !pane.heat, y: false }, points: { size: 7 } }, opts.cursor);
            const u = new uPlot(opts, opts.data, this.paneBox);
            u.ctx.canvas.setAttribute('role', 'img');
            u.ctx.canvas.setAttribute('aria-label', (this.opts.label || 'chart') + (this.spec.panes.length > 1 ? ', pane ' + (p + 1) : ''));
            u.over.addEventListener('pointerleave', () => { this.tip.hidden = true; });
            this.plots.push(u);
        });
    }

    lineOptions(pane, c, h) {
        const { x, ys, index } = align(pane.series, pane.x.log, pane.y.log);
        const series = [{}], data = [x], hovers = [];
        pane.series.forEach((s, k) => {
            hovers.push({ s, index: index[k], y: ys[k] });
            for (const part of uSeries(Object.assign({}, s, { index: index[k] }), ys[k])) {
                series.push(part.series);
                data.push(part.y);
            }
        });
        pane.hovers = hovers;
        // A y title longer than the axis (a short pane on a phone): its short form, if it has one.
        const yTitle = pane.y.short && (pane.y.title || '').length * 6.5 > h - 70 ? pane.y.short : pane.y.title;
        return { data, series, scales: { x: scale(pane.x), y: scale(pane.y) },
            axes: [axis(c, pane.x.title, { size: 30 }), axis(c, yTitle, { size: 50 })],
            drawExtra: (u) => drawMarks(u, pane, c) };
    }

    // The heatmap: a uPlot chart with no visible series whose scales span the cells' edges, the
    // image drawn in its draw hook and a right-hand axis (scale z) labelling the colour strip.
    heatOptions(pane, c) {
        const heat = pane.heat;
        const ex = heatEdges(heat, 'x'), ey = heatEdges(heat, 'y');
        return { data: [ex, [null, null], [null, null]],
            series: [{}, { scale: 'y', show: true, stroke: 'transparent' }, { scale: 'z', stroke: 'transparent' }],
            scales: { x: scale(pane.x, ex), y: scale(pane.y, ey), z: { range: () => [heat.zmin, heat.zmax] } },
            axes: [axis(c, pane.x.title, { size: 30, grid: { show: false } }), axis(c, pane.y.title, { size: 50, grid: { show: false } }),
                axis(c, heat.title, { scale: 'z', side: 1, size: 56, gap: COLOUR_BAR_PX + 8, grid: { show: false }, ticks: { show: false } })],
            cursor: { points: { show: false } },
            drawExtra: (u) => drawHeat(u, heat, c) };
    }

    redraw() {
        if (this.frame) return;
        this.frame = requestAnimationFrame(() => {
            this.frame = 0;
            if (this.destroyed || !this.spec) return;
            const sizes = this.sizes();
            this.plots.forEach((u, p) => {
                if (u.width !== sizes[p].width || u.height !== sizes[p].height) u.setSize(sizes[p]);
            });
        });
    }

    // The hover text of the point (or cell) under the cursor, in a tip beside it.
    hover(u, pane) {
        const text = this.textAt(u, pane);
        if (!text) { this.tip.hidden = true; return; }
        const box = this.container.getBoundingClientRect(), over = u.over.getBoundingClientRect();
        const px = over.left - box.left + u.cursor.left, py = over.top - box.top + u.cursor.top;
        this.tip.textContent = text;
        this.tip.hidden = false;
        this.tip.style.left = Math.max(0, Math.min(px + 12, box.width - this.tip.offsetWidth - 2)) + 'px';
        this.tip.style.top = (py + 12) + 'px';
    }

    textAt(u, pane) {
        const { left, top, idx } = u.cursor;
        if (!(left >= 0 && top >= 0)) return '';
        if (pane.heat) {
            const h = pane.heat, j = nearestIndex(h.x, u.posToVal(left, 'x')), i = nearestIndex(h.y, u.posToVal(top, 'y'));
            return i >= 0 && j >= 0 && h.hover ? h.hover(i, j) : '';
        }
        if (idx == null) return '';
        // uPlot's cursor picks the nearest x; of the series with a point there, the nearest in y.
        let best = null, bestD = Infinity;
        for (const hv of pane.hovers) {
            if (!hv.s.hover || hv.index[idx] < 0) continue;
            const d = Math.abs(u.valToPos(hv.y[idx], 'y') - top);
            if (d < bestD) { bestD = d; best = hv; }
        }
        return best ? best.s.hover(best.index[idx]) : '';
    }

    // The chart as one PNG (title and panes as on the screen, on the panel's colour).
    toPNG() {
        const r = uPlot.pxRatio, box = this.container.getBoundingClientRect(), c = this.colours();
        const out = document.createElement('canvas');
        out.width = Math.max(1, Math.round(box.width * r));
        out.height = Math.max(1, Math.round(box.height * r));
        const ctx = out.getContext('2d');
        ctx.fillStyle = c.panel;
        ctx.fillRect(0, 0, out.width, out.height);
        if (this.spec && this.spec.title) {
            const t = this.titleBox.getBoundingClientRect();
            ctx.fillStyle = c.fg;
            ctx.font = (12 * r) + 'px system-ui, sans-serif';
            ctx.textAlign = 'center';
            ctx.textBaseline = 'middle';
            ctx.fillText(this.spec.title, out.width / 2, (t.top - box.top + t.height / 2) * r, out.width - 8 * r);
        }
        for (const u of this.plots) {
            const cb = u.ctx.canvas.getBoundingClientRect();
            ctx.drawImage(u.ctx.canvas, Math.round((cb.left - box.left) * r), Math.round((cb.top - box.top) * r));
        }
        return out.toDataURL('image/png');
    }

    destroy() {
        this.destroyed = true;
        this.resizeObserver.disconnect();
        if (this.frame) cancelAnimationFrame(this.frame);
        for (const u of this.plots) u.destroy();
        this.plots = [];
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
    const c = heat[key];
    if (!c.length) return [0, 1];
    const first = c.length > 1 ? (c[1] - c[0]) / 2 : 0.5, last = c.length > 1 ? (c[c.length - 1] - c[c.length - 2]) / 2 : 0.5;
    return [c[0] - first, c[c.length - 1] + last];
}

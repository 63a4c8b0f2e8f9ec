// A WebGL point view for large point sets (the PCA of a 50k-row embedding): 2-D (pan) or 3-D
// (orbit) points, optionally joined in order by a line, coloured per point, with axes drawn on
// a 2-D overlay, hover text, click-to-pick and highlighted points.
//
// Why not plotly here: measured in headless Chromium (software WebGL) at 50,000 points, plotly's
// scatter3d took a 13 s draw with a 5.7 s main-thread task, 2.9 s per rotation frame and a 410 MB
// heap; scattergl (2-D) 1.1 s. This view uploads the points once into GPU buffers (regl), so a
// rotation is one draw call with a new matrix; picking and hover project the points on the CPU
// (one pass, a few ms at 200k) only when the pointer rests or clicks, never while dragging.
import createREGL from 'regl';
import { mat4, vec4 } from 'gl-matrix';

// The point view's axis ticks (its 2-D axes and the 3-D view's axis labels, drawn on its overlay;
// the 2-D charts' axes are uPlot's).
// Round tick values covering [lo, hi], about `count` of them.
function ticks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
}

// Tick label text: short, never a long run of digits (1.5e-4, 2e5, 0.25).
function tickLabel(v) {
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(1).replace('.0e', 'e').replace('e+', 'e');
    return String(+v.toPrecision(4));
}

const DRAG_PX = 4; // a press that moves less than this is a click, more is a drag (never a pick)
const HOVER_PX = 10; // how near (CSS px) the pointer must be to a point to hover or pick it
const CHUNK_POINTS = 16384; // points drawn a frame when a large set is drawn progressively
const LOD_POINTS = 12000; // at most this many points a frame while dragging
const MAX_STRIDE = 21; // WebGL 1 allows a vertex stride of at most 255 bytes (12 a position)

// Normalise n points (dim 2 or 3, interleaved Float32Array) into [-1, 1] on the longest extent,
// keeping the aspect (the data's own proportions). Returns the centre and scale for the axes.
function bounds(pos, dim, n) {
    const lo = [Infinity, Infinity, Infinity], hi = [-Infinity, -Infinity, -Infinity];
    for (let i = 0; i < n; i++)
        for (let c = 0; c < dim; c++) {
            const v = pos[i * dim + c];
            if (v < lo[c]) lo[c] = v;
            if (v > hi[c]) hi[c] = v;
        }
    for (let c = dim; c < 3; c++) { lo[c] = 0; hi[c] = 0; }
    if (n === 0) for (let c = 0; c < 3; c++) { lo[c] = -1; hi[c] = 1; }
    const centre = lo.map((l, c) => (l + hi[c]) / 2);
    const extent = Math.max(...lo.map((l, c) => hi[c] - l)) || 1;
    return { lo, hi, centre, scale: 2 / extent };
}

export class PointView {
    // container: an empty element sized by CSS. opts.onPick(i), opts.onCamera(camera),
    // opts.hoverText(i) -> string.
    constructor(container, opts) {
        this.opts = opts || {};
        this.container = container;
        container.classList.add('points');
        this.canvas = document.createElement('canvas');
        this.canvas.className = 'gl';
        this.overlay = document.createElement('canvas');
        this.overlay.className = 'overlay';
        // The overlay takes the pointer and the keyboard: arrows rotate (3-D) or pan (2-D),
        // + and - zoom.
        this.overlay.tabIndex = 0;
        this.overlay.setAttribute('role', 'application');
        this.overlay.setAttribute('aria-roledescription', 'point view');
        this.overlay.setAttribute('aria-label', (this.opts.label || 'points') + ': arrow keys rotate or pan, + and − zoom');
        this.tip = document.createElement('div');
        this.tip.className = 'tip';
        this.tip.hidden = true;
        container.append(this.canvas, this.overlay, this.tip);
        this.regl = createREGL({ canvas: this.canvas, attributes: { antialias: false, preserveDrawingBuffer: true, alpha: true },
            optionalExtensions: ['OES_standard_derivatives'] });
        this.n = 0;
        this.dim = 3;
        this.camera = { yaw: 0.8, pitch: 0.45, zoom: 1, px: 0, py: 0 };
        this.highlighted = [];
        this.projected = null; // Float32Array of screen x, y per point for the current camera
        this.makeCommands();
        this.warmUp();
        this.listen();
        this.resizeObserver = new ResizeObserver(() => this.redraw());
        this.resizeObserver.observe(container);
    }

    makeCommands() {
        const regl = this.regl;
        const vert = `
            precision highp float;
            attribute vec3 position;
            attribute vec4 colour;
            uniform mat4 matrix;
            uniform float size;
            varying vec4 vColour;
            void main() {
                gl_Position = matrix * vec4(position, 1.0);
                gl_PointSize = size;
                vColour = colour;
            }`;
        this.drawPoints = regl({
            vert,
            frag: `
                precision mediump float;
                varying vec4 vColour;
                uniform float ring;
                void main() {
                    vec2 p = gl_PointCoord * 2.0 - 1.0;
                    float r = dot(p, p);
                    if (r > 1.0) discard;
                    gl_FragColor = (ring > 0.0 && r > 0.45) ? vec4(0.0, 0.0, 0.0, 1.0) : vColour;
                }`,
            attributes: { position: regl.prop('position'), colour: regl.prop('colour') },
            uniforms: { matrix: regl.prop('matrix'), size: regl.prop('size'), ring: regl.prop('ring') },
            count: regl.prop('count'),
            offset: regl.prop('offset'),
            primitive: 'points',
            depth: { enable: regl.prop('depth') },
        });
        this.drawLine = regl({
            vert,
            frag: `
                precision mediump float;
                varying vec4 vColour;
                void main() { gl_FragColor = vec4(vColour.rgb, 0.55); }`,
            attributes: { position: regl.prop('position'), colour: regl.prop('colour') },
            uniforms: { matrix: regl.prop('matrix'), size: 1 },
            count: regl.prop('count'),
            offset: regl.prop('offset'),
            primitive: 'line strip',
            blend: { enable: true, func: { src: 'src alpha', dst: 'one minus src alpha' } },
            depth: { enable: regl.prop('depth') },
        });
    }

    // Every draw call this view makes, once, with one point off screen, so that the software GPU
    // (SwiftShader compiles a pipeline per program and state on its first use, 50-300 ms on a
    // loaded machine) compiles them now, while the data is still being fetched, and not in the
    // first frame of 50k points: there the compile and the rasterisation made one 300 ms task.
    // The canvas is not displayed until the first frame with data (draw), so that no frame
    // commits it meanwhile: a commit reads a WebGL canvas back and would wait for the compile.
    warmUp() {
        this.canvas.style.display = 'none';
        // Two points inside the view: SwiftShader compiles the pixel routines only when a
        // primitive produces fragments (a point outside the clip volume compiled nothing).
        const position = this.regl.buffer(new Float32Array([0, 0, 0, 0.5, 0.5, 0]));
        const colour = { buffer: this.regl.buffer({ data: new Uint8Array(8), type: 'uint8' }), normalized: true };
        const matrix = mat4.create();
        for (const depth of [true, false]) {
            this.drawLine({ position, colour, matrix, offset: 0, count: 2, depth });
            this.drawPoints({ position, colour, matrix, size: 4, offset: 0, count: 2, ring: 1, depth });
        }
        this.regl._gl.flush();
        position.destroy();
        colour.buffer.destroy();
    }

    // points: Float32Array (n * dim), dim 2 or 3, colours: Uint8Array (n * 4), line: join in order.
    setData({ points, dim, colours, line, axisTitles, size }) {
        this.dim = dim;
        this.n = points.length / dim;
        this.line = !!line;
        this.axisTitles = axisTitles || [];
        this.pointSize = size || (this.n > 20000 ? 2 : this.n > 2000 ? 3 : 5);
        this.raw = points;
        const b = bounds(points, dim, this.n);
        this.box = b;
        // Normalised xyz for the GPU: the CPU projection (pick, hover) reads the same array.
        const xyz = new Float32Array(this.n * 3);
        for (let i = 0; i < this.n; i++)
            for (let c = 0; c < 3; c++)
                xyz[i * 3 + c] = c < dim ? (points[i * dim + c] - b.centre[c]) * b.scale : 0;
        this.xyz = xyz;
        this.colours = colours;
        if (this.positionBuffer) { this.positionBuffer.destroy(); this.colourBuffer.destroy(); }
        this.positionBuffer = this.regl.buffer(xyz);
        this.colourBuffer = this.regl.buffer({ data: colours, type: 'uint8' });
        this.highlighted = this.highlighted.filter((i) => i < this.n);
        this.fresh = 'first'; // the next frames mark the first and the last chunk of these points
        this.redraw();
    }

    // New colours for the same points (a colouring by another column, a legend's filter).
    setColours(colours) {
        if (!this.colourBuffer || colours.length !== this.n * 4) return;
        this.colours = colours;
        this.colourBuffer.destroy();
        this.colourBuffer = this.regl.buffer({ data: colours, type: 'uint8' });
        this.redraw();
    }

    setCamera(camera) {
        Object.assign(this.camera, camera);
        this.redraw();
    }

    // Highlight points (indices into the data), e.g. the selected row and its neighbours.
    // The first is the selection (yellow), the others white; all ringed in black. They are drawn
    // on the 2-D overlay above the points (a few circles projected on the CPU), so a new
    // selection redraws the overlay at once instead of every point: at 200k points a full
    // progressive redraw is 13 frames of the software GPU, seconds on a loaded machine.
    highlight(indices) {
        this.highlighted = indices.filter((i) => i >= 0 && i < this.n);
        if (this.current && !this.invalid) this.drawOverlay();
        else this.redraw();
    }

    size() {
        const r = this.container.getBoundingClientRect();
        return { w: Math.max(1, Math.round(r.width)), h: Math.max(1, Math.round(r.height)), dpr: window.devicePixelRatio || 1 };
    }

    // The clip-space matrix for the current camera and canvas size.
    matrix(w, h) {
        const m = mat4.create();
        const aspect = w / h;
        if (this.dim === 3) {
            const c = this.camera, dist = 6 / c.zoom;
            const eye = [dist * Math.cos(c.pitch) * Math.cos(c.yaw), dist * Math.cos(c.pitch) * Math.sin(c.yaw), dist * Math.sin(c.pitch)];
            const proj = mat4.perspective(mat4.create(), Math.PI / 6, aspect, 0.05, 100);
            const view = mat4.lookAt(mat4.create(), eye, [0, 0, 0], [0, 0, 1]);
            return mat4.multiply(m, proj, view);
        }
        // 2-D: equal units on both axes (the data's proportions), a margin for the tick labels.
        const c = this.camera, s = 0.9 * c.zoom;
        const sx = aspect > 1 ? s / aspect : s, sy = aspect > 1 ? s : s * aspect;
        return mat4.fromValues(sx, 0, 0, 0, 0, sy, 0, 0, 0, 0, 1, 0, -c.px * sx, -c.py * sy, 0, 1);
    }

    // Draw again from the start at the next frame (the camera, data, size or highlights changed).
    redraw() {
        this.invalid = true;
        this.schedule();
    }

    schedule() {
        if (this.frame) return;
        this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
    }

    // One frame. A large point set is drawn progressively: CHUNK_POINTS more points (and their
    // stretch of the line) a frame onto the image of the frames before (the drawing buffer is
    // preserved, its depth too), the highlights with the last; while a drag rotates or pans it, a
    // level of detail (every k-th point, at most LOD_POINTS) stands for the whole. With software
    // WebGL every frame's compositor commit waits for the GPU to finish that frame: one frame of
    // 50k points and their line was 60 ms of SwiftShader at load 12 and up to 300 ms at load 17.
    draw() {
        if (this.destroyed) return;
        const started = performance.now();
        const { w, h, dpr } = this.size();
        for (const cv of [this.canvas, this.overlay]) {
            if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
                cv.width = Math.round(w * dpr);
                cv.height = Math.round(h * dpr);
                this.invalid = true; // a resized canvas is cleared
            }
        }
        const coarse = this.dragging && this.n > LOD_POINTS;
        if (this.invalid || coarse || !this.current) this.restart(w, h, dpr);
        if (this.n) {
            this.canvas.style.display = '';
            if (coarse) this.drawCoarse(dpr);
            else this.drawChunk(dpr);
            if (this.fresh === 'first') { performance.mark('embedscope:points:first'); this.fresh = 'all'; }
            if (this.fresh === 'all' && this.done === this.n) { performance.mark('embedscope:points:all'); this.fresh = null; }
        }
        this.regl._gl.flush();
        this.drawn = (this.drawn || 0) + 1;
        // The last draws' durations (ms), for the browser tests' figures.
        (this.drawMs = this.drawMs || []).push(Math.round(performance.now() - started));
        if (this.drawMs.length > 50) this.drawMs.shift();
    }

    // A new image: cleared, the camera's matrix, the axes; no point drawn yet.
    restart(w, h, dpr) {
        this.invalid = false;
        this.regl.poll();
        this.regl.clear({ color: [0, 0, 0, 0], depth: 1 });
        this.current = { matrix: this.matrix(w, h), w, h, dpr };
        this.projected = null;
        this.done = 0;
        this.drawOverlay();
    }

    // The next CHUNK_POINTS points (all of them in one go with everything = true, for a PNG).
    drawChunk(dpr, everything) {
        const { matrix } = this.current, depth = this.dim === 3, start = this.done;
        const end = everything ? this.n : Math.min(this.n, start + CHUNK_POINTS);
        const position = this.positionBuffer, colour = { buffer: this.colourBuffer, normalized: true };
        if (this.line && this.n > 1) { // from the last point drawn, so that the line has no gaps
            const from = Math.max(0, start - 1);
            if (end - from > 1) this.drawLine({ position, colour, matrix, offset: from, count: end - from, depth });
        }
        this.drawPoints({ position, colour, matrix, size: this.pointSize * dpr, offset: start, count: end - start, ring: 0, depth });
        this.done = end;
        if (end < this.n) this.schedule();
    }

    // Every k-th point (and a line through them), at most LOD_POINTS, for a frame of a drag.
    drawCoarse(dpr) {
        const { matrix } = this.current, depth = this.dim === 3;
        const k = Math.min(MAX_STRIDE, Math.ceil(this.n / LOD_POINTS)), count = Math.floor((this.n - 1) / k) + 1;
        const position = { buffer: this.positionBuffer, stride: 12 * k }, colour = { buffer: this.colourBuffer, stride: 4 * k, normalized: true };
        if (this.line) this.drawLine({ position, colour, matrix, offset: 0, count, depth });
        this.drawPoints({ position, colour, matrix, size: this.pointSize * dpr, offset: 0, count, ring: 0, depth });
        this.invalid = true; // the next frame after the drag draws every point again
    }

    // The highlighted points on the overlay (after its axes), the selection last so it is on top.
    drawHighlights() {
        if (!this.highlighted.length || !this.current || !this.xyz) return;
        const { w, h, dpr } = this.current;
        const ctx = this.overlay.getContext('2d');
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
        const outer = Math.max(9, this.pointSize * 3) / 2, inner = outer * Math.sqrt(0.45);
        for (let j = this.highlighted.length - 1; j >= 0; j--) {
            const i = this.highlighted[j];
            const s = this.toScreen(this.xyz.subarray(i * 3, i * 3 + 3), w, h);
            if (!(s.w > 0) || s.x < -outer || s.y < -outer || s.x > w + outer || s.y > h + outer) continue;
            ctx.fillStyle = '#000';
            ctx.beginPath();
            ctx.arc(s.x, s.y, outer, 0, 2 * Math.PI);
            ctx.fill();
            ctx.fillStyle = j === 0 ? '#fde725' : '#fff';
            ctx.beginPath();
            ctx.arc(s.x, s.y, inner, 0, 2 * Math.PI);
            ctx.fill();
        }
    }

    // The overlay again (axes and highlights) over the points already drawn.
    drawOverlay() {
        const { w, h, dpr } = this.current;
        this.drawAxes(w, h, dpr);
        this.drawHighlights();
    }

    // Screen position (CSS px within the container) of a normalised point.
    toScreen(p, w, h, m) {
        const v = vec4.transformMat4(vec4.create(), [p[0], p[1], p[2], 1], m || this.current.matrix);
        return { x: (v[0] / v[3] + 1) / 2 * w, y: (1 - v[1] / v[3]) / 2 * h, w: v[3] };
    }

    drawAxes(w, h, dpr) {
        const ctx = this.overlay.getContext('2d');
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
        ctx.clearRect(0, 0, w, h);
        const style = getComputedStyle(this.container);
        const fg = style.getPropertyValue('--fg').trim() || '#1d1d1f';
        const muted = style.getPropertyValue('--muted').trim() || '#5f6368';
        ctx.font = '11px system-ui, sans-serif';
        ctx.fillStyle = muted;
        ctx.strokeStyle = muted;
        ctx.lineWidth = 1;
        const b = this.box;
        if (!b) return;
        const norm = (c, v) => (v - b.centre[c]) * b.scale;
        if (this.dim === 2) {
            // Ticks along the bottom and left edges at the data values under them.
            const m = this.current.matrix;
            const inv = (sx, sy) => { // screen -> data for 2-D
                const nx = sx / w * 2 - 1, ny = 1 - sy / h * 2;
                return [(nx - m[12]) / m[0] / b.scale + b.centre[0], (ny - m[13]) / m[5] / b.scale + b.centre[1]];
            };
            const [x0, y1] = inv(0, 0), [x1, y0] = inv(w, h);
            ctx.textAlign = 'center';
            ctx.textBaseline = 'bottom';
            for (const v of ticks(x0, x1, Math.max(2, Math.floor(w / 90)))) {
                const s = this.toScreen([norm(0, v), 0, 0], w, h);
                ctx.fillRect(s.x, h - 22, 1, 5);
                ctx.fillText(tickLabel(v), s.x, h - 24);
            }
            // The y labels right-aligned in a left margin as wide as the widest, each tick mark
            // after its label (a mark before it read as a dash: "–-0.5").
            const yTicks = ticks(y0, y1, Math.max(2, Math.floor(h / 60)));
            const margin = 4 + Math.max(0, ...yTicks.map((v) => ctx.measureText(tickLabel(v)).width));
            ctx.textAlign = 'right';
            ctx.textBaseline = 'middle';
            for (const v of yTicks) {
                const s = this.toScreen([0, norm(1, v), 0], w, h);
                ctx.fillRect(margin + 2, s.y, 5, 1);
                ctx.fillText(tickLabel(v), margin, s.y);
            }
            ctx.fillStyle = fg;
            ctx.textAlign = 'center';
            ctx.textBaseline = 'bottom';
            ctx.fillText(this.axisTitles[0] || '', w / 2, h - 4);
            ctx.save();
            ctx.translate(h > 0 ? w - 6 : 0, h / 2);
            ctx.rotate(-Math.PI / 2);
            ctx.textBaseline = 'bottom';
            ctx.fillText(this.axisTitles[1] || '', 0, 0);
            ctx.restore();
            return;
        }
        // 3-D: the three edges of the bounding box from its low corner, titled at their ends; a
        // tick label that would print over a title (or over the corner's other labels) is left out.
        const lo = [0, 1, 2].map((c) => norm(c, b.lo[c])), hi = [0, 1, 2].map((c) => norm(c, b.hi[c]));
        const o = this.toScreen(lo, w, h);
        const ends = [0, 1, 2].map((c) => { const end = lo.slice(); end[c] = hi[c]; return this.toScreen(end, w, h); });
        const titles = ends.map((e, c) => { // kept inside the view; boxes of 11 px text, baseline at y
            const text = this.axisTitles[c] || '', tw = ctx.measureText(text).width;
            return { text, x: Math.max(2, Math.min(e.x + 6, w - tw - 2)), y: Math.max(12, Math.min(e.y - 4, h - 2)), w: tw };
        });
        const overlaps = (x, y, tw) => titles.some((t) => x < t.x + t.w + 2 && x + tw > t.x - 2 && y > t.y - 13 && y - 11 < t.y + 2);
        for (let c = 0; c < 3; c++) {
            ctx.beginPath();
            ctx.moveTo(o.x, o.y);
            ctx.lineTo(ends[c].x, ends[c].y);
            ctx.stroke();
            for (const v of ticks(b.lo[c], b.hi[c], 4)) {
                const p = lo.slice();
                p[c] = norm(c, v);
                const s = this.toScreen(p, w, h), text = tickLabel(v);
                if (Math.hypot(s.x - o.x, s.y - o.y) < 16 || overlaps(s.x + 4, s.y + 10, ctx.measureText(text).width)) continue;
                ctx.fillRect(s.x - 1, s.y - 1, 3, 3);
                ctx.fillText(text, s.x + 4, s.y + 10);
            }
        }
        ctx.fillStyle = fg;
        for (const t of titles) ctx.fillText(t.text, t.x, t.y);
    }

    // Screen coordinates (CSS px in the container) of every point, for the current camera.
    project() {
        if (this.projected) return this.projected;
        const { matrix: m, w, h } = this.current;
        const out = new Float32Array(this.n * 3);
        const xyz = this.xyz;
        for (let i = 0; i < this.n; i++) {
            const x = xyz[i * 3], y = xyz[i * 3 + 1], z = xyz[i * 3 + 2];
            const cw = m[3] * x + m[7] * y + m[11] * z + m[15];
            out[i * 3] = ((m[0] * x + m[4] * y + m[8] * z + m[12]) / cw + 1) / 2 * w;
            out[i * 3 + 1] = (1 - (m[1] * x + m[5] * y + m[9] * z + m[13]) / cw) / 2 * h;
            out[i * 3 + 2] = cw; // depth: the nearer point wins a tie
        }
        this.projected = out;
        return out;
    }

    // The index of the point under (x, y) (CSS px in the container), or -1.
    nearest(x, y) {
        if (!this.n || !this.current) return -1;
        const p = this.project();
        let best = -1, bestD = HOVER_PX * HOVER_PX, bestW = Infinity;
        for (let i = 0; i < this.n; i++) {
            const dx = p[i * 3] - x, dy = p[i * 3 + 1] - y, d = dx * dx + dy * dy;
            if (d < bestD - 1e-6 || (d <= bestD + 1e-6 && p[i * 3 + 2] < bestW && best >= 0)) { best = i; bestD = d; bestW = p[i * 3 + 2]; }
        }
        return best;
    }

    // Client coordinates of point i (for tests and keyboard users).
    clientPosition(i) {
        const p = this.project(), r = this.canvas.getBoundingClientRect();
        return { x: r.left + p[i * 3], y: r.top + p[i * 3 + 1] };
    }

    listen() {
        const cv = this.overlay;
        cv.addEventListener('keydown', (ev) => {
            const steps = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
            if (steps[ev.key]) this.nudge(...steps[ev.key]);
            else if (ev.key === '+' || ev.key === '=') this.zoomBy(1.25);
            else if (ev.key === '-' || ev.key === '−') this.zoomBy(0.8);
            else return;
            ev.preventDefault();
        });
        let press = null;
        const local = (ev) => { const r = cv.getBoundingClientRect(); return { x: ev.clientX - r.left, y: ev.clientY - r.top }; };
        cv.addEventListener('pointerdown', (ev) => {
            press = { x: ev.clientX, y: ev.clientY, camera: Object.assign({}, this.camera), dragged: false };
            cv.setPointerCapture(ev.pointerId);
            this.tip.hidden = true;
        });
        cv.addEventListener('pointermove', (ev) => {
            if (press) {
                const dx = ev.clientX - press.x, dy = ev.clientY - press.y;
                if (!press.dragged && Math.hypot(dx, dy) < DRAG_PX) return;
                press.dragged = true;
                this.dragging = true;
                const { w, h } = this.size();
                if (this.dim === 3) {
                    this.camera.yaw = press.camera.yaw - dx / w * Math.PI * 1.5;
                    this.camera.pitch = Math.max(-1.5, Math.min(1.5, press.camera.pitch + dy / h * Math.PI));
                } else {
                    const s = 0.9 * this.camera.zoom * Math.min(w, h) / 2;
                    this.camera.px = press.camera.px - dx / s;
                    this.camera.py = press.camera.py + dy / s;
                }
                this.redraw();
                return;
            }
            this.hoverAt(local(ev));
        });
        const end = (ev) => {
            if (!press) return;
            const dragged = press.dragged;
            press = null;
            if (this.dragging) { this.dragging = false; this.redraw(); } // every point again
            if (dragged) { if (this.opts.onCamera) this.opts.onCamera(this.cameraState()); return; }
            if (ev.type === 'pointercancel') return;
            const p = local(ev), i = this.nearest(p.x, p.y);
            if (i >= 0 && this.opts.onPick) this.opts.onPick(i);
        };
        cv.addEventListener('pointerup', end);
        cv.addEventListener('pointercancel', end);
        cv.addEventListener('pointerleave', () => { this.tip.hidden = true; });
        cv.addEventListener('wheel', (ev) => {
            if (!ev.ctrlKey && !ev.metaKey && !ev.altKey) return; // plain wheel scrolls the page
            ev.preventDefault();
            this.zoomBy(Math.exp(-ev.deltaY / 500));
        }, { passive: false });
    }

    zoomBy(f) {
        this.camera.zoom = Math.max(0.1, Math.min(100, this.camera.zoom * f));
        this.redraw();
        if (this.opts.onCamera) this.opts.onCamera(this.cameraState());
    }

    // Rotate (3-D) or pan (2-D) by a step, for the keyboard.
    nudge(dx, dy) {
        if (this.dim === 3) {
            this.camera.yaw += dx * 0.15;
            this.camera.pitch = Math.max(-1.5, Math.min(1.5, this.camera.pitch + dy * 0.15));
        } else {
            this.camera.px += dx * 0.1 / this.camera.zoom;
            this.camera.py -= dy * 0.1 / this.camera.zoom;
        }
        this.redraw();
        if (this.opts.onCamera) this.opts.onCamera(this.cameraState());
    }

    cameraState() {
        const c = this.camera;
        return [c.yaw, c.pitch, c.zoom, c.px, c.py].map((v) => +v.toFixed(3)).join(',');
    }

    static parseCamera(text) {
        const v = String(text || '').split(',').map(Number);
        if (v.length !== 5 || v.some((x) => !Number.isFinite(x))) return null;
        return { yaw: v[0], pitch: v[1], zoom: v[2] > 0 ? v[2] : 1, px: v[3], py: v[4] };
    }

    hoverAt(p) {
        if (this.hoverFrame) { this.hoverNext = p; return; }
        this.hoverNext = p;
        this.hoverFrame = requestAnimationFrame(() => {
            this.hoverFrame = 0;
            const q = this.hoverNext, i = this.nearest(q.x, q.y);
            if (i < 0 || !this.opts.hoverText) { this.tip.hidden = true; this.overlay.style.cursor = ''; return; }
            this.overlay.style.cursor = 'pointer';
            this.tip.textContent = this.opts.hoverText(i);
            this.tip.hidden = false;
            const { w } = this.size();
            this.tip.style.left = Math.min(q.x + 12, w - this.tip.offsetWidth - 2) + 'px';
            this.tip.style.top = (q.y + 12) + 'px';
        });
    }

    // The picture (points and axes) on a canvas of its own, on the given background.
    toCanvas(background) {
        const { w, h, dpr } = this.size();
        this.restart(w, h, dpr); // every point, in this task
        if (this.n) this.drawChunk(dpr, true);
        const out = document.createElement('canvas');
        out.width = this.canvas.width;
        out.height = this.canvas.height;
        const ctx = out.getContext('2d');
        ctx.fillStyle = background || '#fff';
        ctx.fillRect(0, 0, out.width, out.height);
        ctx.drawImage(this.canvas, 0, 0);
        ctx.drawImage(this.overlay, 0, 0);
        return out;
    }

    // The picture as a PNG data URL.
    toPNG(background) {
        return this.toCanvas(background).toDataURL('image/png');
    }

    destroy() {
        this.destroyed = true;
        this.resizeObserver.disconnect();
        if (this.frame) cancelAnimationFrame(this.frame);
        this.regl.destroy();
        const lose = this.regl._gl.getExtension('WEBGL_lose_context');
        if (lose) lose.loseContext();
        this.container.textContent = '';
        this.container.classList.remove('points');
    }
}

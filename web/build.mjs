// Build the dashboard's assets: `node web/build.mjs OUTDIR` (run by the Makefile).
//
// 1. esbuild bundles a partial plotly.js build (core + heatmap + bar for the 2-D panels of the tabs
//    after the first, loaded after the page's first paint; scatter is in core) and the dashboard's
//    own script with its point view (regl, gl-matrix) and its 2-D charts (uPlot), minified; the
//    style sheet is uPlot's followed by the dashboard's.
// 2. Offline by construction: every absolute http(s) URL left in a script is stripped of its
//    scheme, except the XML namespace names the DOM APIs need (they are identifiers, never fetched).
//    The URLs are links in plotly's messages and licence comments and defaults of features not
//    bundled (geo's topojson CDN, chart studio); nothing can load from outside.
// 3. Hashed names (name.<16 hex of sha256>.ext) for every asset but index.html, which refers to
//    them by relative URLs, so the daemon can serve them with a one-year immutable cache.
// 4. Each asset is gzipped (level 9) once here; OUTDIR/assets.S compiles the raw and gzipped
//    bytes into the daemon with a table src/api/assets.c reads (es_web_assets).
// Fails (exit 1, message on stderr) if esbuild fails or a file cannot be written.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
    console.error('usage: node web/build.mjs OUTDIR');
    process.exit(2);
}
const dist = join(out, 'dist');
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

// XML namespace names: identifiers compared as strings by the DOM, never requested.
export const NAMESPACES = [
    'http://www.w3.org/2000/svg', 'http://www.w3.org/1999/xlink', 'http://www.w3.org/1999/xhtml',
    'http://www.w3.org/2000/xmlns/', 'http://www.w3.org/XML/1998/namespace',
];

function stripAbsoluteUrls(text) {
    return text.replace(/https?:\/\/[^\s"'`)<>\\]*/g, (url) => (NAMESPACES.includes(url) ? url : url.replace(/^https?:\/\//, '')));
}

async function bundle(entry) {
    const res = await build({
        entryPoints: [join(here, 'src', entry)],
        bundle: true,
        minify: true,
        format: 'iife',
        target: 'es2019',
        legalComments: 'external',
        define: { global: 'window' }, // plotly's bundled node modules expect node's `global`
        write: false,
        outdir: dist,
        logLevel: 'warning',
    });
    const js = res.outputFiles.find((f) => f.path.endsWith('.js'));
    const legal = res.outputFiles.find((f) => f.path.endsWith('.LEGAL.txt'));
    return { js: stripAbsoluteUrls(js.text), legal: legal ? legal.text : '' };
}

const hash = (bytes) => createHash('sha256').update(bytes).digest('hex').slice(0, 16);
const assets = []; // {name, type, bytes}

function add(base, ext, type, text) {
    const bytes = Buffer.from(text);
    const name = base ? `${base}.${hash(bytes)}.${ext}` : ext;
    assets.push({ name, type, bytes });
    return name;
}

const plotly = await bundle('plotly-entry.js');
const app = await bundle('app.js');
const names = {
    PLOTLY_JS: add('plotly', 'js', 'text/javascript; charset=utf-8', plotly.js),
    APP_JS: add('app', 'js', 'text/javascript; charset=utf-8', app.js),
    STYLE_CSS: add('style', 'css', 'text/css; charset=utf-8',
        readFileSync(join(here, 'node_modules', 'uplot', 'dist', 'uPlot.min.css'), 'utf8') + '\n' + readFileSync(join(here, 'src', 'style.css'), 'utf8')),
    LICENSES_TXT: add('licenses', 'txt', 'text/plain; charset=utf-8',
        ['plotly.js', 'regl', 'gl-matrix', 'uplot'].map((pkg) => pkg + '\n' + readFileSync(join(here, 'node_modules', pkg, pkg === 'gl-matrix' ? 'LICENSE.md' : 'LICENSE'), 'utf8')).join('\n') +
        '\n' + plotly.legal + app.legal),
};
let html = readFileSync(join(here, 'src', 'index.html'), 'utf8');
html = html.replace(/\{\{(\w+)\}\}/g, (m, key) => {
    if (!names[key]) throw new Error(`index.html: unknown placeholder ${m}`);
    return 'assets/' + names[key];
});
add('', 'index.html', 'text/html; charset=utf-8', html);

// The API reference served at /docs: Swagger UI's prebuilt bundle, as the package ships it
// (it loads nothing from outside: no fonts, and the page turns its validator badge off).
const swagger = (file) => readFileSync(join(here, 'node_modules', 'swagger-ui-dist', file), 'utf8');
const docNames = {
    SWAGGER_JS: add('swagger-ui', 'js', 'text/javascript; charset=utf-8', swagger('swagger-ui-bundle.js')),
    SWAGGER_CSS: add('swagger-ui', 'css', 'text/css; charset=utf-8', swagger('swagger-ui.css')),
    DOCS_CSS: add('docs', 'css', 'text/css; charset=utf-8', readFileSync(join(here, 'src', 'docs.css'), 'utf8')),
    DOCS_JS: add('docs', 'js', 'text/javascript; charset=utf-8', readFileSync(join(here, 'src', 'docs.js'), 'utf8')),
    SWAGGER_LICENSE: add('swagger-ui-licence', 'txt', 'text/plain; charset=utf-8',
        swagger('LICENSE') + '\n' + swagger('NOTICE') + '\n' + swagger('swagger-ui-bundle.js.LICENSE.txt')),
};
const docs = readFileSync(join(here, 'src', 'docs.html'), 'utf8').replace(/\{\{(\w+)\}\}/g, (m, key) => {
    if (!docNames[key]) throw new Error(`docs.html: unknown placeholder ${m}`);
    return 'assets/' + docNames[key];
});
add('', 'docs.html', 'text/html; charset=utf-8', docs);

// The assembly table: for each asset its name, raw bytes, gzip bytes and content type, in the
// layout of es_web_asset (six 8-byte fields), ended by a zero entry.
const lines = ['/* Generated by web/build.mjs: the dashboard assets (do not edit). */', '    .section .rodata'];
const table = ['    .section .data.rel.ro', '    .balign 8', '    .global es_web_assets', 'es_web_assets:'];
assets.forEach((a, i) => {
    const raw = join(dist, a.name);
    writeFileSync(raw, a.bytes);
    writeFileSync(raw + '.gz', gzipSync(a.bytes, { level: 9 }));
    const rel = relative(process.cwd(), raw);
    lines.push(`es_web_name${i}: .asciz "${a.name}"`, `es_web_type${i}: .asciz "${a.type}"`,
        `es_web_raw${i}: .incbin "${rel}"`, `es_web_raw${i}_end: .byte 0`,
        `es_web_gz${i}: .incbin "${rel}.gz"`, `es_web_gz${i}_end:`);
    table.push(`    .quad es_web_name${i}, es_web_type${i}, es_web_raw${i}, es_web_raw${i}_end - es_web_raw${i}, ` +
        `es_web_gz${i}, es_web_gz${i}_end - es_web_gz${i}`);
});
table.push('    .quad 0, 0, 0, 0, 0, 0');
writeFileSync(join(out, 'assets.S'), [...lines, ...table, '    .section .note.GNU-stack,"",@progbits', ''].join('\n'));
for (const a of assets)
    console.log(`web: ${a.name} ${a.bytes.length} B, gzip ${gzipSync(a.bytes, { level: 9 }).length} B`);

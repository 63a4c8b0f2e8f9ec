// Validate deploy/k8s: render each variant (the default, deploy/k8s, and
// overlays/replicated), check every object against the Kubernetes API schemas
// (kubernetes-models: validators generated from the Kubernetes OpenAPI
// document, run with ajv), then what the schemas cannot say: the default binds
// on ReadWriteOnce storage (one replica, Recreate), the replicated overlay
// declares ReadWriteMany, a PodDisruptionBudget and topology spread, the
// configuration from a hashed configMapGenerator, the versioned image, requests
// and limits that hold the configured budgets, the nginx front with its config
// in step with deploy/nginx.conf, and the Dockerfile's labels and group-0
// directories (arbitrary UIDs).
//
//   node tests/deploy/validate-k8s.mjs                        the checks; "k8s-schema: N passed, N failed"
//   node tests/deploy/validate-k8s.mjs --render VARIANT       print a variant rendered (YAML; for k8s.sh)
//   node tests/deploy/validate-k8s.mjs --write-proxy-config   rewrite deploy/k8s/base/proxy/embedscope.conf
//
// Rendering: `kubectl kustomize` when kubectl is installed (kustomize built in);
// otherwise this file's own renderer for the features deploy/k8s uses
// (resources, configMapGenerator with a content hash in the name, strategic-merge
// patches of maps, labels, images). With kubectl both run and must agree.
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, "..", "..");
const k8s = path.join(root, "deploy", "k8s");
const VARIANTS = { default: k8s, replicated: path.join(k8s, "overlays", "replicated") };
const PROXY_CONFIG = path.join(k8s, "base", "proxy", "embedscope.conf");
const MiB = 2 ** 20;
let passed = 0, failed = 0;
const ok = (msg) => { passed++; console.log(`ok: ${msg}`); };
const fail = (msg) => { failed++; console.log(`FAIL: ${msg}`); };
const check = (cond, msg, why = "") => (cond ? ok(msg) : fail(why ? `${msg}: ${why}` : msg));
const read = (p) => fs.readFileSync(p, "utf8");
const docsOf = (file) => YAML.parseAllDocuments(read(file)).map((d) => d.toJS()).filter(Boolean);

// ------------------------------------------------------------------ rendering

// deploy/nginx.conf for the cluster: the upstream is the daemon's Service, the access log stdout.
function proxyConfig() {
    const text = read(path.join(root, "deploy", "nginx.conf"))
        .replace(/^(upstream embedscope \{[^}]*?\n\s*server )[^ ;]+/m, "$1embedscope:80")
        .replace(/^(\s*access_log )[^ ;]+/m, "$1/dev/stdout");
    return "# Generated from deploy/nginx.conf (node tests/deploy/validate-k8s.mjs --write-proxy-config):\n" +
        "# edit that file. Here the upstream is the embedscope Service and the access log goes to stdout.\n" + text;
}

// Strategic merge as deploy/k8s uses it: maps merged key by key, anything else replaced.
function merge(target, patch) {
    for (const [k, v] of Object.entries(patch)) {
        if (v && typeof v === "object" && !Array.isArray(v) && target[k] && typeof target[k] === "object")
            merge(target[k], v);
        else target[k] = v;
    }
}

function* podSpecs(objs) {
    for (const o of objs) if (o.spec && o.spec.template && o.spec.template.spec) yield o.spec.template.spec;
}

// This file's renderer (see the top).
function buildOwn(dir) {
    const kust = YAML.parse(read(path.join(dir, "kustomization.yaml")));
    const objs = [];
    for (const r of kust.resources || []) {
        const p = path.join(dir, r);
        objs.push(...(fs.statSync(p).isDirectory() ? buildOwn(p) : docsOf(p)));
    }
    const renamed = {};
    for (const g of kust.configMapGenerator || []) {
        const data = {};
        for (const f of g.files) {
            const [key, file] = f.includes("=") ? f.split("=") : [path.basename(f), f];
            data[key] = read(path.join(dir, file));
        }
        const hash = crypto.createHash("sha256").update(JSON.stringify(data)).digest("hex").slice(0, 10);
        renamed[g.name] = `${g.name}-${hash}`;
        objs.push({ apiVersion: "v1", kind: "ConfigMap",
                    metadata: { name: renamed[g.name], labels: { ...((g.options || {}).labels || {}) } }, data });
    }
    for (const spec of podSpecs(objs))
        for (const v of spec.volumes || []) if (v.configMap && renamed[v.configMap.name]) v.configMap.name = renamed[v.configMap.name];
    for (const p of kust.patches || [])
        for (const patch of docsOf(path.join(dir, p.path))) {
            const target = objs.find((o) => o.kind === patch.kind && o.metadata.name === patch.metadata.name);
            if (!target) throw new Error(`${p.path}: no ${patch.kind} ${patch.metadata.name} to patch`);
            merge(target, patch);
        }
    for (const l of kust.labels || [])
        for (const o of objs) o.metadata.labels = { ...(o.metadata.labels || {}), ...l.pairs };
    for (const img of kust.images || [])
        for (const spec of podSpecs(objs))
            for (const c of spec.containers || [])
                if (c.image === img.name || c.image.startsWith(img.name + ":"))
                    c.image = `${img.newName || img.name}:${img.newTag}`;
    return objs;
}

function kubectl() {
    try {
        execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" });
        return true;
    } catch {
        return false;
    }
}

function buildKubectl(dir) {
    return YAML.parseAllDocuments(execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" }))
        .map((d) => d.toJS()).filter(Boolean);
}

// Objects by kind/name, generated names without their hash, for comparing two renderings.
function comparable(objs) {
    const text = JSON.stringify(objs).replace(/"(embedscope(-proxy)?-config)-[a-z0-9]{10}"/g, '"$1"');
    return Object.fromEntries(JSON.parse(text).map((o) => [`${o.kind}/${o.metadata.name}`, o]));
}

function sameJSON(a, b) {
    const canon = (x) => JSON.stringify(x, (k, v) => (v && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.entries(v).sort(([p], [q]) => (p < q ? -1 : 1))) : v));
    return canon(a) === canon(b);
}

function render(variant) {
    return kubectl() ? buildKubectl(VARIANTS[variant]) : buildOwn(VARIANTS[variant]);
}

// ------------------------------------------------------------------ checks

// "kubernetes-models/apps/v1/Deployment", "kubernetes-models/v1/ConfigMap".
async function modelOf(apiVersion, kind) {
    if (!/^([a-z0-9.]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Za-z]+$/.test(kind)) return null;
    try {
        return (await import(`kubernetes-models/${apiVersion}/${kind}`))[kind];
    } catch {
        return null;
    }
}

function quantity(q) {
    const m = /^([0-9.]+)(Ki|Mi|Gi|m)?$/.exec(String(q));
    if (!m) return NaN;
    const unit = { Ki: 1024, Mi: MiB, Gi: 1024 * MiB, m: 1e-3 }[m[2]] || 1;
    return Number(m[1]) * unit;
}

const find = (objs, kind, name) => objs.find((o) => o.kind === kind && o.metadata.name === name);

// Memory the daemon's configuration may hold: the decomposition cache, the response cache
// (an eighth of it), the user matrices, and a floor for the process, its matrices and work space.
const RESULTS_DIVISOR = 8;
const PROCESS_FLOOR = 256 * MiB;
function budgetBytes(config) {
    const cache = ((config.server || {}).cache_mb || 512) * MiB;
    const uploads = (config.uploads || {}).max_total_bytes || 4096 * MiB;
    return cache + cache / RESULTS_DIVISOR + uploads + PROCESS_FLOOR;
}

function checkDaemon(variant, objs) {
    const dep = find(objs, "Deployment", "embedscope");
    if (!dep) return fail(`${variant}: no Deployment embedscope`);
    const spec = dep.spec.template.spec, c = spec.containers[0];
    const claims = objs.filter((o) => o.kind === "PersistentVolumeClaim");
    const modes = claims.map((o) => `${o.metadata.name}: ${o.spec.accessModes.join(",")}`).join("; ");
    if (variant === "default") {
        check(claims.length === 2 && claims.every((o) => o.spec.accessModes.length === 1 &&
              o.spec.accessModes[0] === "ReadWriteOnce"), `default: every claim ReadWriteOnce only (${modes})`);
        check(dep.spec.replicas === 1 && dep.spec.strategy.type === "Recreate",
              "default: one replica, strategy Recreate (an RWO volume never wanted by two pods)",
              `replicas ${dep.spec.replicas}, strategy ${dep.spec.strategy.type}`);
    } else {
        check(claims.length === 2 && claims.every((o) => o.spec.accessModes.includes("ReadWriteMany")),
              `replicated: every claim ReadWriteMany (${modes})`);
        check(dep.spec.replicas >= 2 && dep.spec.strategy.type === "RollingUpdate",
              `replicated: ${dep.spec.replicas} replicas, rolling updates`);
        check(/ReadWriteMany/.test(read(path.join(VARIANTS.replicated, "kustomization.yaml"))),
              "replicated: its kustomization states the ReadWriteMany requirement");
    }
    const labels = dep.spec.template.metadata.labels;
    const pdb = objs.find((o) => o.kind === "PodDisruptionBudget" &&
        Object.entries(o.spec.selector.matchLabels).every(([k, v]) => labels[k] === v));
    check(pdb && pdb.spec.maxUnavailable === 1, `${variant}: a PodDisruptionBudget (maxUnavailable 1) selects the daemon's pods`);
    const spread = spec.topologySpreadConstraints || [];
    check(spread.some((t) => t.topologyKey === "kubernetes.io/hostname") &&
          spread.some((t) => t.topologyKey === "topology.kubernetes.io/zone"),
          `${variant}: topology spread over nodes and zones`);
    const cfg = spec.volumes.find((v) => v.configMap);
    const cm = cfg && find(objs, "ConfigMap", cfg.configMap.name);
    check(cm && /^embedscope-config-[a-z0-9]{10}$/.test(cm.metadata.name) && cm.data["embedscope.json"],
          `${variant}: the configuration is a generated ConfigMap with a content hash in its name (${cfg && cfg.configMap.name})`);
    const version = /#define ES_VERSION "([^"]+)"/.exec(read(path.join(root, "include", "embedscope", "version.h")))[1];
    check(c.image === `localhost/embedscope:${version}`, `${variant}: the daemon's image is tagged with its version ${version}`,
          c.image);
    if (cm) {
        const config = JSON.parse(cm.data["embedscope.json"]);
        const need = budgetBytes(config), req = quantity(c.resources.requests.memory);
        const lim = quantity(c.resources.limits.memory);
        check(req >= need && lim >= req,
              `${variant}: memory request ${c.resources.requests.memory} holds the configured budgets ` +
              `(${Math.ceil(need / MiB)} MiB: caches, uploads, process), limit ${c.resources.limits.memory} above it`);
        check(quantity(c.resources.requests.cpu) >= 1 && quantity(c.resources.limits.cpu) >= quantity(c.resources.requests.cpu),
              `${variant}: CPU request ${c.resources.requests.cpu}, limit ${c.resources.limits.cpu}`);
        const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.mountPath, m]));
        check(mounts[config.server.cache_dir] && !mounts[config.server.cache_dir].readOnly,
              `${variant}: server.cache_dir (${config.server.cache_dir}) is a writable volume`);
    }
    for (const [probe, want] of [["startupProbe", "/healthz"], ["livenessProbe", "/healthz"], ["readinessProbe", "/readyz"]]) {
        const cmd = ((c[probe] || {}).exec || {}).command || [];
        check(cmd[0] === "embedscope" && cmd[1] === "--probe" && cmd[2] === want && !c[probe].httpGet,
              `${variant}: ${probe} is the daemon's own probe of ${want} (exec embedscope --probe: no curl in the image)`,
              JSON.stringify(c[probe]));
    }
    const sc = { ...spec.securityContext, ...c.securityContext };
    check(sc.runAsNonRoot === true && sc.readOnlyRootFilesystem === true && sc.allowPrivilegeEscalation === false &&
          (sc.capabilities.drop || []).includes("ALL"), `${variant}: non-root, read-only root, no capabilities`);
}

function checkProxy(variant, objs) {
    const dep = find(objs, "Deployment", "embedscope-proxy");
    if (!dep) return fail(`${variant}: no Deployment embedscope-proxy (the nginx front)`);
    const spec = dep.spec.template.spec, c = spec.containers[0];
    check(/:[0-9]+\.[0-9]+\.[0-9]+/.test(c.image) && !/:latest$/.test(c.image), `${variant}: nginx image with a versioned tag (${c.image})`);
    const vol = (name) => spec.volumes.find((v) => v.name === name);
    const mount = (p) => c.volumeMounts.find((m) => m.mountPath === p);
    const conf = mount("/etc/nginx/conf.d"), cmName = conf && vol(conf.name).configMap.name;
    const cm = cmName && find(objs, "ConfigMap", cmName);
    check(cm && /^embedscope-proxy-config-[a-z0-9]{10}$/.test(cmName) && cm.data["embedscope.conf"] === proxyConfig(),
          `${variant}: nginx's ConfigMap (generated, hashed) is deploy/nginx.conf for the cluster`,
          "out of step: run node tests/deploy/validate-k8s.mjs --write-proxy-config");
    const cache = /^proxy_cache_path (\S+)/m.exec(proxyConfig())[1];
    const cacheMount = c.volumeMounts.find((m) => cache.startsWith(m.mountPath + "/"));
    check(cacheMount && vol(cacheMount.name).emptyDir, `${variant}: nginx's cache (${cache}) on its own volume`);
    const port = Number(/^\s*listen (\d+);/m.exec(proxyConfig())[1]);
    check(c.ports.some((p) => p.containerPort === port), `${variant}: nginx's container port is the config's listen ${port}`);
    const svc = find(objs, "Service", "embedscope"), upstream = /server embedscope:(\d+)/.exec(proxyConfig());
    check(svc && upstream && svc.spec.ports.some((p) => p.port === Number(upstream[1])),
          `${variant}: nginx's upstream is the daemon's Service (embedscope:${upstream && upstream[1]})`);
    check(find(objs, "Service", "embedscope-proxy"), `${variant}: a Service in front of nginx`);
    const labels = dep.spec.template.metadata.labels;
    const pdb = objs.find((o) => o.kind === "PodDisruptionBudget" &&
        Object.entries(o.spec.selector.matchLabels).every(([k, v]) => labels[k] === v));
    check(pdb && pdb.spec.minAvailable >= 1 && pdb.spec.minAvailable < dep.spec.replicas,
          `${variant}: a PodDisruptionBudget keeps ${pdb && pdb.spec.minAvailable} of the ${dep.spec.replicas} proxies up ` +
          "(and still lets a drain evict one)");
}

function checkDockerfile() {
    const text = read(path.join(root, "Dockerfile"));
    const final = text.slice(text.lastIndexOf("\nFROM "));
    for (const label of ["title", "description", "licenses", "version", "revision"])
        check(final.includes(`org.opencontainers.image.${label}=`), `Dockerfile: label org.opencontainers.image.${label}`);
    check(/chown 10001:0 \/var\/lib\/embedscope \/var\/cache\/embedscope/.test(final) &&
          /chmod 0?775 \/var\/lib\/embedscope \/var\/cache\/embedscope/.test(final),
          "Dockerfile: the writable directories belong to group 0, group-writable (arbitrary UIDs in group 0)");
    check(/^USER [1-9][0-9]*:[0-9]+$/m.test(final), "Dockerfile: a numeric non-root USER");
    // slim (issue 32): no curl, the health check is the daemon's own probe, apt's caches removed in the
    // layer that made them, the base named by a build argument that scripts/container.sh pins by digest
    check(!/\bcurl\b/.test(final.replace(/^#.*$/gm, "")), "Dockerfile: no curl in the image");
    check(/^HEALTHCHECK [^]*?CMD embedscope --probe \/healthz/m.test(final), "Dockerfile: HEALTHCHECK is embedscope --probe /healthz");
    const installs = final.split(/\n(?=[A-Z]+ )/).filter((i) => /^RUN /.test(i) && /apt-get install/.test(i));
    check(installs.length > 0 && installs.every((i) => ["apt-get clean", "/var/lib/apt/lists/*", "/var/cache/apt/*.bin",
          "/var/cache/apt/archives/*.deb"].every((w) => i.includes(w))),
          "Dockerfile: every apt-get install of the image removes apt's lists, caches and .deb files in the same layer");
    check(/^FROM \$\{BASE_IMAGE\}/m.test(final) &&
          /--build-arg BASE_IMAGE=\S+@\$digest/.test(read(path.join(root, "scripts", "container.sh"))),
          "Dockerfile: the base is the build argument BASE_IMAGE, which scripts/container.sh pins by digest");
}

async function main() {
    const args = process.argv.slice(2);
    if (args[0] === "--write-proxy-config") {
        fs.writeFileSync(PROXY_CONFIG, proxyConfig());
        return;
    }
    if (args[0] === "--render") {
        if (!VARIANTS[args[1]]) throw new Error(`--render ${Object.keys(VARIANTS).join("|")}`);
        process.stdout.write(render(args[1]).map((o) => YAML.stringify(o)).join("---\n"));
        return;
    }
    const withKubectl = kubectl();
    console.log(`rendering with ${withKubectl ? "kubectl kustomize" : "this file's renderer (no kubectl)"}`);
    for (const variant of Object.keys(VARIANTS)) {
        let objs;
        try {
            objs = render(variant);
        } catch (e) {
            fail(`${variant}: cannot render: ${e.message}`);
            continue;
        }
        if (withKubectl)
            check(sameJSON(comparable(objs), comparable(buildOwn(VARIANTS[variant]))),
                  `${variant}: this file's renderer agrees with kubectl kustomize (its fallback)`);
        for (const obj of objs) {
            const where = `${variant}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
            const Model = await modelOf(String(obj.apiVersion), String(obj.kind));
            if (!Model) { fail(`${where}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`); continue; }
            try {
                new Model(obj).validate();
                ok(`${where} is a valid ${obj.apiVersion} ${obj.kind}`);
            } catch (e) {
                fail(`${where}: ${e.message}`);
            }
        }
        checkDaemon(variant, objs);
        checkProxy(variant, objs);
    }
    checkDockerfile();
    console.log(`k8s-schema: ${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}

await main();

// Validate deploy/k8s against the Kubernetes API schemas (kubernetes-models:
// validators generated from the Kubernetes OpenAPI document, run with ajv).
//   node tests/deploy/validate-k8s.mjs [DIR]      (default deploy/k8s)
// Reads DIR/kustomization.yaml, checks that each listed resource exists and
// every document in it is a valid object of its apiVersion/kind; prints one
// line per object and "k8s-schema: N passed, N failed". Exit 1 on any failure.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = process.argv[2] || path.join(here, "..", "..", "deploy", "k8s");
let passed = 0, failed = 0;
const ok = (msg) => { passed++; console.log(`ok: ${msg}`); };
const fail = (msg) => { failed++; console.log(`FAIL: ${msg}`); };

// "apps/v1" -> kubernetes-models/apps/v1, "v1" -> kubernetes-models/v1.
async function modelOf(apiVersion, kind) {
    const group = apiVersion.includes("/") ? apiVersion : `v1`;
    if (!/^[a-z0-9.]+(\/v[0-9a-z]+)?$/.test(group) || !/^[A-Za-z]+$/.test(kind)) return null;
    try {
        const mod = await import(`kubernetes-models/${group}/${kind}`);
        return mod[kind];
    } catch {
        return null;
    }
}

const kust = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
if (kust.kind !== "Kustomization" || !Array.isArray(kust.resources)) fail("kustomization.yaml: not a Kustomization with resources");
for (const file of kust.resources || []) {
    const full = path.join(dir, file);
    if (!fs.existsSync(full)) { fail(`${file}: listed in kustomization.yaml but missing`); continue; }
    for (const doc of YAML.parseAllDocuments(fs.readFileSync(full, "utf8"))) {
        if (doc.errors.length) { fail(`${file}: YAML error ${doc.errors[0].message}`); continue; }
        const obj = doc.toJS();
        if (!obj) continue;
        const where = `${file}: ${obj.kind} ${obj.metadata && obj.metadata.name}`;
        const Model = await modelOf(String(obj.apiVersion), String(obj.kind));
        if (!Model) { fail(`${where}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`); continue; }
        try {
            new Model(obj).validate();
            ok(`${where} is a valid ${obj.apiVersion} ${obj.kind}`);
        } catch (e) {
            fail(`${where}: ${e.message}`);
        }
    }
}
console.log(`k8s-schema: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

"""openapi.yaml cannot drift from the code: it is generated (tools/gen_openapi.py) from the daemon's own
description of its API (`embedscope --dump-api`, built from the route and analysis tables) and the prose of
openapi.base.yaml. Regenerating it must give the committed file byte for byte."""
import difflib
import json
import os
import subprocess
import sys
import tempfile
import unittest

from httpkit import ROOT, api_dump, example_change

GENERATOR = os.path.join(ROOT, "tools", "gen_openapi.py")


def generate(dump_path):
    return subprocess.run([sys.executable, GENERATOR, dump_path, os.path.join(ROOT, "openapi.base.yaml")],
                          capture_output=True, text=True, check=False)


class Generated(unittest.TestCase):
    def test_openapi_yaml_is_what_the_generator_makes(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(api_dump(), f)
            f.flush()
            out = generate(f.name)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(os.path.join(ROOT, "openapi.yaml")) as f:
            committed = f.read()
        if out.stdout != committed:
            diff = "".join(list(difflib.unified_diff(committed.splitlines(True), out.stdout.splitlines(True),
                                                     "openapi.yaml (committed)", "openapi.yaml (generated)"))[:80])
            self.fail("openapi.yaml differs from what the code and openapi.base.yaml give; run `make openapi` "
                      "and commit the result:\n" + diff)

    def test_every_route_is_documented_with_its_methods(self):
        import yaml
        with open(os.path.join(ROOT, "openapi.yaml")) as f:
            doc = yaml.safe_load(f)
        routes = {r["path"]: r for r in api_dump()["routes"]}
        self.assertEqual(set(doc["paths"]), set(routes))
        for path, route in routes.items():
            with self.subTest(path):
                documented = {m.upper() for m in doc["paths"][path] if m in ("get", "put", "delete")}
                self.assertEqual(documented, set(route["methods"]) - {"HEAD"})

    def test_every_analysis_parameter_has_the_daemons_schema(self):
        # read against the dump itself, not the generator: a generator that left out defaults or ranges
        # (and an openapi.yaml regenerated with it) would still be "what the generator makes"; a
        # parameter's example is its value in the descriptor's typical request, and only those have one
        import yaml
        with open(os.path.join(ROOT, "openapi.yaml")) as f:
            doc = yaml.safe_load(f)
        def resolve(p):
            if "$ref" not in p:
                return p
            node = doc
            for part in p["$ref"].lstrip("#/").split("/"):
                node = node[part]
            return node
        keys = (("enum", "enum"), ("default", "default"), ("minimum", "minimum"), ("maximum", "maximum"),
                ("exclusive_minimum", "exclusiveMinimum"), ("exclusive_maximum", "exclusiveMaximum"))
        checked = examples = 0
        for a in api_dump()["analyses"]:
            documented = {q["name"]: q for q in map(resolve, doc["paths"][a["route"]]["get"]["parameters"])}
            typical = example_change(a["examples"]["query"])
            for p in a["params"]:
                with self.subTest(a["route"], param=p["name"]):
                    self.assertIn(p["name"], documented)
                    example = documented[p["name"]].get("example")
                    self.assertEqual(None if example is None else str(example), typical.get(p["name"]))
                    examples += example is not None
                    schema = documented[p["name"]]["schema"]
                    self.assertEqual(schema["type"], p["type"])
                    for key, name in keys:
                        self.assertEqual(schema.get(name), p.get(key), name)
                        checked += key in p
        self.assertGreater(checked, 100)
        self.assertGreater(examples, 30)

    def test_the_job_schema_is_the_daemons_job_table(self):
        # read against the dump itself (jobdoc.c's field table): every member, its type, nullability, values
        # and the states it is present in, and nothing else; the base may not write its own Job
        import yaml
        with open(os.path.join(ROOT, "openapi.yaml")) as f:
            doc = yaml.safe_load(f)
        job = api_dump()["job"]
        self.assertEqual(job["listing"], "requests")
        listing = doc["paths"]["/v1/jobs"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        self.assertEqual(listing["properties"][job["listing"]]["items"], {"$ref": "#/components/schemas/Job"})
        for status in ("200", "303"):
            content = doc["paths"]["/v1/jobs/{id}"]["get"]["responses"][status]["content"]
            self.assertEqual(content["application/json"]["schema"], {"$ref": "#/components/schemas/Job"})
        self.assertEqual(doc["components"]["responses"]["Accepted"]["content"]["application/json"]["schema"],
                         {"$ref": "#/components/schemas/Job"})

        def check(schema, fields, path):
            self.assertEqual(schema["type"], "object", path)
            self.assertEqual(list(schema["properties"]), [f["name"] for f in fields], path)
            self.assertEqual(schema["required"], [f["name"] for f in fields if f["states"] == job["states"]], path)
            for f in fields:
                with self.subTest(path + f["name"]):
                    s = schema["properties"][f["name"]]
                    self.assertTrue(s["description"].endswith(f["description"]))
                    self.assertEqual("Present when `state` is" in s["description"], f["states"] != job["states"])
                    if f.get("schema") == "problem":
                        ref = {"$ref": "#/components/schemas/Problem"}
                        self.assertEqual(s.get("oneOf"), [ref, {"type": "null"}] if f["nullable"] else None)
                        self.assertEqual("$ref" in s and s["$ref"], not f["nullable"] and ref["$ref"])
                        continue
                    self.assertEqual(s["type"], [f["type"], "null"] if f["nullable"] else f["type"])
                    if "enum" in f:
                        self.assertEqual(s["enum"], f["enum"] + ([None] if f["nullable"] else []))
                    if f.get("members"):
                        check(s, f["members"], path + f["name"] + ".")
        check(doc["components"]["schemas"]["Job"], job["fields"], "Job.")
        names = {f["name"] for f in job["fields"]}
        self.assertTrue({"id", "state", "progress", "result", "error"} <= names, names)

    def test_the_generator_refuses_a_route_the_daemon_lacks(self):
        # prose for a route the daemon does not serve is an error, not a silently kept path
        import yaml
        with open(os.path.join(ROOT, "openapi.base.yaml")) as f:
            base = yaml.safe_load(f)
        base["paths"]["/v1/nope"] = {"get": {"summary": "gone", "responses": {"200": {"description": "x"}}}}
        with tempfile.TemporaryDirectory() as d:
            dump, base_path = os.path.join(d, "api.json"), os.path.join(d, "base.yaml")
            with open(dump, "w") as f:
                json.dump(api_dump(), f)
            with open(base_path, "w") as f:
                yaml.safe_dump(base, f)
            out = subprocess.run([sys.executable, GENERATOR, dump, base_path], capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("/v1/nope", out.stderr)


if __name__ == "__main__":
    unittest.main()

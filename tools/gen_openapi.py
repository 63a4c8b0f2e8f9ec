#!/usr/bin/env python3
"""Generate openapi.yaml from the daemon's own description of its API.

    python3 tools/gen_openapi.py API.json openapi.base.yaml > openapi.yaml   (make openapi)

API.json is `embedscope --dump-api`: every route with its methods and query
parameters, and every analysis of the table with its typed parameters
(defaults, ranges, limits, choices), tables and statuses. openapi.base.yaml is
the hand-written part: the prose, the schemas of the JSON results and the
service routes. The generator

- writes each analysis route's path item: its parameters (name, type, enum,
  default, range, required; described by the route's `x-parameters` or the
  shared `x-parameter-docs` of the base, else from the spec itself), its
  responses (every status the daemon gives, CSV and NPY when it has tables)
  and its prose from the base, when the base has any: a new analysis needs
  none to be documented;
- keeps the service routes as the base writes them, after checking that each
  documents exactly the methods, statuses and query parameters the daemon's
  route table gives it;
- writes components/schemas/Job, the job document (GET /v1/jobs/{id}, a 202's
  body), from the dump's `job` (jobdoc.c's field table, the one definition of
  its members), which the base must not write;
- fails (exit 1, naming what) on a route or parameter that the base documents
  and the daemon does not have, or the reverse for service routes.

Parameters used alike by several routes become components/parameters.
tests/http/test_openapi_generated.py regenerates the document and fails on any
difference from the committed openapi.yaml, which the daemon serves.
"""
import json
import re
import sys

import yaml

# Status -> the base's components/responses entry describing it.
RESPONSES = {202: "Accepted", 304: "NotModified", 400: "BadRequest", 404: "NotFound", 406: "NotAcceptable",
             422: "Incompatible", 429: "TooManyJobs", 500: "ServerError", 503: "Busy", 504: "Timeout"}
TAGS = {"one": "analyses", "pair": "cross-matrix", "none": "positional"}
OPERATIONS = ("get", "put", "delete")


class Failure(Exception):
    pass


# ---------------------------------------------------------------- YAML out

class Dumper(yaml.SafeDumper):
    """Block scalars for multi-line prose, flow style for leaf collections, no aliases."""

    def ignore_aliases(self, data):
        return True


def _str(dumper, value):
    style = "|" if "\n" in value and not re.search(r" \n| $|\t", value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, _str)


def to_yaml(doc):
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=110, default_flow_style=None)


# ---------------------------------------------------------------- parameters

def schema_of(p):
    """The JSON schema of a parameter of the dump."""
    s = {"type": p["type"]}
    for key, out in (("enum", "enum"), ("default", "default"), ("minimum", "minimum"), ("maximum", "maximum"),
                     ("exclusive_minimum", "exclusiveMinimum"), ("exclusive_maximum", "exclusiveMaximum")):
        if key in p:
            s[out] = p[key]
    if "limit" in p:
        s["x-limit"] = p["limit"]  # the configured limit (GET /v1 lists its value) bounds it
    return s


def generated_description(p):
    """A description made from the spec alone, for a parameter the base does not describe."""
    parts = []
    if "operand" in p and "selection" in p:
        return "As `%s`, for %s." % (p["selection"], p["operand"])
    if p.get("format") == "model/matrix":
        parts.append("A matrix as `model/matrix`.")
    if p.get("limit"):
        parts.append("At most the configured `%s`." % p["limit"])
    bound = {"rank": "the rank bound min(n_rows, d)", "items": "the number of items",
             "last_item": "the last item's index", "dim": "the model-axis length d"}.get(p.get("bound"))
    if bound:
        parts.append("At most %s." % bound)
    if p.get("below"):
        parts.append("Below `%s`." % p["below"])
    if p.get("when"):
        (name, value), = p["when"].items()
        parts.append("Only with %s=%s." % (name, value))
    return " ".join(parts) or "See the operation's description."


def description_of(p, own, shared):
    name = p["name"]
    if name in own:
        return own[name]
    if name in shared:
        return shared[name]
    if "operand" in p and "selection" in p and p["selection"] in shared:
        return "As `%s`, for %s." % (p["selection"], p["operand"])
    return generated_description(p)


def parameter(p, own, shared, example):
    entry = {"name": p["name"], "in": "query"}
    if p.get("required") and "when" not in p:  # required under a condition: said in its description
        entry["required"] = True
    entry["description"] = description_of(p, own, shared).rstrip("\n")
    entry["schema"] = schema_of(p)
    if p["name"] in example:
        kind = {"integer": int, "number": float}.get(p.get("type"), str)
        entry["example"] = kind(example[p["name"]])
    return entry


def typical_values(a):
    """{parameter: value} of the descriptor's typical request (its examples' query): each parameter's
    example, what a reader of the reference fills in to try the route."""
    query = (a.get("examples") or {}).get("query", "")
    return dict(item.partition("=")[::2] for item in query.split("&") if item)


def camel(name):
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def share_parameters(paths, analysis_routes, components):
    """Parameters written alike on two routes or more become components/parameters ($ref'd)."""
    seen, order = {}, []
    for route in analysis_routes:
        for entry in paths[route]["get"]["parameters"]:
            key = json.dumps(entry, sort_keys=True)
            if key not in seen:
                seen[key] = 0
                order.append((key, entry))
            seen[key] += 1
    names = {}
    for key, entry in order:
        if seen[key] < 2:
            continue
        base, n, name = camel(entry["name"]), 1, camel(entry["name"])
        while name in components:
            n += 1
            name = "%s%d" % (base, n)
        components[name] = entry
        names[key] = name
    for route in analysis_routes:
        op = paths[route]["get"]
        op["parameters"] = [{"$ref": "#/components/parameters/" + names[json.dumps(e, sort_keys=True)]}
                            if json.dumps(e, sort_keys=True) in names else e for e in op["parameters"]]


# ---------------------------------------------------------------- paths

def analysis_path(a, statuses, prose, shared):
    """The path item of analysis a from the dump, with the base's prose (maybe none)."""
    item = {}
    if "{model}" in a["route"]:
        item["parameters"] = [{"$ref": "#/components/parameters/Model"}, {"$ref": "#/components/parameters/Matrix"}]
    prose = dict(prose.get("get", {}))
    own = prose.pop("x-parameters", {})
    unknown = set(own) - {p["name"] for p in a["params"]}
    if unknown:
        raise Failure("%s: x-parameters describes %s, which the daemon does not take" % (a["route"], sorted(unknown)))
    op = {"operationId": prose.pop("operationId", "get" + camel(a["name"].replace("/", "_"))),
          "tags": prose.pop("tags", [TAGS[a["shape"]]]),
          "summary": prose.pop("summary", "The %s analysis" % a["name"])}
    if "description" in prose:
        op["description"] = prose.pop("description")
    example = typical_values(a)
    op["parameters"] = [parameter(p, own, shared, example) for p in a["params"]]
    ok = prose.pop("responses", {}).get("200", {})
    json_schema = ok.get("content", {}).get("application/json", {"schema": {"type": "object"}})
    content = {"application/json": json_schema}
    if a["tables"]:
        content["text/csv"] = {"schema": {"$ref": "#/components/schemas/CsvTable"}}
        content["application/x-npy"] = {"schema": {"$ref": "#/components/schemas/NpyTable"}}
    responses = {"200": {"description": ok.get("description", "The result."),
                         "headers": {"ETag": {"$ref": "#/components/headers/ETag"},
                                     "Cache-Control": {"$ref": "#/components/headers/CacheControl"},
                                     "X-Request-Id": {"$ref": "#/components/headers/XRequestId"}},
                         "content": content}}
    for status in statuses:
        if status == 200:
            continue
        if status not in RESPONSES:
            raise Failure("%s: status %d has no response in RESPONSES of tools/gen_openapi.py" % (a["route"], status))
        responses[str(status)] = {"$ref": "#/components/responses/" + RESPONSES[status]}
    op["responses"] = responses
    if prose:
        raise Failure("%s: the base's get has %s, which the generator does not place" % (a["route"], sorted(prose)))
    item["get"] = op
    return item


def query_params(doc, item, op):
    names = set()
    for entry in item.get("parameters", []) + op.get("parameters", []):
        if "$ref" in entry:
            entry = doc["components"]["parameters"][entry["$ref"].rsplit("/", 1)[1]]
        if entry["in"] == "query":
            names.add(entry["name"])
    return names


def check_service_path(doc, route):
    """A service route as the base writes it: its methods and GET parameters must be the daemon's."""
    item = doc["paths"].get(route["path"])
    if item is None:
        raise Failure("openapi.base.yaml does not document the route %s" % route["path"])
    methods = {m.upper() for m in item if m in OPERATIONS}
    if methods != set(route["methods"]) - {"HEAD"}:
        raise Failure("%s: the base documents %s, the daemon answers %s" % (route["path"], sorted(methods),
                                                                           sorted(route["methods"])))
    for method, op in item.items():
        if method not in OPERATIONS:
            continue
        documented = sorted(int(status) for status in op["responses"])
        if documented != sorted(route["statuses"][method.upper()]):
            raise Failure("%s %s: the base documents the statuses %s, the daemon's route table says %s" % (
                method.upper(), route["path"], documented, sorted(route["statuses"][method.upper()])))
    documented = query_params(doc, item, item["get"])
    if documented != set(route["params"]):
        raise Failure("%s: the base documents the parameters %s, the daemon takes %s" % (
            route["path"], sorted(documented), sorted(route["params"])))


def problem_slugs(doc, api):
    """The slug of /problems/{slug} takes the problem types the daemon has (its enum, generated)."""
    for entry in doc["paths"]["/problems/{slug}"]["get"]["parameters"]:
        if entry.get("name") == "slug":
            entry["schema"] = {"type": "string", "enum": [p["slug"] for p in api["problems"]]}


# ---------------------------------------------------------------- the job document

SCHEMA_REFS = {"problem": "#/components/schemas/Problem"}


def job_member_schema(f, states):
    """The JSON schema of one member of the dump's job table (its own members, when an object)."""
    if f.get("schema"):
        if f["schema"] not in SCHEMA_REFS:
            raise Failure("job member %s: no schema for its kind %r in SCHEMA_REFS" % (f["name"], f["schema"]))
        s = {"$ref": SCHEMA_REFS[f["schema"]]}
        if f["nullable"]:
            s = {"oneOf": [s, {"type": "null"}]}
    elif f.get("members"):
        s = job_schema(f["members"], f["states"])
    else:
        s = {"type": [f["type"], "null"] if f["nullable"] else f["type"]}
    if "enum" in f:
        s["enum"] = f["enum"] + ([None] if f["nullable"] else [])
    when = "" if f["states"] == states else "Present when `state` is %s. " % " or ".join(f["states"])
    s["description"] = when + f["description"]
    return s


def job_schema(fields, states):
    """An object schema of a job table: its members, those present in every state required."""
    return {"type": "object",
            "required": [f["name"] for f in fields if f["states"] == states],
            "properties": {f["name"]: job_member_schema(f, states) for f in fields}}


def job_document(api, schemas):
    """components/schemas/Job from the dump's job table (the base writes none)."""
    if "Job" in schemas:
        raise Failure("openapi.base.yaml writes components/schemas/Job, which is generated from --dump-api's job")
    job = api["job"]
    schema = {"description": "A long request computed without its connection (202 Accepted): its state, "
                             "timings, progress, and its result's URL or its problem. Listed by GET /v1/jobs "
                             "under `%s`; finished states: %s." % (job["listing"], ", ".join(job["finished"]))}
    schema.update(job_schema(job["fields"], job["states"]))
    schemas["Job"] = schema


def generate(api, base):
    doc = base
    shared = doc.pop("x-parameter-docs", {})
    analyses = {a["route"]: a for a in api["analyses"]}
    routes = {r["path"]: r for r in api["routes"]}
    for path in doc["paths"]:
        if path not in routes:
            raise Failure("openapi.base.yaml documents %s, which the daemon does not serve" % path)
    paths = {}
    for path, item in doc["paths"].items():  # the base's order, then new routes in the daemon's
        paths[path] = item
    for r in api["routes"]:
        paths.setdefault(r["path"], {})
    for path in paths:
        route = routes[path]
        if path in analyses:
            paths[path] = analysis_path(analyses[path], route["statuses"]["GET"], paths[path], shared)
        else:
            check_service_path(doc, route)
    doc["paths"] = paths
    problem_slugs(doc, api)
    job_document(api, doc["components"]["schemas"])
    share_parameters(paths, list(analyses), doc["components"]["parameters"])
    return doc


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    with open(argv[1]) as f:
        api = json.load(f)
    with open(argv[2]) as f:
        base = yaml.safe_load(f)
    try:
        doc = generate(api, base)
    except Failure as e:
        sys.exit("gen_openapi: %s" % e)
    first, rest = to_yaml(doc).split("\n", 1)
    sys.stdout.write(first + "\n# Generated by tools/gen_openapi.py from `embedscope --dump-api` and openapi.base.yaml\n"
                     "# (the prose): edit those, then `make openapi`.\n" + rest)


if __name__ == "__main__":
    main(sys.argv)

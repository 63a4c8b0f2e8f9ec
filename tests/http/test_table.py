"""The analysis table (src/api/analyses.c) against its documentation and itself.

- openapi.yaml (parsed with python3-yaml) documents exactly the query parameters
  each route accepts; the accepted set is read from the daemon (the 400 for an
  unknown parameter lists it, and that list is derived from the table).
- A property test over the table: for every analysis route and every parameter
  it accepts, two different valid values give two different ETags and bodies
  (so every parameter reaches the canonical cache/ETag key and the result), and
  an invalid value is a 400 problem naming that parameter. A route parameter
  without an entry in CASES fails the test, so a new parameter needs one.
"""
import unittest
import urllib.parse

from httpkit import (SYNC, ONE_MATRIX, WPE, analysis_examples, analysis_routes, api_dump, example_change, example_path, openapi_document,
                     openapi_query_params, request)

GPT = "/v1/models/gpt2-small/matrices"
# Concrete request paths of every openapi path: the service routes here, every analysis route from the
# daemon's own table (--dump-api; the path's matrix is W_pos).
PATHS = {
    "/v1/models": "/v1/models", "/v1/models/{model}": "/v1/models/gpt2-small",
    "/v1/models/{model}/matrices/{matrix}": WPE,
    "/healthz": "/healthz", "/readyz": "/readyz", "/openapi.yaml": "/openapi.yaml", "/metrics": "/metrics",
    "/problems/{slug}": "/problems/not-found", "/v1": "/v1", "/v1/jobs": "/v1/jobs", "/": "/",
    "/v1/jobs/{id}": "/v1/jobs/00000000000000000000",
    "/assets/{file}": "/assets/app.js", "/docs": "/docs",
    ONE_MATRIX + "/labels": WPE + "/labels", ONE_MATRIX + "/labels/search": WPE + "/labels/search",
}
for route in analysis_routes():
    PATHS[route] = route.replace(ONE_MATRIX, WPE)

# route -> (request path, base query, {parameter: (change 1, change 2, invalid change)}); a change
# is a dict merged into the base query (None deletes a member). None as change 2: the shipped
# configuration offers a single valid value (the parameter is then only checked for rejection).
# "@square": switch the matrix of that prefix to a square d_model x d_model weight (for head=).
# Built from each descriptor's examples (--dump-api): its typical query and its own parameters'
# cases; a selection parameter (rows, a_rows, ...) and a rendering one (format, orient, table)
# without a case of its descriptor gets the generic one below.
SEL = {"rows": ({"rows": "0:64"}, {"rows": "0:48"}, {"rows": "a"}),
       "exclude": ({"exclude": "3"}, {"exclude": "4"}, {"exclude": "-1"}),
       "center": ({"center": "none"}, {"center": "rows"}, {"center": "sideways"}),
       "average": ({"average": "2"}, {"average": "4"}, {"average": "0"}),
       "average_order": ({"rows": "2:66", "average": "4", "average_order": "select_then_average"},
                         {"rows": "2:66", "average": "4", "average_order": "average_then_select"},
                         {"average": "4", "average_order": "first"}),
       "average_mode": ({"average": "2", "average_mode": "rows"}, {"average": "2", "average_mode": "groups"},
                        {"average": "4", "average_mode": "x"}),
       "head": ({"@square": "", "head": "0"}, {"@square": "", "head": "1"}, {"@square": "", "head": "12"})}


def prefixed(prefix, cases):
    """The selection cases with every name prefixed (a_rows, ...)."""
    return {prefix + k: tuple({(n if n == "@square" else prefix + n): (prefix if n == "@square" else v)
                               for n, v in c.items()} for c in t) for k, t in cases.items()}


def generic_case(param, tables):
    """The case of a selection or rendering parameter (as --dump-api describes it), or None."""
    if "selection" in param:
        sel = {param["selection"]: SEL[param["selection"]]}
        return (prefixed(param["operand"] + "_", sel) if "operand" in param else sel)[param["name"]]
    if not param.get("rendering"):
        return None
    if param["name"] == "format":
        return {"format": "csv"}, {"format": "npy"}, {"format": "xml"}
    if param["name"] == "orient":
        return {"orient": "columns"}, {"orient": "nested"}, {"orient": "rows"}
    two = {"format": "csv", "table": tables[1]} if len(tables) > 1 else None  # table chooses among them
    return {"format": "csv", "table": tables[0]}, two, {"table": "nope"}


def route_cases(analysis):
    """(request path, base query, cases) of one analysis from its examples."""
    ex = analysis["examples"]
    cases = {}
    for param in analysis["params"]:
        case = generic_case(param, analysis["tables"])
        if case is not None:
            cases[param["name"]] = case
    for name, (one, two, bad) in ex["cases"].items():  # the descriptor's own cases win
        cases[name] = (example_change(one), None if two is None else example_change(two), example_change(bad))
    return example_path(analysis["route"], ""), example_change(ex["query"]), cases


analysis_examples()  # fails naming an analysis without examples
CASES = {a["route"]: route_cases(a) for a in api_dump()["analyses"]}
SQUARE = "gpt2-small/h0.q"


def url(path, base, change):
    query = dict(base)
    for name, value in change.items():
        if name == "@square":  # the matrix of prefix value ("" = the path's) becomes a square weight
            if value:
                query[value.rstrip("_")] = SQUARE
            else:
                path = GPT + "/h0.q/" + path.rsplit("/", 1)[1]
        elif value is None:
            query.pop(name, None)
        else:
            query[name] = value
    return path + "?" + urllib.parse.urlencode(query, safe="/:,")


def accepted(path):
    """The parameters the daemon accepts on path (from the 400 for an unknown one)."""
    r = request(path + ("&" if "?" in path else "?") + "zzz=1")
    detail = r.json()["detail"]
    taken = detail.split("takes: ")[1].rstrip(")")
    return set() if taken == "none" else set(taken.split(", "))


class CanonicalKeys(unittest.TestCase):
    def test_compare_keys_the_parsed_parameters_not_the_query_text(self):
        # the same comparison written differently: one ETag (every parsed parameter, canonical)
        base = "/v1/compare?matrices=gpt2-small/wpe,openai-gpt/wpe&analysis=pca"
        same = [base + "&rows=0:64&k=3", base + "&rows=0:64;:64&k=03", base + "&k=3&rows=:64;0:64&method=auto",
                base + "&rows=0:64;0:64&center=columns", base + "&rows=0:32,32:64&k=3",
                base + "&rows=0:10,10,11:64;-512:-448&k=3"]
        tags = {request(path, headers=SYNC).header("ETag") for path in same}
        self.assertEqual(len(tags), 1, tags)
        other = request(base + "&rows=0:64&k=3&center=none", headers=SYNC).header("ETag")
        self.assertNotIn(other, tags)


class Documentation(unittest.TestCase):
    def test_openapi_documents_exactly_the_accepted_parameters(self):
        doc = openapi_document()
        self.assertEqual(set(doc["paths"]), set(PATHS), "a route without a concrete test path, or the reverse")
        for spec_path, path in PATHS.items():
            with self.subTest(spec_path):
                self.assertEqual(accepted(path), openapi_query_params(doc, spec_path))


class Properties(unittest.TestCase):
    def test_every_analysis_route_has_its_cases(self):
        # CASES is built from the descriptors' examples: an analysis without them fails in
        # analysis_examples(), a parameter without a case in the next test
        self.assertEqual(set(CASES), set(analysis_routes()))

    def test_every_route_parameter_has_a_case(self):
        for route, (path, _, cases) in CASES.items():
            with self.subTest(route):
                self.assertEqual(accepted(path), set(cases))

    def test_two_valid_values_give_two_etags_and_bodies(self):
        for route, (path, base, cases) in CASES.items():
            for name, (one, two, _) in cases.items():
                if two is None:
                    continue
                with self.subTest(route=route, param=name):
                    r1, r2 = request(url(path, base, one), headers=SYNC), request(url(path, base, two), headers=SYNC)
                    self.assertEqual((r1.status, r2.status), (200, 200), (url(path, base, one), r1.body[:300],
                                                                          url(path, base, two), r2.body[:300]))
                    self.assertNotEqual(r1.header("ETag"), r2.header("ETag"))
                    self.assertNotEqual(r1.body, r2.body)

    def test_an_invalid_value_names_its_parameter(self):
        for route, (path, base, cases) in CASES.items():
            for name, (_, _, bad) in cases.items():
                with self.subTest(route=route, param=name):
                    r = request(url(path, base, bad), headers=SYNC)
                    self.assertIn(r.status, (400, 404, 406, 422), r.body[:300])
                    doc = r.json()
                    if "limit" not in doc:  # a configured limit is named as such
                        self.assertEqual(doc["param"], name, doc)


if __name__ == "__main__":
    unittest.main()

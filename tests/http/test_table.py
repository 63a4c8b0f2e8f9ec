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

from httpkit import WPE, analysis_routes, api_dump, openapi_document, openapi_query_params, request

GPT = "/v1/models/gpt2-small/matrices"
ONE_MATRIX = "/v1/models/{model}/matrices/{matrix}"
# Concrete request paths of every openapi path: the service routes here, every analysis route from the
# daemon's own table (--dump-api; the path's matrix is W_pos).
PATHS = {
    "/v1/models": "/v1/models",
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


def prefixed(prefix, cases=SEL):
    """The selection cases with every name prefixed (a_rows, ...)."""
    return {prefix + k: tuple({(n if n == "@square" else prefix + n): (prefix if n == "@square" else v)
                               for n, v in c.items()} for c in t) for k, t in cases.items()}


def without(cases, *names):
    return {k: v for k, v in cases.items() if k not in names}


K = {"k": ({"k": "2"}, {"k": "3"}, {"k": "0"})}
METHOD = {"method": ({"rows": None, "method": "exact"}, {"rows": None, "method": "topk"}, {"method": "lanczos"})}
# pca and vectors parse method=values and refuse it (they need singular vectors); the spectrum takes it, not topk
NO_VALUES = {"method": (*METHOD["method"][:2], {"method": "values"})}
SPECTRUM_METHOD = {"method": ({"method": "exact"}, {"method": "values"}, {"method": "topk"})}
GAP = {"gap": ({"gap": "0.5"}, {"gap": "0.001"}, {"gap": "1"})}
PAIR_BASE = {"a": "gpt2-small/wpe", "b": "gpt2-small/h0.q", "a_rows": "0:64", "b_rows": "0:64"}
PAIR = {"a": ({"a": "gpt2-small/h0.k"}, {"a": "gpt2-small/h0.v"}, {"a": "nope"}),
        "b": ({"b": "gpt2-small/h0.k"}, {"b": "gpt2-small/h0.v"}, {"b": "gpt2-small"}),
        **prefixed("a_"), **prefixed("b_")}
ALIGN_BASE = {"w": "gpt2-small/h0.q", "r": "gpt2-small/wpe", "r_rows": "0:64", "w_rows": "0:64"}
ATTN_BASE = {"model": "gpt2-small", "layer": "0", "queries": "0:32"}
ATTN = {"model": ({"model": "gpt2-small"}, None, {"model": "nope"}),
        "queries": ({"queries": "0:16"}, {"queries": "8:24"}, {"queries": "5:2"}),
        "n_heads": ({"n_heads": "6"}, {"n_heads": "4"}, {"n_heads": "0"}),
        "layer": ({"layer": "0"}, None, {"layer": "x"})}
CAPTURE = {"analysis": "capture", "a": "gpt2-small/h0.q", "k": "3"}
CASES = {
    "/v1/models/{model}/matrices/{matrix}/rows": (WPE + "/rows", {"rows": "0:64"}, without(SEL, "center")),
    "/v1/models/{model}/matrices/{matrix}/pca": (
        WPE + "/pca", {"rows": "0:64"},
        {**SEL, **K, **METHOD, "basis": ({"average": "4", "basis": "original"}, {"average": "4", "basis": "own"},
                                         {"basis": "original"})}),
    "/v1/models/{model}/matrices/{matrix}/spectrum": (WPE + "/spectrum", {"rows": "0:64"},
                                                      {**SEL, **GAP, **SPECTRUM_METHOD}),
    "/v1/models/{model}/matrices/{matrix}/cosine": (
        WPE + "/cosine", {"rows": "0:64", "row": "1"},
        {**SEL,
         "mode": ({"mode": "offset", "row": None}, {"mode": "matrix", "row": None}, {"mode": "diagonal"}),
         "row": ({"row": "2"}, {"row": "3"}, {"row": "1024"}),
         "bins": ({"mode": "matrix", "row": None, "bins": "4"}, {"mode": "matrix", "row": None, "bins": "8"},
                  {"mode": "matrix", "row": None, "bins": "100000"})}),
    "/v1/models/{model}/matrices/{matrix}/neighbors": (
        WPE + "/neighbors", {"rows": "0:64", "row": "1"},
        {**SEL, "row": ({"row": "2"}, {"row": "3"}, {"row": "1024"}),
         "k": ({"k": "2"}, {"k": "3"}, {"k": "0"}),
         "metric": ({"metric": "euclidean"}, {"metric": "cosine", "k": "4"}, {"metric": "x"}),
         "space": ({"space": "pca"}, {"space": "full", "k": "4"}, {"space": "x"}),
         "components": ({"space": "pca", "components": "2"}, {"space": "pca", "components": "4"},
                        {"space": "pca", "components": "0"})}),
    "/v1/models/{model}/matrices/{matrix}/vectors": (
        WPE + "/vectors", {"rows": "0:64"},
        {**SEL, **K, **GAP, **NO_VALUES, "side": ({"side": "left"}, {"side": "right", "k": "4"}, {"side": "up"})}),
    "/v1/models/{model}/matrices/{matrix}/periodicity": (  # evenly spaced rows only: exclude an end
        WPE + "/periodicity", {"rows": "0:64"},
        {**SEL, **K, "exclude": ({"exclude": "0"}, {"exclude": "63"}, {"exclude": "-1"}),
         "alpha": ({"alpha": "0.05"}, {"alpha": "0.001"}, {"alpha": "0.5"}),
         "axis": ({"axis": "columns", "k": None}, {"axis": "components"}, {"axis": "rows"})}),
    "/v1/models/{model}/matrices/{matrix}/outliers": (
        WPE + "/outliers", {"rows": "0:64"},
        {**without(SEL, "center"),
         "threshold": ({"threshold": "1"}, {"threshold": "2"}, {"threshold": "0"})}),
    "/v1/models/{model}/matrices/{matrix}/toeplitz": (
        WPE + "/toeplitz", {"rows": "0:64"},
        {**without(SEL, "center"), "kind": ({"kind": "gram"}, {"kind": "cosine", "rows": "0:32"}, {"kind": "x"})}),
    "/v1/models/{model}/matrices/{matrix}/averaging": (
        WPE + "/averaging", {"rows": "0:64", "g": "2"},
        {**without(SEL, "center", "average", "average_order", "average_mode", "head"),
         "g": ({"g": "4"}, {"g": "8"}, {"g": "0"}),
         "average_order": ({"rows": "2:66", "average_order": "select_then_average"},
                           {"rows": "2:66", "average_order": "average_then_select"}, {"average_order": "x"})}),
    "/v1/capture": ("/v1/capture", PAIR_BASE, {**PAIR, **K}),
    "/v1/overlap": ("/v1/overlap", PAIR_BASE,
                    {**PAIR, "ka": ({"ka": "3"}, {"ka": "4"}, {"ka": "0"}), "kb": ({"kb": "3"}, {"kb": "4"}, {"kb": "0"}),
                     "bins": ({"bins": "4"}, {"bins": "8"}, {"bins": "100000"}),
                     "blur": ({"blur": "0.5"}, {"blur": "1"}, {"blur": "-1"})}),
    "/v1/alignment": ("/v1/alignment", ALIGN_BASE,
                      {"w": ({"w": "gpt2-small/h0.k"}, {"w": "gpt2-small/h0.v"}, {"w": "nope"}),
                       "r": ({"r": "gpt2-small/h0.k"}, {"r": "gpt2-small/h0.v"}, {"r": "sinusoidal/rope64"}),
                       **prefixed("w_"), **prefixed("r_"), **K,
                       "kw": ({"kw": "2"}, {"kw": "3"}, {"kw": "0"}), "kr": ({"kr": "2"}, {"kr": "3"}, {"kr": "0"}),
                       "bins": ({"bins": "4"}, {"bins": "8"}, {"bins": "100000"})}),
    "/v1/alignment/layers": ("/v1/alignment/layers", {"model": "gpt2-small", "r": "gpt2-small/wpe", "r_rows": "0:64"},
                             {"model": ({"model": "gpt2-small"}, None, {"model": "nope"}),
                              "r": ({"r": "gpt2-small/h0.k"}, {"r": "gpt2-small/h0.v"}, {"r": "nope"}),
                              **prefixed("r_"), **K,
                              "w_center": ({"w_center": "columns"}, {"w_center": "rows"}, {"w_center": "x"}),
                              "w_head": ({"w_head": "0"}, {"w_head": "1"}, {"w_head": "x"})}),
    "/v1/attention": ("/v1/attention", ATTN_BASE, ATTN),
    "/v1/attention/ranking": ("/v1/attention/ranking", without(ATTN_BASE, "layer"), without(ATTN, "layer")),
    "/v1/attention/pattern": ("/v1/attention/pattern", {**ATTN_BASE, "head": "0"},
                              {**ATTN, "head": ({"head": "1"}, {"head": "2"}, {"head": "12"}),
                               "bins": ({"bins": "4"}, {"bins": "8"}, {"bins": "100000"})}),
    "/v1/rope/relative": ("/v1/rope/relative", {"matrix": "sinusoidal/rope64"},
                          {"matrix": ({"matrix": "sinusoidal/rope"}, {"matrix": "sinusoidal/rope64", "seed": "1"},
                                      {"matrix": "sinusoidal/nope"}),
                           "q": ({"q": ",".join(["1"] * 64), "k": ",".join(["2"] * 64)},
                                 {"q": ",".join(["3"] * 64), "k": ",".join(["2"] * 64)}, {"q": "1,2", "k": "1,2"}),
                           "k": ({"q": ",".join(["1"] * 64), "k": ",".join(["2"] * 64)},
                                 {"q": ",".join(["1"] * 64), "k": ",".join(["5"] * 64)},
                                 {"q": ",".join(["1"] * 64), "k": "x"}),
                           "seed": ({"seed": "1"}, {"seed": "2"}, {"seed": "-1"})}),
    "/v1/compare": ("/v1/compare", {"matrices": "gpt2-small/wpe,openai-gpt/wpe", "analysis": "spectrum",
                                    "rows": "0:64"},
                    {"matrices": ({"matrices": "gpt2-small/wpe"}, {"matrices": "openai-gpt/wpe"},
                                  {"matrices": "nope/x"}),
                     "analysis": ({"analysis": "pca"}, {"analysis": "outliers"}, {"analysis": "vectors"}),
                     "rows": ({"rows": "0:32"}, {"rows": "0:32;0:48"}, {"rows": "0:8;0:8;0:8"}),
                     "center": ({"center": "none"}, {"center": "rows"}, {"center": "x"}),
                     "average": ({"average": "2"}, {"average": "4"}, {"average": "0"}),
                     "k": ({"analysis": "pca", "k": "2"}, {"analysis": "pca", "k": "3"}, {"analysis": "pca", "k": "0"}),
                     "gap": ({"gap": "0.5"}, {"gap": "0.001"}, {"gap": "2"}),
                     "kind": ({"analysis": "toeplitz", "kind": "gram"}, {"analysis": "toeplitz", "kind": "cosine"},
                              {"analysis": "toeplitz", "kind": "x"}),
                     "method": ({"method": "exact"}, {"method": "values"}, {"analysis": "pca", "method": "values"}),
                     "threshold": ({"analysis": "outliers", "threshold": "1"},
                                   {"analysis": "outliers", "threshold": "2"},
                                   {"analysis": "outliers", "threshold": "0"}),
                     "mode": ({"analysis": "cosine", "mode": "offset"}, {"analysis": "cosine", "mode": "row", "row": "2"},
                              {"analysis": "cosine", "mode": "diagonal"}),
                     "row": ({"analysis": "cosine", "row": "2"}, {"analysis": "cosine", "row": "3"},
                             {"analysis": "cosine", "row": "x"}),
                     "bins": ({"analysis": "cosine", "mode": "matrix", "bins": "4"},
                              {"analysis": "cosine", "mode": "matrix", "bins": "8"},
                              {"analysis": "cosine", "mode": "matrix", "bins": "100000"}),
                     # capture: a shared reference a (and its selection), each matrix its second side
                     "a": ({**CAPTURE}, {**CAPTURE, "a": "gpt2-small/h0.k"}, {**CAPTURE, "a": "nope"}),
                     **{k: tuple({**CAPTURE, **c} for c in t) for k, t in prefixed("a_").items()},
                     "basis": ({"analysis": "pca", "average": "2", "basis": "original"},
                               {"analysis": "pca", "average": "2", "basis": "own"}, {"analysis": "pca", "basis": "x"}),
                     "axis": ({"analysis": "periodicity", "axis": "columns"}, {"analysis": "periodicity"},
                              {"analysis": "periodicity", "axis": "x"}),
                     "alpha": ({"analysis": "periodicity", "alpha": "0.05"},
                               {"analysis": "periodicity", "alpha": "0.001"},
                               {"analysis": "periodicity", "alpha": "0"})}),
}


# The rendering parameters (src/api/format.c) every tabular route takes: format and orient change the
# body; table (with format=csv) chooses among the route's tables (compare: those of its analysis).
W = ONE_MATRIX + "/"
TABLES = {a["route"]: a["tables"] for a in api_dump()["analyses"]}  # each route's tables, main first
for route, (_, _, cases) in CASES.items():
    cases["format"] = ({"format": "csv"}, {"format": "npy"}, {"format": "xml"})
    cases["orient"] = ({"orient": "columns"}, {"orient": "nested"}, {"orient": "rows"})
    names = TABLES.get(route)
    if route == "/v1/compare":
        cases["table"] = ({"format": "csv", "analysis": "pca", "table": "coords"},
                          {"format": "csv", "analysis": "pca", "table": "variance"}, {"table": "coords"})
    elif route == W + "periodicity":
        cases["table"] = ({"format": "csv", "table": "components"},
                          {"format": "csv", "axis": "columns", "k": None, "table": "columns"}, {"table": "nope"})
    elif route == W + "cosine":
        cases["table"] = ({"format": "csv", "table": "similarity"},
                          {"format": "csv", "mode": "offset", "row": None, "table": "offsets"}, {"table": "nope"})
    elif len(names) > 1:
        cases["table"] = ({"format": "csv", "table": names[0]}, {"format": "csv", "table": names[1]}, {"table": "nope"})
    else:
        cases["table"] = ({"format": "csv", "table": names[0]}, None, {"table": "nope"})

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
        tags = {request(path).header("ETag") for path in same}
        self.assertEqual(len(tags), 1, tags)
        other = request(base + "&rows=0:64&k=3&center=none").header("ETag")
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
        # CASES holds hand-written valid and invalid values, so it cannot be derived: a new analysis
        # fails here until it has its entry
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
                    r1, r2 = request(url(path, base, one)), request(url(path, base, two))
                    self.assertEqual((r1.status, r2.status), (200, 200), (url(path, base, one), r1.body[:300],
                                                                          url(path, base, two), r2.body[:300]))
                    self.assertNotEqual(r1.header("ETag"), r2.header("ETag"))
                    self.assertNotEqual(r1.body, r2.body)

    def test_an_invalid_value_names_its_parameter(self):
        for route, (path, base, cases) in CASES.items():
            for name, (_, _, bad) in cases.items():
                with self.subTest(route=route, param=name):
                    r = request(url(path, base, bad))
                    self.assertIn(r.status, (400, 404, 406, 422), r.body[:300])
                    doc = r.json()
                    if "limit" not in doc:  # a configured limit is named as such
                        self.assertEqual(doc["param"], name, doc)


if __name__ == "__main__":
    unittest.main()

"""Every parameter's documented default, sent explicitly, gives the answer of leaving it out (issue 28 §2).
Swagger UI's "Try it out" at /docs sends every parameter with its default from openapi.yaml, which is made
from `embedscope --dump-api`; the daemon used to refuse its own defaults of conditional parameters
(`average_order` without `average`, `bins` of cosine without mode=matrix, compare's parameters of another
analysis). A conditional parameter given its default is accepted and ignored; any other value still names
the rule."""
import json
import unittest
import urllib.parse

from httpkit import ProblemAssertions, api_dump, example_path, request


def spelled(value):
    """A default as Swagger UI writes it in a query (numbers as JSON writes them)."""
    return value if isinstance(value, str) else json.dumps(value)


def without_input(body):
    doc = json.loads(body)
    doc.pop("input", None)  # the echo of what was sent
    return doc


def assert_close(test, got, want, path="$"):
    """got equals want, numbers to 1e-12 relative (exact for everything else)."""
    if isinstance(want, dict) and isinstance(got, dict):
        test.assertEqual(sorted(got), sorted(want), path)
        for k in want:
            assert_close(test, got[k], want[k], path + "." + k)
    elif isinstance(want, list) and isinstance(got, list):
        test.assertEqual(len(got), len(want), path)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(test, g, w, "%s[%d]" % (path, i))
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        test.assertLessEqual(abs(got - want), 1e-12 * max(abs(want), 1e-300), path)
    else:
        test.assertEqual(got, want, path)


class DocumentedDefaults(ProblemAssertions):
    def test_every_default_spelled_out_answers_as_its_absence(self):
        for a in api_dump()["analyses"]:
            query = a["examples"]["query"]
            given = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            defaults = {p["name"]: spelled(p["default"]) for p in a["params"]
                        if "default" in p and p["name"] not in given}
            self.assertTrue(defaults, a["name"])
            full = query + "&" + urllib.parse.urlencode(defaults)
            with self.subTest(analysis=a["name"], query=full):
                plain = request(example_path(a["route"], query))
                spelt = request(example_path(a["route"], full))
                self.assertEqual(plain.status, 200, plain.body[:300])
                self.assertEqual(spelt.status, 200, spelt.body[:300])
                # The same numbers to 1e-12 relative: the two requests are computed apart, and on the shared
                # daemon alignment's last bits have been seen to depend on what ran before (a clean-clone run,
                # ...598355 against ...598357; open in issue 30's note). A default not ignored changes the
                # answer far beyond that.
                assert_close(self, without_input(spelt.body), without_input(plain.body))

    def test_a_conditional_parameter_other_than_its_default_is_still_refused(self):
        pca = "/v1/models/gpt2-small/matrices/wpe/pca?rows=0:64&"
        self.assert_problem(pca + "average_order=average_then_select", 400, param="average_order")
        self.assert_problem(pca + "average_mode=groups", 400, param="average_mode")
        cosine = "/v1/models/gpt2-small/matrices/wpe/cosine?rows=0:64&row=1&"
        self.assert_problem(cosine + "bins=32", 400, param="bins")
        compare = "/v1/compare?matrices=gpt2-small/wpe,openai-gpt/wpe&analysis=spectrum&rows=0:64&"
        self.assert_problem(compare + "basis=original", 400, param="basis")


if __name__ == "__main__":
    unittest.main()

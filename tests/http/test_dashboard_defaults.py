"""The dashboard's defaults and choices (web/src/app.js) against the daemon's own description of its API
(`embedscope --dump-api`): a value the dashboard shows as the daemon's default is that default, and every
choice it offers is one the daemon takes. The dashboard keeps its own view state (which matrix, rows `1:`
to skip GPT-2's position 0, ...), so each state key is classified here, once: a key in neither list fails,
and so does a new choice list, until someone says what it mirrors."""
import os
import re
import unittest

from httpkit import ROOT, api_dump

APP = os.path.join(ROOT, "web", "src", "app.js")
# state key -> (analysis, parameter) whose daemon default it shows
MIRRORS = {"exclude": ("pca", "exclude"), "center": ("pca", "center"), "nk": ("neighbors", "k"),
           "nmetric": ("neighbors", "metric"), "nspace": ("neighbors", "space"), "b_center": ("capture", "b_center"),
           "obins": ("overlap", "bins"), "hbins": ("attention/pattern", "bins"),
           "threshold": ("outliers", "threshold"), "pk": ("periodicity", "k")}
# state keys that are the dashboard's own choices or view state, not a daemon default
OWN = {"tab", "m", "rows", "average", "pc", "dim", "cmap", "cam", "line", "row", "bins", "a", "a_rows", "a_center",
       "b", "k", "blur", "model", "head", "cmp", "cmp_rows", "cmp_an", "colorby", "q", "qre",
       "proj", "async", "qcol", "qcase", "show"}  # projection, jobs forced, search column and case, legend filter
# state key of a control with choices -> (analysis, parameter) whose values they must be
CHOICES = {"center": ("pca", "center"), "a_center": ("capture", "a_center"), "b_center": ("capture", "b_center"),
           "nmetric": ("neighbors", "metric"), "nspace": ("neighbors", "space"), "cmp_an": ("compare", "analysis")}
# controls with choices of the view alone (dimensions shown, colour map, a line or not)
OWN_CHOICES = {"dim", "cmap", "line"}


def source():
    with open(APP) as f:
        return f.read()


def defaults():
    """The DEFAULTS object of app.js as {key: string}."""
    block = re.search(r"const DEFAULTS = \{(.*?)\n\};", source(), re.S)
    assert block, "no `const DEFAULTS = {...};` in web/src/app.js"
    return dict(re.findall(r"(\w+): '([^']*)'", block.group(1)))


def choice_lists():
    """{state key: [values]} of every control(..., 'key', { choices: [...] }) of app.js."""
    lists = {}
    for key, text in re.findall(r"control\([^()]*?, '(\w+)', \{ choices: (\[.*?\]) \}", source()):
        pairs = re.findall(r"\['([^']*)', '[^']*'\]", text)
        lists[key] = pairs or re.findall(r"'([^']*)'", text)
    return lists


def param(analysis, name):
    a = next(a for a in api_dump()["analyses"] if a["name"] == analysis)
    return next(p for p in a["params"] if p["name"] == name)


class DashboardDefaults(unittest.TestCase):
    def test_every_state_key_is_classified(self):
        keys = set(defaults())
        self.assertFalse(set(MIRRORS) & OWN)
        self.assertEqual(keys, set(MIRRORS) | OWN, "classify the new key in MIRRORS or OWN")

    def test_mirrored_defaults_are_the_daemons(self):
        shown = defaults()
        for key, (analysis, name) in MIRRORS.items():
            with self.subTest(key=key, param=analysis + " " + name):
                p = param(analysis, name)
                if p["type"] in ("integer", "number"):
                    self.assertEqual(float(shown[key]), float(p["default"]))
                else:
                    self.assertEqual(shown[key], p["default"])

    def test_offered_choices_are_the_daemons(self):
        lists = choice_lists()
        self.assertGreaterEqual(len(lists), 4, "the controls' choices were not found in app.js")
        self.assertEqual(set(lists), set(CHOICES) | OWN_CHOICES,
                         "say in CHOICES which parameter a new choice list feeds (OWN_CHOICES: the view's own)")
        for key, values in lists.items():
            if key in OWN_CHOICES:
                continue
            with self.subTest(key=key):
                self.assertLessEqual(set(values), set(param(*CHOICES[key])["enum"]))


if __name__ == "__main__":
    unittest.main()

"""A minimal PEP 517 / PEP 660 build backend for the embedscope client (standard library only).

It builds a pure-Python wheel of the `embedscope` package next to it, reading the name,
version, summary and dependencies from pyproject.toml, so that pip needs nothing from an
index to build it (offline installs from the checkout). `pip install -e` gets an editable
wheel (PEP 660): the metadata and a .pth file naming this checkout's clients/python, so the
installed package is the checkout's, edits included."""
import base64
import hashlib
import os
import re
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "embedscope"


def _project():
    """name, version, description, requires-python, dependencies and extras from pyproject.toml
    (tomllib needs Python 3.11; this reads the few simple keys it needs by hand)."""
    text = open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8").read()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]

    def key(name):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(name), project, re.M)
        return m.group(1) if m else ""

    def strings(body):
        return re.findall(r'"([^"]+)"', body)

    deps = strings(re.search(r"^dependencies\s*=\s*\[([^\]]*)\]", project, re.M).group(1))
    extras = {}
    opt = text.split("[project.optional-dependencies]", 1)
    if len(opt) == 2:
        for name, body in re.findall(r"^(\w+)\s*=\s*\[([^\]]*)\]", opt[1].split("\n[", 1)[0], re.M):
            extras[name] = strings(body)
    return key("name"), key("version"), key("description"), key("requires-python"), deps, extras


def _metadata():
    name, version, summary, python, deps, extras = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version, "Summary: " + summary,
             "License: MIT", "Requires-Python: " + python]
    lines += ["Requires-Dist: " + d for d in deps]
    for extra, reqs in extras.items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s ; extra == "%s"' % (r, extra) for r in reqs]
    readme = os.path.join(HERE, "README.md")
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return name, version, "\n".join(lines) + "\nDescription-Content-Type: text/markdown\n\n" + body


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _files():
    """(archive name, bytes) of every .py file of the package."""
    root = os.path.join(HERE, PACKAGE)
    for directory, subdirs, names in sorted(os.walk(root)):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith(".py") or n == "py.typed":
                path = os.path.join(directory, n)
                yield os.path.relpath(path, HERE).replace(os.sep, "/"), open(path, "rb").read()


def _dist_info(name, version):
    return "%s-%s.dist-info" % (name, version)


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version, metadata = _metadata()
    info = os.path.join(metadata_directory, _dist_info(name, version))
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata)
    return _dist_info(name, version)


def _write_wheel(wheel_directory, files):
    """A py3-none-any wheel of files ((archive name, bytes)) and the dist-info; its file name."""
    name, version, metadata = _metadata()
    info = _dist_info(name, version)
    wheel_name = "%s-%s-py3-none-any.whl" % (name, version)
    entries = list(files) + [
        (info + "/METADATA", metadata.encode()),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: embedscope-backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = "".join("%s,%s,%d\n" % (n, _digest(b), len(b)) for n, b in entries) + info + "/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in entries + [(info + "/RECORD", record.encode())]:
            z.writestr(zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0)), b)
    return wheel_name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _files())


# PEP 660: editable installs (pip install -e clients/python)
get_requires_for_build_editable = get_requires_for_build_wheel
prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose only file is a .pth putting this checkout's clients/python on sys.path."""
    return _write_wheel(wheel_directory, [("_embedscope_editable.pth", (HERE + "\n").encode())])

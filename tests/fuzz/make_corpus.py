#!/usr/bin/env python3
"""Write small valid seed inputs for the fuzzers: make_corpus.py CORPUS_DIR writes
CORPUS_DIR/NAME/ for each tests/fuzz/fuzz_NAME.c (npy, safetensors, rowsel, config, params, upload, prefix,
forwarded, accept, record, labels, framing)
and the dictionaries CORPUS_DIR/NAME.dict of the text parsers.
Standard library only (struct, json), so it runs before numpy is installed."""
import hashlib
import json, os, struct, sys

def npy(major, descr, shape, fortran, payload):
    shape_text = "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    lenfmt = "<H" if major == 1 else "<I"
    pre = 8 + struct.calcsize(lenfmt)
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    header = (d + " " * pad + "\n").encode("utf-8")
    return b"\x93NUMPY" + bytes([major, 0]) + struct.pack(lenfmt, len(header)) + header + payload

def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data

def write_seeds(directory, seeds, suffix=""):
    """Write each seed (name -> bytes or str) as directory/name+suffix."""
    os.makedirs(directory, exist_ok=True)
    for name, blob in seeds.items():
        data = blob.encode() if isinstance(blob, str) else blob
        with open(os.path.join(directory, name + suffix), "wb") as f:
            f.write(data)

# fuzz_rowsel: "ROWS" or "ROWS\nEXCLUDE".
ROWSEL_SEEDS = {
    "all": "", "one": "5", "last": "-1", "neg_one": "-2", "range": "1:", "stop": ":10",
    "step": "0:100:3", "reverse": "::-1", "reverse_to_zero": "9::-2", "negatives": "-10:-1",
    "blanks": " 1 : 8 : 2 ", "big": "9223372036854775807:-9223372036854775807:-3",
    "exclude": "0:20\n3,5, 7 ,19", "exclude_all": "2:4\n2,3", "exclude_far": "\n100000",
    "list_runs": "\n0,1,2,3,10,8,6,4,4,4,1", "bad": "1:2:3:4",
}

# fuzz_config: configs with no readable files (the fuzzer's data dir is empty).
WAVES = {"generator": "sinusoidal", "n_positions": 16, "d_model": 4, "base": 10000}
CONFIG_SEEDS = {
    "minimal": {"models": {"m": {"matrices": {"pe": dict(WAVES)}}}},
    "gpt2_shapes": {"models": {"m": {"matrices": {
        "pe": {"generator": "sinusoidal", "n_positions": 1024, "d_model": 768},
        "g": {"generator": "gaussian", "rows": 64, "cols": 48, "decay": 0, "seed": 1}}}},
        "warm": [{"matrix": "m/g", "rows": "::-1", "center": "rows"}]},
    "full": {
        "data_dir": "data",
        "server": {"listen": "[::1]:0", "threads": 1, "blas_threads": 1, "connection_timeout_s": 0,
                   "connection_limit": 4, "cache_mb": 1, "cors_origins": ["*", "http://x"]},
        "limits": {"max_k": 4, "max_bins": 8, "max_rows": 100, "max_response_bytes": 1024,
                   "max_exclude": 0, "sync_seconds": 0.5, "light_seconds": 0, "max_wait_s": 0,
                   "request_timeout_s": 1, "job_ttl_s": 1, "max_jobs_per_client": 1},
        "models": {"m": {"description": "d", "matrices": {
            "pe": dict(WAVES, description="waves"),
            "rope": {"generator": "rope", "n_positions": 8, "d_model": 2},
            "g": {"generator": "gaussian", "rows": 6, "cols": 3, "decay": 0.5, "scale": 2,
                  "seed": 9223372036854775807},
            "v": {"view": "pe", "rows": [2, 10], "columns": [0, 2], "transpose": True,
                  "model_axis": "rows"},
            "avg": {"view": "pe", "average_rows": 4},
            "alias": {"view": "v"},
        }}},
        "warm": [{"matrix": "m/pe", "rows": "1:", "center": "columns"},
                 {"matrix": "m/v", "center": "none"}],
    },
    "file": {"models": {"m": {"matrices": {"w": {"file": "w.npy", "model_axis": "rows"},
                                           "t": {"file": "x.safetensors", "tensor": "a"}}}}},
    "cycle": {"models": {"m": {"matrices": {"a": {"view": "b"}, "b": {"view": "c"},
                                            "c": {"view": "a"}}}}},
    "bad_type": {"server": {"threads": 2.0}, "models": {}},
}

# Tokens for libFuzzer's -dict (CORPUS_DIR/NAME.dict): the names the parsers look for.
CONFIG_SECTIONS = ["data_dir", "server", "limits", "uploads", "models", "warm", "cors_origins",
                   "trusted_proxies", "max_request_cost"]


def config_keys():
    """The keys the config parser reads, taken from its es_conf_get_* calls in src/app/ (the source of truth), so a
    new key reaches the fuzzer's dictionary without being listed here; plus the sections read by other calls."""
    import glob, re
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "app")
    keys = set(CONFIG_SECTIONS)
    for path in glob.glob(os.path.join(src, "*.c")):
        with open(path, encoding="utf-8") as f:
            keys.update(re.findall(r'es_conf_get_\w+\([^;"]*?"(\w+)"', f.read()))
    return sorted(keys)


CONFIG_KEYS = config_keys()
CONFIG_DICT = ['"%s":' % k for k in CONFIG_KEYS] + [
    '"sinusoidal"', '"rope"', '"gaussian"', '"columns"', '"rows"', '"none"', '"m/pe"', "true", "false",
    "null", "1024", "768", "100000", "2147483647", "9223372036854775807", "1e308", "-0", "[0, 8]", "{}", "[]"]
PARAMS_DICT = [k + "=" for k in ["matrix", "rows", "exclude", "center", "k", "gap", "side", "bins", "range",
                                 "offsets", "a", "a_rows", "a_exclude"]] + [
    "t/pe", "t/g", "t/pt", "u/rope", "columns", "none", "left", "right", "::-1", "&", ",", ":", "1e-3", "inf",
    "nan", "0x1p3", "18446744073709551616"]
FRAMING_DICT = ["GET ", " HTTP/1.1", " HTTP/1.0", "\r\n", "\r\n\r\n", "Content-Length: ", "Transfer-Encoding: ",
                "chunked", "gzip, chunked", "Host: x", ";ext=1", "0\r\n\r\n", " : ", "\t", "ffffffffffffffff"]
ROWSEL_DICT = [":", "::", "-", "+", ",", "\n", "9223372036854775807", "-9223372036854775808", "1024"]

def write_dict(path, tokens):
    """A libFuzzer dictionary: one quoted token a line, non-printable bytes as \\xNN."""
    def quote(t):
        return "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c) for c in t)
    with open(path, "w") as f:
        f.writelines('"%s"\n' % quote(t) for t in tokens)

# fuzz_params: a query string "k=v&k=v" (keys and values as the server decodes them).
PARAMS_SEEDS = {
    "selection": "matrix=t/pe&rows=1:40:2&exclude=3,5&center=columns&k=3",
    "prefixed": "a=t/g&a_rows=::-1&a_exclude=0&a_center=rows&a_average=2",
    "range": "range=-10:&offsets=1.5,-2,0x10&gap=1e-3&side=left&bins=16",
    "dup": "k=1&k=2&unknown",
    "utf8": "rows=\u00e9\u00e9:\udcff&matrix=t/\u20ac&\udcc3=1",  # \udcXX: the raw byte XX
}

# fuzz_upload: a request head (method, path?query, headers), NUL, the body.
def upload_seed(method, target, headers, body=b""):
    head = "\n".join([method, target] + ["%s: %s" % kv for kv in headers.items()])
    return head.encode() + b"\0" + (body.encode() if isinstance(body, str) else body)

AUTH = {"Authorization": "Bearer tok"}

def upload_seeds():
    f8 = struct.pack("<6d", 1.5, -2.25, 3.0, 0.125, 1e10, -7.0)
    return {
        "npy": upload_seed("PUT", "/v1/models/u/matrices/x?model_axis=rows",
                           dict(AUTH, **{"Content-Type": "application/x-npy"}), npy(1, "<f8", (2, 3), False, f8)),
        "safetensors": upload_seed("PUT", "/v1/models/u/matrices/w?tensor=w",
                                   dict(AUTH, **{"Content-Type": "application/octet-stream"}),
                                   safetensors([("w", "F32", [2, 3], struct.pack("<6f", 1, 2, 3, 4, 5, 6))])),
        "generator": upload_seed("PUT", "/v1/models/u/matrices/g", dict(AUTH, **{"Content-Type": "application/json"}),
                                 json.dumps({"generator": "rope", "n_positions": 16, "d_model": 4})),
        "view": upload_seed("PUT", "/v1/models/u/matrices/v", dict(AUTH, **{"Content-Type": "application/json"}),
                            json.dumps({"view": "t/pe", "rows": [1, 50], "average_rows": 2})),
        "delete": upload_seed("DELETE", "/v1/models/u/matrices/x", AUTH),
        "no_token": upload_seed("PUT", "/v1/models/u/matrices/x", {"Content-Length": "100000"}, "{}"),
        "configured": upload_seed("PUT", "/v1/models/t/matrices/pe", AUTH, "{}"),
    }

UPLOAD_DICT = ["PUT", "DELETE", "/v1/models/", "/matrices/", "Content-Type: ", "application/json", "application/x-npy",
               "application/octet-stream", "Authorization: Bearer tok", "Content-Length: ", "?tensor=",
               "&model_axis=rows", "\x93NUMPY", "'descr'", "'shape'", "\"generator\"", "\"view\"", "\"t/pe\"",
               "\"sinusoidal\"", "\"rope\"", "\"gaussian\"", "\"average_rows\"", "\"data_offsets\"", "\"F32\""]

def main(corpus):
    os.makedirs(corpus, exist_ok=True)
    for name, tokens in [("config", CONFIG_DICT), ("params", PARAMS_DICT), ("rowsel", ROWSEL_DICT),
                         ("upload", UPLOAD_DICT), ("framing", FRAMING_DICT)]:
        write_dict(os.path.join(corpus, name + ".dict"), tokens)
    write_seeds(os.path.join(corpus, "rowsel"), ROWSEL_SEEDS)
    write_seeds(os.path.join(corpus, "record"), record_seeds(), ".json")
    write_seeds(os.path.join(corpus, "labels"), labels_seeds())
    write_seeds(os.path.join(corpus, "upload"), upload_seeds())
    write_seeds(os.path.join(corpus, "config"),
                {name: json.dumps(c, indent=1) for name, c in CONFIG_SEEDS.items()}, ".json")
    write_seeds(os.path.join(corpus, "params"),
                {name: q.encode("utf-8", "surrogateescape") for name, q in PARAMS_SEEDS.items()})
    npy_dir, st_dir = os.path.join(corpus, "npy"), os.path.join(corpus, "safetensors")
    vals = [1.5, -2.25, 3.0, 0.125, 1e10, -7.0]
    seeds = {
        "v1_f8": npy(1, "<f8", (2, 3), False, struct.pack("<6d", *vals)),
        "v2_f4_be": npy(2, ">f4", (6,), False, struct.pack(">6f", *vals)),
        "v3_f2_fortran": npy(3, "<f2", (3, 2), True, struct.pack("<6e", 1, -2, 0.5, 4, 8, 0.25)),
        "scalar": npy(1, "<f8", (), False, struct.pack("<d", 2.0)),
        "empty": npy(1, "<f4", (0, 4), False, b""),
    }
    write_seeds(npy_dir, seeds, ".npy")
    st = {
        "all_dtypes": safetensors([
            ("a", "F32", [2, 2], struct.pack("<4f", 0.5, -1.25, 3.0, 7.0)),
            ("b", "F16", [3], struct.pack("<3e", 1, -2, 0.5)),
            ("c", "BF16", [1, 3], struct.pack("<3H", 0x3F80, 0xC040, 0x3EAB)),
            ("d", "F64", [], struct.pack("<d", -1 / 3)),
            ("e", "F32", [0, 4], b""),
            ("f", "I64", [1], struct.pack("<q", 42)),
        ], {"format": "pt"}),
        "one_f32": safetensors([("w", "F32", [2, 3], struct.pack("<6f", *vals))]),
        "empty": safetensors([]),
    }
    write_seeds(st_dir, st, ".safetensors")
    # fuzz_forwarded: X-Forwarded-For header values.
    write_seeds(os.path.join(corpus, "forwarded"), {
        "one_v4": "203.0.113.7",
        "chain": "198.51.100.1, 203.0.113.7",
        "v6": "2001:db8::1",
        "mapped": "::ffff:192.0.2.1",
        "spaces": "  10.0.0.1 \t",
        "name": "proxy.local",
        "port": "203.0.113.7:443",
        "empty_last": "203.0.113.7,",
        "garbage": "1.2.3.4.5, [::1]",
    })
    # fuzz_prefix: X-Forwarded-Prefix header values.
    write_seeds(os.path.join(corpus, "prefix"), {
        "plain": "/embedscope", "slash": "/embedscope/", "root": "/", "deep": "/a/b-c_d.e~f/g",
        "dots": "/a/../b", "double": "//evil.example", "blank": "/a b", "quote": '/a"b'})
    # fuzz_accept: "ACCEPT\nFORMAT\nORIENT\nTABLE".
    write_seeds(os.path.join(corpus, "accept"), {
        "none": "", "csv": "text/csv", "q": "application/x-npy;q=0.5, text/csv;q=0.9\ncsv",
        "wild": "text/*;q=0.2, */*;q=0.1", "zero": "application/json;q=0, image/png\n\ncolumns",
        "param": "\nnpy\nnested\nvariance", "bad": "x;q=1e999\nxml\nrows\nnope"})
    # fuzz_framing: a read size (first byte), then the bytes of one connection.
    get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    write_seeds(os.path.join(corpus, "framing"), {
        "get": b"\x07" + get + b"\r\n",
        "pipelined": b"\x03" + get + b"\r\n" + get + b"Connection: close\r\n\r\n",
        "length": b"\x10" + get + b"Content-Length: 5\r\n\r\nhello" + get + b"\r\n",
        "chunked": b"\x05" + get + b"Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n" + get + b"\r\n",
        "space_colon": b"\x20" + get + b"Content-Length : 5\r\n\r\nhello",
        "fold": b"\x01" + get + b"X: a\r\n Content-Length: 5\r\n\r\nhello",
        "gzip": b"\x09" + get + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "version": b"\x02GET / HTTP/2.0\r\n\r\n",
        "bare_lf": b"\x04\r\nGET / HTTP/1.0\nA: b\n\n",
    })

def record_seeds():
    """fuzz_record: records of uploads.dir; the file record names the one file fuzz_record.c writes."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
    data = (b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + (header.ljust(117) + "\n").encode()
            + struct.pack("<6d", *[i * 1.5 - 2 for i in range(6)]))
    sha = hashlib.sha256(data).hexdigest()
    made = {"format": 2, "description": "", "created": 1.7e9}
    file_rec = dict(made, model="u", matrix="f", file=sha, tensor="", model_axis="rows")
    gen = dict(made, model="u", matrix="g", entry={"generator": "rope", "n_positions": 8, "d_model": 4})
    view_cfg = dict(made, model="u", matrix="v", entry={"view": "t/pe", "rows": [0, 10], "average_rows": 2})
    view_base = dict(made, model="u", matrix="w", entry={"view": "f", "rows": [0, 1]}, base=file_rec)
    nested = dict(made, model="w", matrix="n", entry={"view": "u/w", "transpose": True}, base=view_base)
    outside = dict(file_rec, file="../../etc/passwd")
    view_outside = dict(view_cfg, file="../../etc/pass")  # an entry beside a file outside: malformed too
    return {name: json.dumps(r) for name, r in [("file", file_rec), ("generator", gen), ("view", view_cfg),
                                                 ("view_base", view_base), ("nested", nested),
                                                 ("outside", outside), ("view_outside", view_outside)]}


def labels_seeds():
    """fuzz_labels: a byte choosing the format (mod 3: TSV, CSV, JSON) and row count (/ 3 mod 16), then the text."""
    def seed(fmt, rows, text):
        return bytes([rows * 3 + fmt]) + text.encode()
    return {
        "tsv_header": seed(0, 2, "word\tcount\nthe\t10\n\u0120cat\t-2.5e3\n"),
        "tsv_one_column": seed(0, 3, "a\n\nc"),
        "csv_quotes": seed(1, 3, 'n,v\r\n"a,b","say ""hi"""\r\n"two\nlines",\r\nplain,x'),
        "json": seed(2, 2, json.dumps({"columns": {"tok": ["a", "b"], "n": [3, 0.5], "e": [None, "x"]}})),
    }


if __name__ == "__main__":
    main(sys.argv[1])

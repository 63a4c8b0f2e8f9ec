#!/usr/bin/env python3
"""Write small valid seed files for the fuzzers: make_corpus.py NPY_DIR SAFETENSORS_DIR.
Standard library only (struct, json), so it runs before numpy is installed."""
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

def main(npy_dir, st_dir):
    os.makedirs(npy_dir, exist_ok=True)
    os.makedirs(st_dir, exist_ok=True)
    vals = [1.5, -2.25, 3.0, 0.125, 1e10, -7.0]
    seeds = {
        "v1_f8": npy(1, "<f8", (2, 3), False, struct.pack("<6d", *vals)),
        "v2_f4_be": npy(2, ">f4", (6,), False, struct.pack(">6f", *vals)),
        "v3_f2_fortran": npy(3, "<f2", (3, 2), True, struct.pack("<6e", 1, -2, 0.5, 4, 8, 0.25)),
        "scalar": npy(1, "<f8", (), False, struct.pack("<d", 2.0)),
        "empty": npy(1, "<f4", (0, 4), False, b""),
    }
    for name, blob in seeds.items():
        open(os.path.join(npy_dir, name + ".npy"), "wb").write(blob)
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
    for name, blob in st.items():
        open(os.path.join(st_dir, name + ".safetensors"), "wb").write(blob)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

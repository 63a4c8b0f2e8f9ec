#!/usr/bin/python3
"""Extract the layer-0 tensors the embedded default needs for positional-only
attention (GET /v1/attention) from the shared GPT-2 small safetensors file.

Usage (from the repository root, Debian's python3-numpy):
    /usr/bin/python3 scripts/extract-layer0.py [SAFETENSORS]
Default input: ../shared/data/gpt2-small/gpt2-small-partial.safetensors.
Writes data/gpt2-small/h0_ln_1_weight.npy, h0_ln_1_bias.npy, h0_c_attn_bias.npy
(np.save, float32 little-endian exactly as stored, rank 1) and prints their sha256.
The header is parsed with json (8-byte little-endian length, then JSON); every
tensor's dtype, shape and byte range are checked before use."""
import hashlib
import json
import struct
import sys

import numpy as np

DEFAULT_INPUT = "../shared/data/gpt2-small/gpt2-small-partial.safetensors"
TENSORS = {
    "h.0.ln_1.weight": ("data/gpt2-small/h0_ln_1_weight.npy", [768]),
    "h.0.ln_1.bias": ("data/gpt2-small/h0_ln_1_bias.npy", [768]),
    "h.0.attn.c_attn.bias": ("data/gpt2-small/h0_c_attn_bias.npy", [2304]),
}


def read_header(raw):
    """The JSON header and the offset where tensor data starts."""
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        sys.exit("header length %d runs past the end of the file" % hlen)
    return json.loads(raw[8:8 + hlen]), 8 + hlen


def tensor(raw, header, base, name, shape):
    """One F32 tensor as a little-endian float32 array, checked against the header."""
    t = header.get(name)
    if t is None:
        sys.exit("no tensor %s in the file" % name)
    if t["dtype"] != "F32" or t["shape"] != shape:
        sys.exit("%s: expected F32 %s, got %s %s" % (name, shape, t["dtype"], t["shape"]))
    a, b = t["data_offsets"]
    if b - a != 4 * int(np.prod(shape)) or base + b > len(raw):
        sys.exit("%s: bad data_offsets %s" % (name, t["data_offsets"]))
    return np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(shape)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_INPUT
    with open(path, "rb") as f:
        raw = f.read()
    header, base = read_header(raw)
    for name, (out, shape) in TENSORS.items():
        np.save(out, tensor(raw, header, base, name, shape))
        with open(out, "rb") as f:
            print("%s  %s  (%s)" % (hashlib.sha256(f.read()).hexdigest(), out, name))


if __name__ == "__main__":
    main()

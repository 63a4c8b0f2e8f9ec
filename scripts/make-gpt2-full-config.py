#!/usr/bin/python3
"""Write config/gpt2-full.json: GPT-2 small's 12 layers from the shared
gpt2-small-partial.safetensors (not shipped; ../shared/data next to the repository).

Usage: scripts/make-gpt2-full-config.py > config/gpt2-full.json
Per layer i: h{i}.c_attn (Conv1D [in=d_model, out], model axis rows), its views
h{i}.q / h{i}.k / h{i}.v (column blocks of 768), h{i}.o (c_proj, model axis
columns: it writes to the residual stream), h{i}.ln_1.weight / .bias and
h{i}.c_attn.bias (rank-1 tensors load as 1 x n, model axis columns)."""
import json
import sys

LAYERS = 12
D_MODEL = 768
FILE = "gpt2-small/gpt2-small-partial.safetensors"


def tensor(name, axis, description):
    """A matrix entry reading one tensor of the safetensors file."""
    return {"file": FILE, "tensor": name, "model_axis": axis, "description": description}


def layer(i):
    """The matrices of layer i, in display order."""
    blocks = {}
    blocks[f"h{i}.c_attn"] = tensor(f"h.{i}.attn.c_attn.weight", "rows",
                                    f"layer {i} attn.c_attn.weight, Conv1D [in=d_model, out]: columns [q | k | v]")
    for b, name in enumerate(("q", "k", "v")):
        blocks[f"h{i}.{name}"] = {"view": f"h{i}.c_attn", "columns": [b * D_MODEL, (b + 1) * D_MODEL],
                                  "description": f"layer {i} W_{name.upper()} (d_model x 768, all 12 heads)"}
    blocks[f"h{i}.o"] = tensor(f"h.{i}.attn.c_proj.weight", "columns",
                               f"layer {i} attn.c_proj.weight W_O, Conv1D [in, out=d_model]")
    blocks[f"h{i}.ln_1.weight"] = tensor(f"h.{i}.ln_1.weight", "columns", f"layer {i} ln_1 gain (1 x d_model)")
    blocks[f"h{i}.ln_1.bias"] = tensor(f"h.{i}.ln_1.bias", "columns", f"layer {i} ln_1 bias (1 x d_model)")
    blocks[f"h{i}.c_attn.bias"] = tensor(f"h.{i}.attn.c_attn.bias", "columns",
                                         f"layer {i} attn.c_attn.bias (1 x 2304, [q | k | v])")
    return blocks


def main():
    matrices = {"wpe": tensor("wpe.weight", "columns", "W_pos, wpe.weight: 1024 positions x d_model 768")}
    for i in range(LAYERS):
        matrices.update(layer(i))
    config = {
        "data_dir": "../../shared/data",
        "models": {"gpt2-small": {
            "n_heads": 12,
            "description": "GPT-2 small (OpenAI, 124M), all 12 layers' attention weights and layer norms "
                           "from ../shared/data/gpt2-small/gpt2-small-partial.safetensors",
            "matrices": matrices}},
        # the 12-layer alignment table decomposes 49 matrices (about 15 s here): above the default
        # limits.max_request_cost (1e11), well within these
        "limits": {"request_timeout_s": 300, "max_request_cost": 5e11},
        "warm": [{"matrix": "gpt2-small/wpe", "rows": "1:", "center": "columns"}],
    }
    json.dump(config, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

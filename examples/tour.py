"""The README's short tour in pandas, with the Python client (clients/python).

    pip install ./clients/python      # once (a venv with --system-site-packages uses Debian's numpy/pandas)
    make run                          # in another terminal
    python3 examples/tour.py          # EMBEDSCOPE_URL=http://host:port for another daemon

Each step prints what it found; the checks are the README's claims."""
import numpy as np
import pandas as pd

from embedscope import Client

es = Client()  # $EMBEDSCOPE_URL or http://127.0.0.1:8080

# What is loaded: one row per matrix.
models = es.models()
print(models[["rows", "cols", "dtype", "model_axis"]].head(8), "\n")

# The GPT-2 helix: PCA of W_pos without the outlier position 0, top 3 components.
helix = es.pca("gpt2-small/wpe", k=3, rows="1:")
variance = es.pca("gpt2-small/wpe", k=3, rows="1:", table="variance")
share = variance.iloc[:, 0].sum()
print("helix: %d positions on %s, %.1f %% of the variance in three components" %
      (len(helix), list(helix.columns), 100 * share))
assert helix.shape == (1023, 3) and share > 0.9

# The spectrum: how many components hold 50/90/99 % of the variance.
spectrum = es.spectrum("gpt2-small/wpe", rows="1:")
counts = [int(np.searchsorted(spectrum["cumulative"].to_numpy(), q) + 1) for q in (0.5, 0.9, 0.99)]
print("spectrum: %d singular values; 50/90/99 %% of the variance in %s components" % (len(spectrum), counts))
assert counts[:2] == [2, 3]

# Cosine similarity of position 1 with its neighbours, and the mean by offset.
near = es.cosine("gpt2-small/wpe", row=1, rows="0:31")
by_offset = es.cosine("gpt2-small/wpe", mode="offset", rows="1:")
print("cosine: position 1 vs 2, 3, 30:", near.iloc[[2, 3, 30], 0].round(4).tolist())
print(by_offset.head(3), "\n")

# GPT-2 against GPT-1: how much of GPT-1's W_pos spectrum GPT-2's top 30 directions capture.
capture = es.capture("gpt2-small/wpe", "openai-gpt/wpe", k=30)
print("capture: %d rows, first %s" % (len(capture), capture.iloc[0].to_dict()))

# Your own matrix next to GPT-2's, then gone again.
mine = np.random.default_rng(0).standard_normal((256, 768))
es.upload("tour/gaussian", mine)
try:
    gauss = es.spectrum("tour/gaussian")
    print("a Gaussian 256x768: top-3 variance share %.3f (GPT-2's W_pos: %.3f)" %
          (gauss["explained_variance_ratio"].iloc[:3].sum(), spectrum["explained_variance_ratio"].iloc[:3].sum()))
finally:
    es.delete("tour/gaussian")
assert isinstance(helix, pd.DataFrame)

"""Where loaded code is kept between runs: ``$SPECSAMPLE_CACHE``, else the user's cache dir.

Layout (nothing here is ever committed; see README, "A GPU box without network"):

    <cache>/vllm/releases/<X.Y.Z>/manifest.json   what was extracted from which wheel, with hashes
    <cache>/vllm/releases/<X.Y.Z>/files/vllm/...  the MRV2 sampler's module closure, nothing else
    <cache>/vllm/commits/<sha>/...                the same for a commit of a vLLM checkout
    <cache>/checkouts/<sha>/specsample/...        our own package at a past commit
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$SPECSAMPLE_CACHE``, else ``$XDG_CACHE_HOME/specsample``, else ``~/.cache/specsample``."""
    explicit = os.environ.get("SPECSAMPLE_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specsample"

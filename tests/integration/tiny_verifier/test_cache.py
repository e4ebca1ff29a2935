"""The tiny verifier's build cache under real concurrency: recipes built in child processes (a tokenizer and
two training steps of ``QUICK_RECIPE``), by three callers at once, beside a build killed earlier."""

from __future__ import annotations

import dataclasses
import multiprocessing

import pytest
from transformers import AutoConfig

from eagle_assets.tiny_verifier.cache import cached_tiny_verifier
from eagle_assets.tiny_verifier.recipe import DEFAULT_RECIPE

# A recipe small enough to build in seconds: for the cache mechanics, not for its outputs.
QUICK_RECIPE = dataclasses.replace(DEFAULT_RECIPE, tokenizer_corpus_samples=200, train_steps=2, batch_size=4)


def _build_quick(cache_dir: str, log_file: str) -> str:
    with open(log_file, "a") as fh:
        return str(cached_tiny_verifier(cache_dir, QUICK_RECIPE, log=lambda line: fh.write(line + "\n")))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A cache holding another recipe's build killed mid-way, then three processes asking it at once for
    ``QUICK_RECIPE``: the cache, the abandoned folder, the paths the callers got and their build log."""
    base = tmp_path_factory.mktemp("tiny-verifier-cache")
    cache, log_file = base / "cache", base / "log.txt"
    abandoned = cache / "tiny-verifier" / ".0123456789abcdef.x1y2z3.tmp"  # another recipe's build, killed mid-way
    abandoned.mkdir(parents=True)
    (abandoned / "model.safetensors").write_bytes(b"half written")
    # Closed and joined, not terminated: SIGTERM may be ignored by the workers (they inherit this process's
    # dispositions), and a terminated pool would wait for them forever.
    pool = multiprocessing.get_context("spawn").Pool(3)
    try:
        paths = pool.starmap(_build_quick, [(str(cache), str(log_file))] * 3)
    finally:
        pool.close()
        pool.join()
    return {"cache": cache, "abandoned": abandoned, "paths": paths, "log": log_file.read_text()}


def test_concurrent_callers_build_once(built):
    paths = built["paths"]
    assert len(set(paths)) == 1
    assert built["log"].count("building the tiny verifier") == 1
    folder = built["cache"] / "tiny-verifier"
    assert not list(folder.glob(".*.tmp"))  # no temporary build folder left behind
    assert AutoConfig.from_pretrained(paths[0]).model_type == "qwen3"


def test_a_killed_build_leaves_nothing_behind(built):
    """The build that ran removed the abandoned temporary of another recipe's killed build."""
    assert not built["abandoned"].exists()

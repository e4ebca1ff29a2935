"""Build each tiny verifier once per recipe and share it between processes."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

from eagle_assets.tiny_verifier.recipe import (
    DEFAULT_KIMI_RECIPE,
    DEFAULT_RECIPE,
    RECIPES,
    TinyVerifierRecipe,
    recipe_hash,
)

# Written last by a build (see build.py); its presence marks a complete folder.
RECIPE_FILE = "eagle_assets_recipe.json"

CACHE_ENV = "EAGLE_ASSETS_CACHE"


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The user cache (``$EAGLE_ASSETS_CACHE``, else ``~/.cache/eagle-assets``) as ``environ`` names it."""
    return Path(environ.get(CACHE_ENV) or Path.home() / ".cache" / "eagle-assets")


def cached_tiny_verifier(
    cache_dir: str | os.PathLike | None = None,
    recipe: TinyVerifierRecipe = DEFAULT_RECIPE,
    log: Callable[[str], None] = print,
) -> Path:
    """The folder of the tiny verifier built from ``recipe``, building it on first use.

    The folder is ``<cache>/<kind's folder>/<recipe hash>`` (``tiny-verifier`` for tiny-qwen3,
    ``tiny-kimi`` for tiny-kimi). A build runs in a temporary folder that is
    renamed into place only when complete, under an exclusive file lock, so processes calling this at
    the same time build once and everyone else waits, then reuses it; a crashed build leaves nothing
    under the final name.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / recipe.cache_folder
    folder.mkdir(parents=True, exist_ok=True)
    key = recipe_hash(recipe)
    final = folder / key
    if (final / RECIPE_FILE).exists():
        return final
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if (final / RECIPE_FILE).exists():  # another process finished it while we waited
            return final
        _remove_abandoned_builds(folder, key)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=folder))
        try:
            log(f"building the tiny verifier {recipe.kind} (recipe {key}) in {final}")
            _build_in_child(tmp, recipe, log)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def cached_tiny_kimi(cache_dir: str | os.PathLike | None = None, log: Callable[[str], None] = print) -> Path:
    """The folder of tiny-kimi, the Kimi-K2.5-shaped verifier (built on first use, like the default)."""
    return cached_tiny_verifier(cache_dir, DEFAULT_KIMI_RECIPE, log)


def cached_embedded_verifier(
    kind: str, cache_dir: str | os.PathLike | None = None, log: Callable[[str], None] = print
) -> Path:
    """The folder of the embedded verifier named ``kind`` (tiny-qwen3 or tiny-kimi), with its default recipe."""
    if kind not in RECIPES:
        raise ValueError(f"unknown embedded verifier {kind!r}: choose one of {', '.join(RECIPES)}")
    return cached_tiny_verifier(cache_dir, RECIPES[kind](), log)


def _remove_abandoned_builds(folder: Path, held_key: str) -> None:
    """Delete temporary folders left by killed builds: ours (we hold its lock) and those of any other
    recipe whose lock nobody holds."""
    for stale in folder.glob(".*.*.tmp"):
        key = stale.name.split(".")[1]
        if key == held_key:
            shutil.rmtree(stale, ignore_errors=True)
            continue
        with open(folder / f"{key}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # being built right now
                continue
            shutil.rmtree(stale, ignore_errors=True)


def _build_in_child(out_dir: Path, recipe: TinyVerifierRecipe, log: Callable[[str], None]) -> None:
    """Run the build in a fresh interpreter whose OpenMP settings are fixed before torch loads."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(recipe.threads),
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "eagle_assets.tiny_verifier", str(out_dir), recipe.kind, json.dumps(asdict(recipe))]
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        lines = []
        for line in child.stdout:
            line = line.rstrip()
            lines.append(line)
            if line.startswith("tiny verifier:"):
                log(line)
    if child.returncode != 0:
        tail = "\n".join(lines[-20:])
        raise RuntimeError(f"building the tiny verifier failed (exit {child.returncode}):\n{tail}")

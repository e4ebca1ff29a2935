"""Run import-linter over the package as it is installed.

plugins/ and resources/ live at the repository's top level and are mapped into ``eagle_assets`` by
setuptools' ``package-dir``; import-linter reads a package's folder on disk and would not see them.
This copies the installed view into a temporary folder (import-linter does not follow symlinked
folders) and runs ``lint-imports`` on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAPPED = {"plugins": REPO / "plugins", "resources": REPO / "resources"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="eagle-assets-imports-") as tmp:
        package = Path(tmp) / "eagle_assets"
        python_only = shutil.ignore_patterns("__pycache__", "*.pyc", "data")
        shutil.copytree(REPO / "eagle_assets", package, ignore=python_only)
        for name, folder in MAPPED.items():
            shutil.copytree(folder, package / name, ignore=python_only)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")])}
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([str(lint), str(REPO / "pyproject.toml"), *sys.argv[1:]], env=env, cwd=tmp).returncode


if __name__ == "__main__":
    sys.exit(main())

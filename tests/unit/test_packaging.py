"""The wheel ships every folder of the package: pyproject.toml lists its packages by hand (plugins/ and
resources/ are mapped into eagle_assets), so a new folder must be added there or the installed package
lacks it while the source checkout works."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def folders_as_packages(package_dir: dict[str, str]) -> set[str]:
    """The dotted name each folder under the mapped roots has once installed (``__pycache__`` aside)."""
    names = set()
    for package, folder in package_dir.items():
        root = REPO / folder
        for path in [root, *root.rglob("*")]:
            if path.is_dir() and "__pycache__" not in path.parts:
                relative = path.relative_to(root).parts
                names.add(".".join((package, *relative)))
    return names


def test_every_package_folder_is_listed_in_pyproject():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    missing = folders_as_packages(setuptools["package-dir"]) - listed
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"

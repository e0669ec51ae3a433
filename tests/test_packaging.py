"""Packaging metadata: the package ships its py.typed marker (PEP 561), so that type checkers
use its annotations, and declares where it lives, its license and the Pythons it supports."""

import configparser
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def lines(value: str) -> list[str]:
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


def test_zarr_is_bounded_by_the_releases_the_suite_runs_against():
    """streamacc wraps zarr's stores, whose methods a zarr release may add (tests/test_wrappers.py): the
    requirement names the last release the suite ran against, and this run's zarr is within it."""
    import zarr
    from packaging.requirements import Requirement
    from packaging.version import Version

    (requirement,) = [Requirement(r) for r in lines(setup_cfg()["options"]["install_requires"]) if r.startswith("zarr")]
    assert any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier), requirement
    assert Version(zarr.__version__) in requirement.specifier, (zarr.__version__, str(requirement))


def test_py_typed_is_shipped():
    config = setup_cfg()
    assert (ROOT / "streamacc" / "py.typed").is_file()
    assert "py.typed" in config["options.package_data"]["streamacc"].split()


def test_metadata_names_urls_license_and_pythons():
    metadata = setup_cfg()["metadata"]
    urls = dict(line.split(" = ", 1) for line in lines(metadata["project_urls"]))
    assert set(urls) >= {"Source", "Issues"} and all(u.startswith("https://") for u in urls.values())
    assert metadata["license_expression"] == "Apache-2.0"  # SPDX (PEP 639); license classifiers are deprecated
    classifiers = lines(metadata["classifiers"])
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)


WINGS = sorted(
    ".".join(init.relative_to(ROOT).parts[:-1]) for init in (ROOT / "streamacc").rglob("__init__.py")
)  # every package and room


@pytest.mark.parametrize("wing", WINGS)
def test_every_name_a_wing_exports_resolves(wing):
    """Each name in a wing's ``__all__`` (re-exported lazily) is defined, and ``dir()`` lists it."""
    module = importlib.import_module(wing)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        module.nonexistent  # noqa: B018


def test_a_wing_imports_none_of_its_modules_until_one_of_its_names_is_asked_for():
    """Every package's face is lazy (``streamacc._lazy``): importing every wing imports none of their modules, and a
    name asked for imports its own module and what that imports, not the rest of its wing (nor Zarr, here)."""
    code = f"""
import json, sys
import {", ".join(WINGS)}
print(json.dumps(sorted(m for m in sys.modules if m.startswith("streamacc.") and m not in {WINGS!r})))
from streamacc.store import BOOKKEEPING, LEASE_KEY
print(json.dumps(sorted(m for m in sys.modules if m.startswith("streamacc.") and m not in {WINGS!r})))
print(json.dumps("zarr" in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    wings, named, zarr = map(json.loads, proc.stdout.splitlines())
    assert wings == ["streamacc._lazy", "streamacc._version", "streamacc.errors"]
    assert set(named) - set(wings) == {"streamacc.store._target"} and zarr is False


def test_a_lazy_export_is_listed_once_as_an_import_type_checkers_read(tmp_path):
    """A package's exports are the imports of its ``if TYPE_CHECKING:`` block, and nothing else: a name
    listed there is exported (and resolves, above), and a plain import there is refused, not ignored."""
    from streamacc.testing import listed_exports

    assert listed_exports(str(ROOT / "streamacc" / "__init__.py"))["write"] == ".run"
    for init in (ROOT / "streamacc").rglob("__init__.py"):
        assert "_EXPORTS" not in init.read_text(), init  # no second list beside the imports
    bad = tmp_path / "__init__.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n")
    with pytest.raises(ImportError, match=r"__init__.py:3: a lazy export is `from .module import N as N`"):
        listed_exports(str(bad))


def test_dir_of_streamacc_is_its_public_names():
    import streamacc

    assert dir(streamacc) == sorted(streamacc.__all__)
    assert not {"TYPE_CHECKING", "annotations", "lazy_exports"} & set(dir(streamacc))
    assert all(getattr(streamacc, name) is not None for name in streamacc.__all__)  # each still imports


DEVELOPERS_EXTRAS = {"test", "bench", "docs"}
"""Extras for working on streamacc, not for using it."""


def test_getting_started_names_every_extra_a_user_installs():
    extras = set(setup_cfg()["options.extras_require"]) - DEVELOPERS_EXTRAS
    page = (ROOT / "docs" / "getting-started.md").read_text()
    said = " ".join(page[page.index("The core (`pip install .`)") : page.index("## The first write")].split())
    assert extras >= {"xarray", "plot", "s3", "dist", "icechunk", "mcmc", "arviz"}
    assert sorted(e for e in extras if f"`{e}` (" not in said) == []

"""Packaging metadata: the package ships its py.typed marker (PEP 561), so that type checkers
use its annotations, and declares where it lives, its license and the Pythons it supports."""

import configparser
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def lines(value: str) -> list[str]:
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


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


@pytest.mark.parametrize("wing", ["streamacc", "streamacc.engine", "streamacc.store", "streamacc.run", "streamacc.cli"])
def test_every_name_a_wing_exports_resolves(wing):
    """Each name in a wing's ``__all__`` (re-exported lazily) is defined, and ``dir()`` lists it."""
    module = importlib.import_module(wing)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        module.nonexistent  # noqa: B018

"""The test install: .ci/run runs the README's command, and the pinned S3 stack is consistent."""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"--quiet", "-q", "--disable-pip-version-check"}


def readme_test_commands() -> list[list[str]]:
    match = re.search(r"Run the tests[^\n]*:\s*```\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
    assert match, "README.md has no 'Run the tests:' block"
    return [shlex.split(part) for part in match.group(1).split("&&")]


def ci_commands() -> list[list[str]]:
    commands = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] not in ("set", "cd"):
            commands.append(words)
    return commands


def normalised(words: list[str]) -> list[str]:
    """``python -m pip ... --quiet`` and ``pip ...`` are the same command."""
    if words[:2] == ["python", "-m"]:
        words = words[2:]
    return [word for word in words if word not in QUIET]


def test_ci_runs_exactly_the_readme_test_command():
    assert [normalised(c) for c in ci_commands()] == [normalised(c) for c in readme_test_commands()]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found[canonicalize_name(name)] = version
    return found


def test_the_pinned_s3_stack_satisfies_its_own_requirements():
    pinned = pins()
    checked = 0
    for name, version in pinned.items():
        try:
            if metadata.version(name) != version:
                continue  # another version installed here: its metadata says nothing about the pin
        except metadata.PackageNotFoundError:
            continue
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            other = canonicalize_name(requirement.name)
            if other in pinned and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
                assert requirement.specifier.contains(pinned[other], prereleases=True), f"{name}: {text}"
                checked += 1
    assert checked >= 4  # botocore under aiobotocore and boto3, s3transfer under boto3, fsspec under s3fs...


def test_the_pins_satisfy_the_extras():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    pinned = pins()
    for extra, lines in config["options.extras_require"].items():
        for text in filter(None, (line.strip() for line in lines.splitlines())):
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) in pinned:
                assert requirement.specifier.contains(pinned[canonicalize_name(requirement.name)]), f"[{extra}] {text}"


TOOL_EXTRAS = ("test", "docs", "bench")
"""The extras whose packages are tools (pinned); their ``streamacc[...]`` lines name the libraries, which float."""


def test_every_test_and_docs_tool_is_pinned():
    """pytest 9.2.0, released after the constraints were written, failed six tests on a fresh install: every tool
    the test, docs and bench extras name is pinned, so that CI installs exactly what the suite last passed with."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    pinned = pins()
    extras = config["options.extras_require"]
    named = {
        canonicalize_name(Requirement(text).name)
        for extra in TOOL_EXTRAS
        for text in filter(None, (line.strip() for line in extras[extra].splitlines()))
        if Requirement(text).name != "streamacc"
    }
    libraries = {"matplotlib", "dask", "xarray"}  # the bench extra's libraries, which the other extras float
    assert named - libraries <= set(pinned), f"pin in .ci/constraints.txt: {sorted(named - libraries - set(pinned))}"
    assert {"pytest", "pytest-xdist", "mkdocs", "mkdocs-material", "mkdocstrings-python", "ruff", "mypy"} <= named


@pytest.mark.slow
def test_mypy_finds_the_installed_package_and_the_carry_write_returns(tmp_path):
    """From outside the checkout, as a user's project type-checks against the README's install."""
    (tmp_path / "probe.py").write_text(
        "import numpy as np\nimport streamacc\n\n\n"
        "def step(c: np.float64, x: object) -> tuple[np.float64, np.float64]:\n    return c, c\n\n\n"
        'reveal_type(streamacc.write("o.zarr", step, np.float64(1.0), length=10))\n'
    )
    (tmp_path / "mypy.ini").write_text(  # analyse streamacc, not all of JAX
        "[mypy]\nfollow_imports = skip\ncache_dir = /dev/null\n[mypy-streamacc.*]\nfollow_imports = silent\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "probe.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    assert 'Revealed type is "numpy.float64"' in proc.stdout


def test_the_version_is_the_changelogs_latest_and_writes_the_format_the_format_page_names():
    """The package says the release of the changelog's top section, and the format page's "written by streamacc X
    and later" holds for it (1.0.0 said so of format 3, which it never wrote)."""
    from packaging.version import Version

    import streamacc

    top = re.search(r"^## (\S+)", (ROOT / "docs" / "changelog.md").read_text(), re.M)
    assert top is not None and top[1] == streamacc.__version__
    since = re.search(r"written by streamacc (\S+) and later", (ROOT / "docs" / "reference" / "format.md").read_text())
    assert since is not None and Version(streamacc.__version__) >= Version(since[1])

"""The code base stays ruff clean and mypy --strict clean, and its wings and rooms keep their layers (the same
checks CI runs)."""

import ast
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed with the test extras")
def test_ruff_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "streamacc", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def mypy(*files: Path) -> subprocess.CompletedProcess:
    """``mypy`` run from the checkout with pyproject.toml's configuration, on ``files`` (by default what it names).

    Its cache lives outside the checkout, one per checkout, and is kept between runs: a run
    after a small change rechecks only what changed and what depends on it.
    """
    cache = Path(tempfile.gettempdir()) / f"streamacc-mypy-{zlib.crc32(str(ROOT).encode()):08x}"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_mypy_strict_clean():
    pytest.importorskip("mypy", reason="mypy is installed with the test extras")
    result = mypy()
    modules = len(list((ROOT / "streamacc").rglob("*.py")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"Success: no issues found in {modules} source files", result.stdout


def test_mypy_configuration_is_strict(tmp_path):
    """The configuration mypy runs with refuses an unannotated function and a wrong type from streamacc."""
    pytest.importorskip("mypy", reason="mypy is installed with the test extras")
    probe = tmp_path / "probe.py"
    probe.write_text("import streamacc\n\n\ndef untyped(x):\n    return x\n\n\nversion: int = streamacc.__version__\n")
    result = mypy(probe)
    assert result.returncode == 1, result.stdout + result.stderr
    # (the path before the name may be an earlier test's: mypy repeats a module's cached errors while it is unchanged)
    assert "probe.py:4: error: Function is missing a type annotation  [no-untyped-def]" in result.stdout
    wrong = 'Incompatible types in assignment (expression has type "str", variable has type "int")  [assignment]'
    assert f"probe.py:8: error: {wrong}" in result.stdout


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts from pyproject.toml, run on the package found under ``root``."""
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", script, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )


def test_import_contracts_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


VIOLATIONS = [
    ("engine/_layout.py", "from ..run import write", "streamacc.run", "Wings in layers"),
    ("store/_files.py", "from ..engine import Plan", "streamacc.engine", "Wings in layers"),
    ("run/read/_index.py", "from ..execute import LocalExecutor", "streamacc.run.execute", "Rooms of run in layers"),
    ("run/record/_manifest.py", "from ..output import Output", "streamacc.run.output", "Rooms of run in layers"),
    ("summaries/_pyramid.py", "import jax", "jax", "Store and summaries never import JAX"),
    ("engine/_layout.py", "import zarr", "zarr", "The engine is pure computation"),
    ("store/_codecs.py", "import jax", "jax", "Store and summaries never import JAX"),
]
"""One forbidden import per contract and more: (module, the line added, what it imports, the contract it breaks)."""


def test_import_contracts_catch_a_violation(tmp_path):
    """Each contract fails on a copy of the package with forbidden imports added, naming each one it forbids.

    One copy holds them all (one run of import-linter): each contract's report must name the import added
    against it, as the module importing what it may not.
    """
    shutil.copytree(ROOT / "streamacc", tmp_path / "streamacc", ignore=shutil.ignore_patterns("__pycache__"))
    for module, line, _, _ in VIOLATIONS:
        path = tmp_path / "streamacc" / module
        path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = {line.removesuffix(" BROKEN") for line in result.stdout.splitlines() if line.endswith(" BROKEN")}
    assert broken == {contract for *_, contract in VIOLATIONS}, result.stdout
    report = result.stdout.split("Broken contracts", 1)[1]
    sections = dict(re.findall(r"\n\n([^\n]+)\n-+\n(.*?)(?=\n\n[^\n]+\n-+\n|\Z)", report, re.S))
    for module, _, imported, contract in VIOLATIONS:
        importer = "streamacc." + module.removesuffix(".py").replace("/", ".")
        chain = rf"\n-\s+{re.escape(importer)} -> {re.escape(imported)} \(l\."
        assert re.search(chain, sections[contract]), (module, contract, sections[contract])


def private_reaches(package_root: Path) -> list[str]:
    """Each import of a private module (``_name``) of another package than the importer's, as 'file: module'.

    A wing or room re-exports what others use from its ``__init__``; the shared foundations
    beside ``streamacc/__init__.py`` (``_defaults``, ``_lazy``, ...) are everyone's.
    """
    found = []
    for path in sorted(package_root.rglob("*.py")):
        parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
        package = parts if parts[-1] == "__init__" else parts[:-1]
        package = [p for p in package if p != "__init__"]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            if target[0] != "streamacc":
                continue
            folder = package_root.parent.joinpath(*target)
            modules = [target] + [
                [*target, alias.name]
                for alias in node.names
                if (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
            ]
            for module in modules:
                if module[-1].startswith("_") and module[:-1] not in (package, ["streamacc"]):
                    found.append(f"{path.relative_to(package_root.parent)}: {'.'.join(module)}")
    return found


def test_no_module_reaches_into_another_packages_private_module():
    assert private_reaches(ROOT / "streamacc") == []


def test_a_reach_into_a_private_module_is_found(tmp_path):
    shutil.copytree(ROOT / "streamacc", tmp_path / "streamacc", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "streamacc" / "run" / "read" / "_overview.py"
    path.write_text(path.read_text() + "\nfrom ...summaries._pyramid import Rows  # noqa\n")
    assert private_reaches(tmp_path / "streamacc") == ["streamacc/run/read/_overview.py: streamacc.summaries._pyramid"]


PRIVATE_LIBRARY = re.compile(r"^\s*(?:from|import) (?:zarr|xarray)\.core\b", re.M)


def test_zarr_and_xarray_internals_are_imported_in_few_places_each_with_its_reason():
    """zarr's and xarray's private modules only where no public name serves: at most eight imports, each
    under a comment that says why."""
    found = []
    for path in sorted((ROOT / "streamacc").rglob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if PRIVATE_LIBRARY.match(line):
                found.append(f"{path.relative_to(ROOT)}:{number + 1}")
                assert lines[number - 1].lstrip().startswith("#"), f"{found[-1]}: say why no public name serves"
    assert 0 < len(found) <= 8, found

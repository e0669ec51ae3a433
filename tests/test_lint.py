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
    assert "Contracts: 5 kept, 0 broken." in result.stdout


VIOLATIONS = [
    ("engine/_plan.py", "from ..run import write", "streamacc.run", "Wings in layers"),
    ("store/_files.py", "from ..engine import Plan", "streamacc.engine", "Wings in layers"),
    ("run/_commit.py", "from ._execute import LocalExecutor", "streamacc.run._execute", "Run in layers"),
    ("run/_identity.py", "from ._commit import Output", "streamacc.run._commit", "Run in layers"),
    ("store/_fence.py", "from ._target import Target", "streamacc.store._target", "Store in layers"),
    ("summaries/_pyramid.py", "import jax", "jax", "Store, summaries and record never import JAX"),
    ("engine/_plan.py", "import zarr", "zarr", "The engine is pure computation"),
    ("store/_encoding.py", "import jax", "jax", "Store, summaries and record never import JAX"),
    ("record/_runidentity.py", "import jax", "jax", "Store, summaries and record never import JAX"),
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

    A wing or room re-exports what others use from its ``__init__`` (``streamacc.base``, the
    foundations, too); ``_version``, beside ``streamacc/__init__.py``, is everyone's.
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


def imports_of(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` (by dotted name) and the modules of the package it imports, anywhere in it: at
    the top, inside a function (an import put off until needed) or for type checking alone."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = parts[:-1]  # the package a relative import starts from
        imported = found.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                imported.add(module)
                imported.update(f"{module}.{alias.name}" for alias in node.names)  # ``from . import _x``
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    return {name: {m for m in imported if m in found and m != name} for name, imported in found.items()}


def test_no_two_modules_import_each_other():
    """The house has no circle of two modules, an import put off inside a function included: one of the two is
    below the other (a package's ``__init__`` and its modules aside: it re-exports them)."""
    graph = imports_of(ROOT / "streamacc")
    pairs = sorted(
        f"{a} <-> {b}" for a, found in graph.items() for b in found
        if a < b and a in graph.get(b, set()) and not (b.startswith(a + ".") or a.startswith(b + "."))
    )  # fmt: skip
    assert graph["streamacc.run._dask"] and pairs == [], pairs


LINES_AT_MOST = 500
"""The house's bound on a module's length."""
OVER_THE_BOUND = {"streamacc/record/_manifest.py"}
"""Modules known to be over it, each to be split by concept (the manifest's format, and two runs' identities
compared: ``identity_differences`` to ``require_same_run``)."""


def test_no_module_is_over_the_houses_bound():
    over = {}
    for path in sorted((ROOT / "streamacc").rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > LINES_AT_MOST:
            over[str(path.relative_to(ROOT))] = lines
    assert set(over) <= OVER_THE_BOUND, over


def test_no_module_reaches_into_another_packages_private_module():
    assert private_reaches(ROOT / "streamacc") == []


def test_a_reach_into_a_private_module_is_found(tmp_path):
    shutil.copytree(ROOT / "streamacc", tmp_path / "streamacc", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "streamacc" / "read" / "_overview.py"
    path.write_text(path.read_text() + "\nfrom ..summaries._pyramid import Rows  # noqa\n")
    assert private_reaches(tmp_path / "streamacc") == ["streamacc/read/_overview.py: streamacc.summaries._pyramid"]


def private_module(dotted: str, package_root: Path) -> str | None:
    """The private module (``_name``) of streamacc that the dotted name ``dotted`` reaches, or None."""
    parts = dotted.split(".")
    if parts[0] != "streamacc":
        return None
    folder = package_root
    for depth, part in enumerate(parts[1:], 2):
        is_module = (folder / f"{part}.py").is_file() or (folder / part / "__init__.py").is_file()
        if not is_module:
            return None
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:depth])
        folder = folder / part
    return None


DOTTED = re.compile(r"streamacc(?:\.\w+)+")


def reaches_from_tests(folder: Path, package_root: Path) -> list[str]:
    """Each reach of a file under ``folder`` into a private streamacc module, as 'file:line: module'.

    An import of one (``import streamacc.store._chunks``, ``from streamacc.store import
    _files``), a dotted name given to a call (``import_module("streamacc.engine._scan")``,
    ``monkeypatch.setattr("streamacc.store._chunks.write_new", ...)``), and an attribute of a
    streamacc module the file imported (``streamacc.store._target``, ``run._commit`` after
    ``import streamacc.run as run``).
    """
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        bound: dict[str, str] = {}  # a name this file binds to a streamacc module -> the module
        reaches: list[tuple[int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    reaches.append((node.lineno, alias.name))
                    if alias.name.split(".")[0] == "streamacc":
                        bound[alias.asname or "streamacc"] = alias.name if alias.asname else "streamacc"
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                reaches.append((node.lineno, node.module))
                for alias in node.names:
                    reaches.append((node.lineno, f"{node.module}.{alias.name}"))
                    if node.module.split(".")[0] == "streamacc":
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Call) and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and DOTTED.fullmatch(first.value):
                    reaches.append((node.lineno, first.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                chain, inner = [node.attr], node.value
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in bound:
                    reaches.append((node.lineno, ".".join([bound[inner.id], *reversed(chain)])))
        for line, dotted in reaches:
            module = private_module(dotted, package_root)
            if module is not None:
                found.append(f"{path.relative_to(folder.parent)}:{line}: {module}")
    return sorted(set(found), key=lambda entry: (entry.split(":")[0], int(entry.split(":")[1]), entry))


def test_no_test_imports_a_private_streamacc_module():
    """Tests reach streamacc through the wings' re-exports and ``streamacc.testing``'s seams, never a
    ``_module``: a private module may change at any time, and its re-exports say what may be used."""
    assert reaches_from_tests(ROOT / "tests", ROOT / "streamacc") == []


def test_a_test_reaching_into_a_private_module_is_found(tmp_path):
    probe = tmp_path / "tests" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(
        "import importlib\n"
        "import streamacc.store\n"
        "import streamacc.store._chunks\n"
        "import streamacc.run as run\n"
        "from streamacc.store import _files, open_target\n"
        "from streamacc.cli._expr import parse_int\n"
        "from streamacc.engine import make_plan\n"
        "from streamacc import __version__, errors\n"
        "importlib.import_module('streamacc.engine._scan')\n"
        "monkeypatch.setattr('streamacc.store._target.atomic_write', None)\n"
        "streamacc.store._target.atomic_write = None\n"
        "run._commit.PUBLISH_SECONDS = 0.0\n"
        "self._store, errors.InputError, streamacc.store.open_target\n"
    )
    assert reaches_from_tests(tmp_path / "tests", ROOT / "streamacc") == [
        "tests/test_probe.py:3: streamacc.store._chunks",
        "tests/test_probe.py:5: streamacc.store._files",
        "tests/test_probe.py:6: streamacc.cli._expr",
        "tests/test_probe.py:9: streamacc.engine._scan",
        "tests/test_probe.py:10: streamacc.store._target",
        "tests/test_probe.py:11: streamacc.store._target",
        "tests/test_probe.py:12: streamacc.run._commit",
    ]


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

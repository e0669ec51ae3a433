"""The code base stays ruff clean, and its wings keep their layers (the same checks CI runs)."""

import shutil
import subprocess
import sys
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
    assert "Contracts: 3 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("engine/_layout.py", "from ..run import write", "Wings in layers"),
        ("store/_files.py", "from ..engine import Plan", "Wings in layers"),
        ("engine/_layout.py", "import zarr", "The engine is pure computation"),
        ("store/_codecs.py", "import jax", "The store knows bytes, never JAX"),
    ],
)
def test_import_contracts_catch_a_violation(tmp_path, module, line, contract):
    """Each contract fails on a copy of the package with one forbidden import added."""
    shutil.copytree(ROOT / "streamacc", tmp_path / "streamacc", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "streamacc" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [line for line in result.stdout.splitlines() if line.endswith(" BROKEN")]
    assert any(b.startswith(contract) for b in broken), result.stdout

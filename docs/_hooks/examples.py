"""Run the examples of a Markdown page, as the site's build does, and render what they printed.

A page's fenced ``python`` and ``console`` blocks run in order, in a fresh temporary
folder of their own (so paths such as ``out.zarr`` are relative), sharing one namespace,
as a reader who pastes the page into one session would. JAX starts each page with
``jax_enable_x64`` off, as in a new process: a page that needs 64 bits says so.

- ``python``: executed; what it prints (and any warning it raises) is shown below it.
- ``console``: each ``$ streamacc ...`` line runs ``streamacc.cli.main`` in this process
  (no new interpreter per command) and its stdout and stderr are shown after it. A
  command expected to fail ends in a comment ``# exits N``; any other status fails the
  build. A console block holds commands only: their output comes from the run.
- A block preceded by ``<!-- not run: REASON -->`` is not run, and the page says so with
  the reason. Any other language (``text``, ``json``) is a display, not an example.
- A block preceded by ``<!-- needs: EXTRA[, EXTRA] -->`` needs those extras of the
  package; the others need a plain ``pip install .`` and are run so too by the tests
  (``run_page(..., plain=True)`` runs those alone).

A block that raises, or a command that exits with another status than announced, fails
the build with the page, the line and the error. Images a page shows by a bare file
name (``![...](name.png)``) are taken from the folder its examples ran in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)(?P<rest>[^\n]*)\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->[ \t]*\n[ \t]*\Z")
NEEDS = re.compile(r"<!--\s*needs:\s*(?P<extras>[\w, -]+?)\s*-->[ \t]*\n[ \t]*\Z")
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<name>[\w.-]+\.(?:png|svg))\)")
EXITS = re.compile(r"#.*\bexits (?P<code>\d+)\s*$")
RUN = ("python", "console")
REFUSED = ("py", "pycon", "bash", "sh", "shell", "zsh")


class ExampleError(Exception):
    """An example failed: the message names the page, the line and what went wrong."""


@dataclasses.dataclass
class Block:
    """One fenced block: where it is, its language and text, and what running it gave."""

    start: int
    end: int
    line: int
    indent: str
    fence: str
    lang: str
    rest: str
    body: str
    not_run: str | None = None
    needs: tuple[str, ...] = ()
    output: str = ""


@dataclasses.dataclass
class PageRun:
    """What running a page gave: its blocks, and the images its examples drew (name -> file)."""

    blocks: list[Block]
    images: dict[str, Path]


def find_blocks(text: str, where: str) -> list[Block]:
    """The fenced blocks of ``text``, with the reason of each that is not run."""
    blocks = []
    for m in FENCE.finditer(text):
        lang = m["lang"].lower()
        body = "\n".join(line[len(m["indent"]) :] for line in m["body"].splitlines())
        block = Block(m.start(), m.end(), text.count("\n", 0, m.start()) + 1, m["indent"], m["fence"], lang,
                      m["rest"], body)  # fmt: skip
        before = text[: m.start()]
        marked = NOT_RUN.search(before)
        if marked:
            if not marked["reason"]:
                raise ExampleError(f"{where}:{block.line}: a block not run must say why: <!-- not run: REASON -->")
            block.not_run = marked["reason"]
        needs = NEEDS.search(before)
        if needs:
            block.needs = tuple(extra.strip() for extra in needs["extras"].split(","))
        if lang in REFUSED and block.not_run is None:
            raise ExampleError(
                f"{where}:{block.line}: a ```{lang} block is neither run nor marked; write Python as ```python, "
                "commands as ```console with '$ ' prompts, or mark it <!-- not run: REASON -->"
            )
        blocks.append(block)
    return blocks


@contextlib.contextmanager
def _in_folder(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def fresh_jax() -> Iterator[None]:
    """x64 off, as in a new process, for the examples inside; the caller's setting afterwards.

    Examples (and the command line, which owns its process) turn x64 on; the process that
    runs them, the site's build or the test suite, keeps its own setting.
    """
    jax = sys.modules.get("jax")
    before = None if jax is None else bool(jax.config.jax_enable_x64)
    if jax is not None:
        jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        if before is not None:
            jax.config.update("jax_enable_x64", before)


def _run_python(block: Block, namespace: dict, where: str) -> str:
    code = compile(block.body, f"{where}:{block.line}", "exec")
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        try:
            exec(code, namespace)
        except BaseException as exc:  # a KeyboardInterrupt from an example is a failure too
            tail = "".join(traceback.format_exception(exc)[-6:])
            raise ExampleError(f"{where}:{block.line}: the example raised\n{tail}") from None
    notes = [f"{w.category.__name__}: {w.message}" for w in caught if _shown(w)]
    return out.getvalue() + "".join(note + "\n" for note in notes)


def _shown(w: warnings.WarningMessage) -> bool:
    """Warnings a reader would see: those Python shows by default (streamacc's own among them), less the
    libraries' FutureWarnings about their own next releases."""
    hidden = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)
    return not issubclass(w.category, hidden)


def _commands(body: str, where: str, line: int) -> list[tuple[str, int]]:
    """The ``$`` commands of a console block (a trailing backslash continues one), with their first lines."""
    commands: list[tuple[str, int]] = []
    pending = None
    for i, text in enumerate(body.splitlines()):
        if pending is not None:
            pending = (pending[0] + " " + text.strip().removesuffix("\\"), pending[1])
        elif text.startswith("$ "):
            pending = (text[2:].strip().removesuffix("\\"), line + 1 + i)
        elif text.strip():
            raise ExampleError(
                f"{where}:{line + 1 + i}: a console block holds '$ ' commands only (their output is added when "
                f"the site is built), got {text!r}"
            )
        if pending is not None and not text.rstrip().endswith("\\"):
            commands.append(pending)
            pending = None
    return commands


def _run_console(block: Block, where: str) -> str:
    from streamacc.cli import main

    shown = []
    for command, line in _commands(block.body, where, block.line):
        expected = EXITS.search(command)
        words = shlex.split(command, comments=True)
        if not words or words[0] != "streamacc":
            raise ExampleError(
                f"{where}:{line}: only streamacc commands run here, got {command!r}; mark the block "
                "<!-- not run: REASON --> if it must show another"
            )
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(words[1:])
        want = int(expected["code"]) if expected else 0
        if code != want:
            raise ExampleError(f"{where}:{line}: {command!r} exited {code}, not {want}:\n{out.getvalue()}")
        shown.append(f"$ {command}\n{out.getvalue()}")
    return "".join(shown)


def run_page(text: str, where: str, folder: Path, *, plain: bool = False) -> PageRun:
    """Run every example of ``text`` (a page, named ``where`` in errors) in ``folder``; with ``plain``,
    only those that need no extra (the images the others draw are then not looked for)."""
    blocks = find_blocks(text, where)
    namespace: dict = {"__name__": "__main__"}
    os.environ.setdefault("MPLBACKEND", "Agg")
    with fresh_jax(), _in_folder(folder):
        for block in blocks:
            if block.not_run is not None or block.lang not in RUN or (plain and block.needs):
                continue
            if block.lang == "python":
                block.output = _run_python(block, namespace, where)
            else:
                block.output = _run_console(block, where)
    images: dict[str, Path] = {}
    for m in [] if plain else IMAGE.finditer(text):
        path = folder / m["name"]
        if not path.is_file():
            raise ExampleError(f"{where}: the page shows {m['name']}, which none of its examples drew")
        images[m["name"]] = path
    return PageRun(blocks, images)


def render(text: str, run: PageRun) -> str:
    """``text`` with each console block replaced by its transcript, each Python block followed by what it
    printed, and each block not run announced with its reason."""
    out, pos = [], 0
    for block in run.blocks:
        out.append(text[pos : block.start])
        pos = block.end
        source = text[block.start : block.end]
        if block.not_run is not None:
            out.append(f'<p class="not-run">Not run when this site was built: {block.not_run}.</p>\n\n')
            out.append(source)
        elif block.lang == "console":
            transcript = block.output.rstrip("\n").replace("\n", "\n" + block.indent)
            out.append(f"{block.indent}{block.fence}console{block.rest}\n{block.indent}{transcript}\n"
                       f"{block.indent}{block.fence}")  # fmt: skip
        else:
            out.append(source)
            if block.output.strip():
                shown = block.output.rstrip("\n").replace("\n", "\n" + block.indent)
                out.append(f'\n\n{block.indent}{block.fence}text title="Output"\n{block.indent}{shown}\n'
                           f"{block.indent}{block.fence}")  # fmt: skip
    out.append(text[pos:])
    return "".join(out)


def run_text(text: str, where: str, keep: Path) -> PageRun:
    """Run the examples of ``text`` in a temporary folder of their own; its images are copied into ``keep``."""
    with tempfile.TemporaryDirectory(prefix="streamacc-docs-") as tmp:
        run = run_page(text, where, Path(tmp))
        keep.mkdir(parents=True, exist_ok=True)
        for name, path in list(run.images.items()):
            shutil.copy(path, keep / name)
            run.images[name] = keep / name
    return run

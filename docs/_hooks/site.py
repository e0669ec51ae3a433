"""mkdocs hooks: the build runs every example the site shows and generates what must not drift from the code.

- Every page's ``python`` and ``console`` examples run (``examples.py``), and so do the
  README's; what they print is shown under them and the pictures they draw are the
  pictures on the page. A failing example fails the build.
- The API reference must document every public name with every parameter, and its
  docstring examples run (``api.py``).
- ``<!-- cli-reference -->`` and ``<!-- cli-recipes -->`` become the command line's
  reference, generated from its own parser (``cli_reference.py``).
- ``<!-- benchmark: NAME -->`` becomes the tables and plots of one benchmark, generated
  from the JSON the benchmark scripts wrote (``benchmarks.py``); ``<!-- benchmark-to-come:
  NAME -->`` the same, or a line saying that no run is stored yet, for a benchmark that
  needs a machine the results have not seen (an accelerator).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import api
import cli_reference
import examples
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

import benchmarks

ROOT = Path(__file__).resolve().parents[2]
CHECKED_OUTSIDE = ["README.md"]
"""Documents outside the site whose examples run with it."""
API_PAGES = "reference/api/"
PLACEHOLDER = re.compile(
    r"^<!--[ \t]*(?P<what>cli-reference|cli-recipes|benchmark(?P<later>-to-come)?:[ \t]*(?P<name>[\w-]+))[ \t]*-->"
    r"[ \t]*$",
    re.M,
)

_state: dict[str, Any] = {}


def _fail(exc: Exception) -> PluginError:
    return PluginError(str(exc))


def on_pre_build(config: Any) -> None:
    # The checkout's own package, whether or not the Python running mkdocs has it installed: the examples (and the
    # processes they start) run the code beside these pages. Here, not at import: mkdocs restores sys.path after
    # loading a hook.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    _state.clear()
    _state["work"] = Path(tempfile.mkdtemp(prefix="streamacc-docs-build-"))
    _state["runs"] = {}
    _state["timings"] = []


def _nav_order(nav: Any) -> list[str]:
    """The pages of the navigation, in its order (the reference's examples run in the order a reader meets them)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_order(value)]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_order(item)]
    return []


def on_files(files: Files, config: Any) -> Files:
    """Run every example before any page is rendered, and add the pictures they drew to the site."""
    work: Path = _state["work"]
    pages = sorted(files.documentation_pages(), key=lambda f: f.src_uri)
    try:
        for name in CHECKED_OUTSIDE:
            started = time.process_time()
            examples.run_text((ROOT / name).read_text(), name, work / "outside")
            _state["timings"].append((name, time.process_time() - started))
        for file in pages:
            if file.src_uri.startswith(API_PAGES):
                continue
            started = time.process_time()
            run = examples.run_text(file.content_string, f"docs/{file.src_uri}", work / "images" / file.src_uri)
            _state["runs"][file.src_uri] = run
            folder = file.src_uri.rpartition("/")[0]
            for image, path in run.images.items():
                uri = f"{folder}/{image}" if folder else image
                if files.get_file_from_path(uri) is not None:
                    raise examples.ExampleError(
                        f"docs/{file.src_uri} shows {image}, which another page of docs/{folder} draws too; "
                        "give the files different names"
                    )
                files.append(File.generated(config, uri, abs_src_path=str(path)))
            _state["timings"].append((file.src_uri, time.process_time() - started))
        order = _nav_order(config["nav"])
        api_pages = sorted((f for f in pages if f.src_uri.startswith(API_PAGES)), key=lambda f: order.index(f.src_uri))
        reference = [(f"docs/{f.src_uri}", f.content_string) for f in api_pages]
        objects = api.check_reference(reference)
        started = time.process_time()
        folder = work / "api"
        folder.mkdir()
        _state["doctests"] = api.run_doctests(objects, folder)
        _state["timings"].append(("docstring examples", time.process_time() - started))
        for image, path in benchmarks.draw_all(work / "benchmarks").items():
            files.append(File.generated(config, f"benchmarks/{image}", abs_src_path=str(path)))
    except examples.ExampleError as exc:
        raise _fail(exc) from None
    return files


def _placeholder(m: re.Match[str]) -> str:
    if m["what"] == "cli-reference":
        return cli_reference.render_commands()
    if m["what"] == "cli-recipes":
        return cli_reference.render_recipes()
    return benchmarks.render(m["name"], missing_ok=bool(m["later"]))


POWER = re.compile(r"(?<=\d)\*\*(?=[\d(-])")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)


def escape_powers(markdown: str) -> str:
    """``2**32`` in prose is a number, not the start of bold text: escape the stars outside code."""
    out, pos = [], 0
    for m in examples.FENCE.finditer(markdown):
        out.append(_escape_prose(markdown[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_prose(markdown[pos:]))
    return "".join(out)


def _escape_prose(text: str) -> str:
    out, pos = [], 0
    for m in CODE_SPAN.finditer(text):
        out.append(POWER.sub(r"\*\*", text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(POWER.sub(r"\*\*", text[pos:]))
    return "".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    run = _state["runs"].get(page.file.src_uri)
    if run is not None:
        markdown = examples.render(markdown, run)
    try:
        markdown = PLACEHOLDER.sub(_placeholder, markdown)
    except (KeyError, examples.ExampleError) as exc:
        raise PluginError(f"docs/{page.file.src_uri}: {exc}") from None
    return escape_powers(markdown)


def on_post_build(config: Any) -> None:
    timings = _state.get("timings", [])
    total = sum(seconds for _, seconds in timings)
    slowest = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(timings, key=lambda t: -t[1])[:3])
    print(f"streamacc docs: examples and {_state.get('doctests', 0)} docstring examples ran in {total:.1f} CPU-s of "
          f"this process (slowest: {slowest})", file=sys.stderr)  # fmt: skip
    shutil.rmtree(_state.get("work", ""), ignore_errors=True)

"""The documentation builds strictly, runs every example it shows, and documents every public name.

The site's build (``mkdocs build --strict``) runs every example on it and in the README,
runs the docstrings' examples, checks that the API reference describes every public
name and parameter, and generates the command-line reference from the parser; a broken
link, a renamed function or a failing example fails it. The other tests here hold the
build's own checks to what they promise, cheaply, without building.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "_hooks"
sys.path.insert(0, str(HOOKS))

import api  # noqa: E402
import cli_reference  # noqa: E402
import examples  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly from this checkout (every example run), once for the tests that read it."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1", "JAX_ENABLE_X64": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    return out


def text_of(page: Path) -> str:
    return re.sub(r"<[^>]+>", " ", page.read_text())


@pytest.mark.slow
def test_every_page_is_built_with_its_examples_run(site):
    import yaml

    def pages(nav):
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [page for item in items for page in pages(item)]

    nav = pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert len(nav) >= 25
    for page in nav:
        built = site / page.removesuffix(".md").removesuffix("index").strip("/") / "index.html"
        assert built.is_file(), page
    getting_started = (site / "getting-started" / "index.html").read_text()
    assert 'title="Output"' in getting_started or "Output" in getting_started  # what the examples printed
    assert (site / "gp-x.png").stat().st_size > 10_000  # the picture getting-started.md's command drew
    storage = text_of(site / "guide" / "object-storage" / "index.html")
    assert "Not run when this site was built: needs an S3 bucket" in storage


@pytest.mark.slow
def test_the_api_reference_shows_every_public_name_and_parameter(site):
    import inspect

    import streamacc

    pages = " ".join(text_of(p) for p in (site / "reference" / "api").rglob("index.html"))
    for name in streamacc.__all__:
        if name in ("__version__", "errors"):
            continue
        assert name in pages, name
        obj = getattr(streamacc, name)
        if inspect.isfunction(obj):
            for parameter in inspect.signature(obj).parameters:
                assert parameter in pages, (name, parameter)
    for name in streamacc.errors.__all__:
        assert name in pages, name


@pytest.mark.slow
def test_the_cli_reference_lists_every_option_of_every_subcommand(site):
    from streamacc.cli import build_parser

    page = (site / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, subparser in sub.choices.items():
        assert f"streamacc {name}" in page
        for action in subparser._actions:
            for option in action.option_strings:
                assert option in page, (name, option)


@pytest.mark.slow
def test_the_site_works_offline_and_has_search(site):
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert not re.search(r"<(?:script|link)[^>]+(?:src|href)=\"https?://", html), page
        assert "fonts.googleapis" not in html, page
    index = (site / "search" / "search_index.json").read_text()
    assert "iter_blocks" in index and "Resume, extend, overwrite" in index


@pytest.mark.slow
def test_benchmark_pages_say_how_each_figure_was_made(site):
    page = text_of(site / "benchmarks" / "writing" / "index.html").replace("&#39;", "'")
    assert page.count("Reproduce:") >= 8 and page.count("Machine:") == page.count("Reproduce:")
    assert page.count("Load:") == page.count("Reproduce:") and page.count("Versions:") == page.count("Reproduce:")
    assert "python -m pytest benchmarks/test_scripts.py::test_headline_floor --size '2**32'" in page
    (plot,) = (site / "benchmarks").glob("suite-*-rss.png")
    assert plot.stat().st_size > 10_000


# --- the build's checks, without building ------------------------------------------------------------------------


def test_an_example_that_fails_fails_with_its_page_and_line(tmp_path):
    page = "Text.\n\n```python\nx = 1\n```\n\nMore.\n\n```python\nraise ValueError('broken example')\n```\n"
    with pytest.raises(examples.ExampleError, match=r"page\.md:9: the example raised(?s:.*)broken example"):
        examples.run_page(page, "page.md", tmp_path)


def test_what_an_example_prints_is_shown_under_it(tmp_path):
    page = "```python\nprint(6 * 7)\n```\n"
    run = examples.run_page(page, "page.md", tmp_path)
    assert examples.render(page, run) == page.rstrip("\n") + '\n\n```text title="Output"\n42\n```\n'


def test_a_command_that_exits_otherwise_than_announced_fails(tmp_path):
    ok = "```console\n$ streamacc recipes\n$ streamacc write out.zarr --size two   # exits 2\n```\n"
    run = examples.run_page(ok, "page.md", tmp_path)
    transcript = examples.render(ok, run)
    assert "gp: geometric progression" in transcript and "streamacc: error:" in transcript
    with pytest.raises(examples.ExampleError, match=r"exited 2, not 0"):
        examples.run_page("```console\n$ streamacc write out.zarr --size two\n```\n", "page.md", tmp_path)
    with pytest.raises(examples.ExampleError, match=r"only streamacc commands run here"):
        examples.run_page("```console\n$ rm -rf out.zarr\n```\n", "page.md", tmp_path)


def test_a_block_is_run_or_says_why_not(tmp_path):
    with pytest.raises(examples.ExampleError, match=r"neither run nor marked"):
        examples.find_blocks("```bash\nls\n```\n", "page.md")
    with pytest.raises(examples.ExampleError, match=r"must say why"):
        examples.find_blocks("<!-- not run: -->\n```python\nx = 1\n```\n", "page.md")
    page = "<!-- not run: needs a bucket -->\n```python\nraise SystemExit\n```\n"
    run = examples.run_page(page, "page.md", tmp_path)
    assert "Not run when this site was built: needs a bucket." in examples.render(page, run)


def test_examples_start_as_a_new_process_and_leave_the_callers_jax_as_it_was(tmp_path):
    import jax

    assert jax.config.jax_enable_x64  # as conftest.py sets it
    page = (
        "```python\nimport jax\nprint(jax.config.jax_enable_x64)\n```\n\n"
        "```console\n$ streamacc write out.zarr --size 16\n```\n\n"  # the command line turns x64 on
        "```python\nprint(jax.config.jax_enable_x64)\njax.config.update('jax_enable_x64', False)\n```\n"
    )
    run = examples.run_page(page, "page.md", tmp_path)
    assert [b.output for b in run.blocks if b.lang == "python"] == ["False\n", "True\n"]
    assert jax.config.jax_enable_x64


def test_a_picture_the_page_shows_must_be_drawn_by_its_examples(tmp_path):
    with pytest.raises(examples.ExampleError, match=r"shows missing\.png, which none of its examples drew"):
        examples.run_page("![a plot](missing.png)\n", "page.md", tmp_path)


def test_the_reference_refuses_a_missing_name_or_parameter():
    with pytest.raises(examples.ExampleError, match=r"streamacc\.nonexistent names nothing"):
        api.check_reference([("api.md", "::: streamacc.nonexistent\n")])
    with pytest.raises(examples.ExampleError, match=r"streamacc\.write is public but no page documents it"):
        api.check_reference([("api.md", "::: streamacc.open\n")])

    def undocumented(store, mode="create"):
        """Does something.

        Parameters
        ----------
        store : str
            Where.

        Returns
        -------
        None

        Raises
        ------
        ValueError
            Never.

        Examples
        --------
        >>> undocumented("x")
        """

    assert api.problems("streamacc.undocumented", undocumented) == [
        "streamacc.undocumented: parameter 'mode' is not described"
    ]


def test_every_public_docstring_has_its_sections():
    problems = []
    for name in api.public_names():
        problems += api.problems(name, api.resolve(name))
    assert problems == []


def test_the_cli_reference_is_generated_for_every_option():
    from streamacc.cli import build_parser
    from streamacc.recipes import RECIPES, option

    text = cli_reference.render_commands()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    options = {o for p in sub.choices.values() for a in p._actions for o in a.option_strings}
    assert options and all(f"`{o}" in text for o in options), sorted(o for o in options if f"`{o}" not in text)
    recipes = cli_reference.render_recipes()
    assert all(f"### `{name}`" in recipes for name in RECIPES)
    assert all(option(p.name) in recipes for r in RECIPES.values() for p in r.params)


def test_getting_started_writes_other_outputs_than_the_readme():
    """A newcomer follows the README's headline and then Getting started in one folder: a second write to the same
    output would be refused (it exists)."""
    written = re.compile(r"^\$ streamacc write (\S+)", re.M)
    readme, page = ((ROOT / name).read_text() for name in ("README.md", "docs/getting-started.md"))
    assert written.findall(page) and not set(written.findall(readme)) & set(written.findall(page))


def test_a_block_that_reads_with_arviz_says_it_needs_the_arviz_extra():
    """A block calling ``streamacc.to_arviz`` (which refuses without ArviZ) or importing arviz is marked ``needs:
    arviz``, and its page names the extra to install."""
    unmarked, unnamed = [], []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for block in examples.find_blocks(text, page.name):
            source = text[block.start : block.end]
            if block.lang == "python" and block.not_run is None and ("to_arviz(" in source or "import arviz" in source):
                if "arviz" not in block.needs:
                    unmarked.append(f"{page.name}:{text.count(chr(10), 0, block.start) + 1}")
                if "arviz]" not in text:
                    unnamed.append(page.name)
    assert not unmarked and not unnamed, (unmarked, unnamed)


EXTRAS_HIDDEN = r"""
import json, sys, traceback

# What `pip install .` leaves out, the extras' packages, missing for import and for importlib.util.find_spec
sys.modules.update(dict.fromkeys(["xarray", "dask", "distributed", "pandas", "matplotlib", "s3fs", "fsspec",
                                  "h5netcdf", "h5py", "mpmath"]))
sys.path.insert(0, sys.argv[1])
import pathlib, examples

for page, folder, how in json.loads(sys.argv[2]):  # each page in a folder of its own, as the site's build runs it
    page = pathlib.Path(page)
    try:
        examples.run_page(page.read_text(), page.name, pathlib.Path(folder), plain=how == "plain")
        failed = None
    except BaseException:
        failed = traceback.format_exc()
    print("run:", json.dumps([page.name, how, failed]), flush=True)
"""
WITHOUT_EXTRAS = [("README.md", "plain"), ("docs/getting-started.md", "plain"), ("README.md", "all")]


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str | None]:
    """The runs of ``WITHOUT_EXTRAS`` (a page's blocks that need no extra, or all of them), one after another in
    one process where only ``pip install .`` is installed: (page, how) -> None where the run finished, what it
    raised where it failed."""
    jobs = [(str(ROOT / page), str(tmp_path_factory.mktemp("without-extras")), how) for page, how in WITHOUT_EXTRAS]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", EXTRAS_HIDDEN, str(HOOKS), json.dumps(jobs)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [json.loads(line.removeprefix("run: ")) for line in done.stdout.splitlines() if line.startswith("run: ")]
    assert [(name, how) for name, how, _ in runs] == [(Path(page).name, how) for page, how in WITHOUT_EXTRAS]
    return {(page, how): failed for (page, how), (_, _, failed) in zip(WITHOUT_EXTRAS, runs, strict=True)}


NO_EXTRAS = pytest.mark.xdist_group("no_extras")  # one worker of pytest -n, one process for the three runs


@NO_EXTRAS
@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_front_doors_examples_run_after_a_plain_install(page, without_extras):
    """The examples of the README and of Getting started that need no extra (no ``<!-- needs: -->``) run
    where only ``pip install .`` is installed: the extras' packages are missing from that process."""
    failed = without_extras[(page, "plain")]
    assert failed is None, failed[-3000:]


@NO_EXTRAS
def test_an_example_that_needs_an_extra_fails_without_it_so_the_plain_run_can_fail(without_extras):
    """The same run of every block of the README stops at the first that uses xarray, with streamacc's
    error naming the extra: the blocks marked ``needs`` are the ones that need it."""
    failed = without_extras[("README.md", "all")]
    assert failed is not None
    assert "needs xarray: pip install 'streamacc[xarray]'" in failed, failed[-3000:]
    blocks = examples.find_blocks((ROOT / "README.md").read_text(), "README.md")
    assert [b.needs for b in blocks if b.lang == "python"].count(("xarray",)) == 2


def test_the_readmes_dask_comment_counts_the_chunks_its_example_reads(tmp_path):
    import dask.array as da
    import numpy as np

    from streamacc.base import default_chunks
    from streamacc.cli import main

    text = (ROOT / "README.md").read_text()
    assert "$ streamacc write out.zarr --size '2**20' --block-size '2**16'" in text  # the output it reads
    comment = (r"\[-10\*\*6:\]\.compute\(\) +# the last million values: only the chunks holding\s+# them are "
               r"read \((\d+) of 2\*\*16 steps here; two of 2\*\*19 at the headline\)")
    said = re.search(comment, text)
    assert said is not None
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--size", "2**20", "--block-size", "2**16", "--no-progress", "--no-summaries"]) == 0
    last = da.from_zarr(str(out), component="x")[-(10**6) :]
    assert last.numblocks == (int(said.group(1)),) == (-(-(10**6) // 2**16),)  # ceil(10**6 / 2**16) chunks
    headline = default_chunks((), 8, 2**22)  # the default block of float64 steps: 32 MiB
    assert headline == (2**19,) and -(-(10**6) // headline[0]) == 2  # its length 2**32 ends at a chunk's end
    assert 10**6 <= 2**22 and bool(np.isfinite(last[-3:].compute()).all())  # the headline's: within one chunk


def test_the_two_default_block_sizes_are_each_stated_with_why_they_differ():
    import numpy as np

    import streamacc
    from streamacc.cli import build_parser

    first = next(iter(streamacc.iter_blocks(lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**22)))
    in_memory = f"{first.ys.nbytes // 2**20} MiB"  # what iter_blocks does by default
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    size = next(a for a in sub.choices["write"]._actions if "--block-size" in a.option_strings)
    written = re.search(r"about (\d+ MiB) of output per block", size.help).group(1)  # what write does by default
    assert (in_memory, written) == ("8 MiB", "32 MiB")
    iter_doc, write_doc = (" ".join(f.__doc__.split()) for f in (streamacc.iter_blocks, streamacc.write))
    assert f"holds about {in_memory} of ys" in iter_doc and f"write`'s blocks hold {written}" in iter_doc
    assert f"holds about {written} of ys, four times" in write_doc and f"iter_blocks`'s {in_memory}" in write_doc
    assert "amortise" in iter_doc and "amortise" in write_doc  # and why
    page = " ".join((ROOT / "docs" / "guide" / "writing.md").read_text().split())
    assert f"They default to blocks of about {in_memory}, a quarter of a write's {written}" in page

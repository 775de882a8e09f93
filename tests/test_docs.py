"""The docs: a short README that sends a newcomer on, a site that builds strictly, examples that run, and reference
pages that say what the code says (docs/contributing.md is the convention these tests hold)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
PAGES = sorted(DOCS.rglob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RUNNABLE = re.compile(r"<!-- runnable -->\n```(bash|python)\n(.*?)```", re.S)


def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anchors(page: Path) -> set[str]:
    """The ids a link may jump to: each `<a id>` and each heading's slug as the site makes it."""
    from markdown.extensions.toc import slugify

    text = page.read_text()
    return ({slugify(re.sub(r"[`*]", "", h), "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}
            | set(re.findall(r'^<a id="([\w-]+)"></a>$', text, re.M)))


def test_the_readme_is_a_first_page_that_sends_a_newcomer_on():
    lines = README.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; at most 250 (the rest belongs in docs/)"
    first_screen = "\n".join(lines[:30])
    for page in ("docs/how-to/your-model.md", "docs/how-to/your-task-and-eval.md"):
        assert f"]({page})" in first_screen, f"the README's first screen does not link {page}"
    # nothing dated: figures are in docs/log.md, whose entries the README may link
    text = LINK.sub("", README)
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text), "a date in README.md: measurements go to docs/log.md"


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", README))
    assert named and named <= targets, named - targets


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_anchor(page):
    """The site's strict build checks its own pages; this checks the README too, as GitHub shows it."""
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.relative_to(ROOT)} links {target}: no such heading"


def test_the_site_builds_strictly(tmp_path):
    """Broken links and anchors, pages left out of the navigation and any other warning fail the build."""
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr[-3000:]
    assert (tmp_path / "site" / "how-to" / "your-task-and-eval" / "index.html").exists()


def test_the_reference_pages_say_what_the_code_says():
    """Settings, the rmi command, the HTTP API, the asset graph and the recipe contract, rendered from the code and
    compared whole with the committed pages: a change in the code without `make docs` fails here."""
    module = generator()
    stale = module.drift(module.render())
    assert not stale, "\n".join(stale)


def examples() -> list:
    found = []
    for page in PAGES:
        text = re.sub(r"^````.*?^````", "", page.read_text(), flags=re.S | re.M)  # a block shown as an example
        for i, (language, code) in enumerate(RUNNABLE.findall(text)):
            found.append(pytest.param(language, code, id=f"{page.relative_to(DOCS)}#{i + 1}"))
    return found


@pytest.mark.parametrize("language,code", examples())
def test_the_runnable_examples_run(language, code, tmp_path):
    """Each block marked `<!-- runnable -->` exits 0, in an empty folder, with the venv on PATH and a fresh home."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMI_")}
    env |= {"RMI_HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"


def test_there_are_runnable_examples_for_the_cli_python_and_a_feedback_file():
    codes = [code for _, code in RUNNABLE.findall("\n".join(p.read_text() for p in PAGES))]
    assert any("rmi --help" in c for c in codes) and any("--dry-run" in c for c in codes)
    assert any(language == "python" for language, _ in RUNNABLE.findall((DOCS / "how-to" / "your-task-and-eval.md")
                                                                         .read_text()))


def test_the_package_layout_names_every_module():
    page = (DOCS / "explanation" / "architecture.md").read_text()
    tree = re.search(r"## Package layout.*?```text\n(.*?)```", page, re.S).group(1)
    named, stack = set(), []
    for line in tree.splitlines()[1:]:  # under rmi_pipeline/
        depth = (len(line) - len(line.lstrip(" "))) // 2 - 1
        name = line.split()[0]
        stack[depth:] = [name.rstrip("/")]
        named.add("/".join(stack))
    modules = {str(p.relative_to(ROOT / "rmi_pipeline")) for p in (ROOT / "rmi_pipeline").rglob("*.py")
               if p.name != "__init__.py" and (not p.name.startswith("_") or p.name == "__main__.py")}
    missing = sorted(modules - named)
    assert not missing, f"docs/explanation/architecture.md's package layout leaves out {missing}"
    gone = sorted(n for n in named if n.endswith(".py") and n not in modules)
    assert not gone, f"the package layout names modules that do not exist: {gone}"


def test_the_feedback_schema_page_lists_the_fields_of_schema_v1_in_order():
    from rmi_pipeline.schema.fields import FIELDS

    page = (DOCS / "reference" / "feedback-schema.md").read_text()
    listed = re.findall(r"^\| `(\w+)` \|", page.split("## What happens to a batch")[0], re.M)
    assert tuple(listed) == FIELDS


def help_texts() -> list[str]:
    """Every help text of the `rmi` command: each group's and command's help and epilog, and each option's help."""
    import typer

    from rmi_pipeline.cli.main import app

    texts = []

    def walk(command):
        texts.extend(t for t in (command.help, command.epilog) if t)
        texts.extend(p.help for p in command.params if getattr(p, "help", None))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return texts


def test_every_docs_page_an_rmi_help_text_names_exists():
    texts = help_texts()
    named = {m for t in texts for m in re.findall(r"docs/[\w/.-]+\.md(?:#[\w-]+)?", t)}
    assert "docs/reference/settings.md" in named
    for reference in sorted(named):
        path, _, anchor = reference.partition("#")
        assert (ROOT / path).exists(), f"an rmi help text names {reference}, which does not exist"
        if anchor:
            assert anchor in anchors(ROOT / path), f"an rmi help text names {reference}: no such heading"
    assert not [t for t in texts if "README" in t], "a help text points at the README: name a docs page"


def test_every_variable_the_docs_name_is_a_setting():
    """A variable renamed or removed in the code leaves no page (or help text) telling people to set it."""
    module = generator()
    settings_page = module.settings_page()
    known = set(re.findall(r"^\| `(RMI_\w+)` \|", settings_page, re.M))
    renamed = set(re.findall(r"^\| `(RMI_\w+)` \| `RMI_\w+` \|$", settings_page, re.M))
    current = known - renamed
    not_settings = {"RMI_RECIPE_UNDER_TEST", "RMI_UPDATE_SNAPSHOTS"}  # the tests' own switches
    for page in [ROOT / "README.md", *PAGES]:
        names = set(re.findall(r"\bRMI_[A-Z0-9_]*[A-Z0-9]\b(?!_\*)", page.read_text()))
        unknown = sorted(names - current - not_settings - (renamed if page.name == "settings.md" else set()))
        assert not unknown, f"{page.relative_to(ROOT)} names {unknown}, which are not settings (see settings.md)"

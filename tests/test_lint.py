"""The code stays ruff- and mypy-clean, and the package's folders import one way: run as part of the test
command."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("ruff", "check", "addon", "tests"),
        ("ruff", "format", "--check", "addon", "tests"),
        ("mypy",),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(args: tuple[str, ...]) -> None:
    result = _run(*args)
    assert result.returncode == 0, result.stdout + result.stderr


PACKAGE = ROOT / "addon" / "chaos_mode"
TOOLS_PACKAGE = ROOT / "addon" / "chaos_mode_tools"  # the development tools: not in the runtime's wheel
# The package's folders, each importing only folders after it: the request's journey from the mitmproxy
# hook down to what z.ai is. The development tools (their own package) may import it; it never imports them.
LAYERS = [
    "mitm",
    "forwarding",
    "request",
    "observe",
    "fleet",
    "doors",
    "check",  # `chaos-mode check`, beside the journey: what z.ai is, saved where the proxy reads it
    "routing",
    "quota",
    "learning",
    "config",
    "zai",
]
# The tools' folders, the same way: the benchmarks over the rigs (child processes, the flow recorder) over
# the simulator.
TOOLS = ["bench", "devtools", "sim"]


def _folder(module: str) -> str | None:
    """The folder of a module of the package (`chaos_mode.routing.pool` -> `routing`)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "chaos_mode" and len(parts) > 2 else None


def _type_checking(tree: ast.Module) -> set[ast.AST]:
    """The nodes under `if TYPE_CHECKING:`: imports for the type checker only, none at run time."""
    guarded: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded |= {child for statement in node.body for child in ast.walk(statement)}
    return guarded


def _imports(path: Path, *, run_time: bool = False) -> list[str]:
    """Every module `path` imports (absolute names; relative imports resolved); `run_time`: without those
    under `if TYPE_CHECKING:`."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking(tree) if run_time else set()
    found = []
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.append(node.module)
    return found


def _modules(package: Path = PACKAGE) -> list[tuple[str, Path]]:
    return [(path.relative_to(package).parts[0], path) for path in sorted(package.rglob("*.py"))]


def test_every_module_lives_in_a_folder() -> None:
    """The package's top level holds only its `__init__` and `__main__` (`python -m chaos_mode`, the
    command's): each module belongs to a stage of the journey."""
    loose = [path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "__main__.py")]
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert loose == []
    assert folders == set(LAYERS)
    tools = {path.name for path in TOOLS_PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert [path.name for path in TOOLS_PACKAGE.glob("*.py")] == ["__init__.py"]
    assert tools == set(TOOLS)


def test_every_folder_says_what_it_holds() -> None:
    folders = [PACKAGE / folder for folder in LAYERS]
    folders += [TOOLS_PACKAGE, *(path.parent for path in TOOLS_PACKAGE.rglob("__init__.py"))]
    for folder in folders:
        init = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(init)
        assert doc and len(doc.splitlines()) <= 3, folder


def test_imports_point_down_the_journey() -> None:
    """A folder imports only folders below it; the runtime never imports the development tools."""
    offenders = []
    for folder, path in _modules():
        for module in _imports(path):
            if module.split(".")[0] == TOOLS_PACKAGE.name:
                offenders.append(f"{path.relative_to(PACKAGE)} imports {module}")
            target = _folder(module)
            if path.parent == PACKAGE or target is None or target == folder:
                continue
            if LAYERS.index(target) < LAYERS.index(folder):
                offenders.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_tools_import_down_and_in_no_circle() -> None:
    """The tools' folders import one way (`TOOLS`), and no module of theirs comes back to itself through
    what it imports at run time."""
    offenders = []
    graph: dict[str, set[str]] = {}
    for folder, path in _modules(TOOLS_PACKAGE):
        graph[_module_name(path)] = set()
        for module in _imports(path, run_time=True):
            parts = module.split(".")
            if parts[0] != TOOLS_PACKAGE.name or len(parts) < 2:
                continue
            graph[_module_name(path)].add(module)
            if path.parent != TOOLS_PACKAGE and TOOLS.index(parts[1]) < TOOLS.index(folder):
                offenders.append(f"{path.relative_to(TOOLS_PACKAGE)} imports {module}")
    assert offenders == []
    edges = {
        name: {target if target in graph else target.rsplit(".", 1)[0] for target in targets} - {name}
        for name, targets in graph.items()
    }

    def circle(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            name, trail = stack.pop()
            for target in edges.get(name, ()):
                if target == start:
                    return [*trail, start]
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*trail, target]))
        return None

    assert [trail for name in sorted(graph) if (trail := circle(name))] == []


def test_core_does_not_import_mitmproxy() -> None:
    """Pure core, thin adapter: only the adapter's folder imports mitmproxy (of the tools, the flow recorder
    does too: it writes mitmproxy flow files)."""
    offenders = [
        str(path.relative_to(PACKAGE))
        for folder, path in _modules()
        if folder != "mitm" and any(module.split(".")[0] == "mitmproxy" for module in _imports(path))
    ]
    assert offenders == []


def test_tests_mirror_the_package() -> None:
    """Unit tests sit in the folder of what they test; end-to-end, browser tests and shared helpers apart."""
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - {"e2e", "browser", "support", "tools"} <= set(LAYERS)
    tools = {p.name for p in (tests / "tools").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert tools <= set(TOOLS)
    assert [path.name for path in tests.glob("test_*.py")] == ["test_lint.py"]


def test_the_readme_is_a_manual() -> None:
    """At most 300 lines, the quick start in its first 30, and every file it links to is there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 300
    assert "## Quick start" in lines[:30]
    links = re.findall(r"\]\(((?:docs|addon)/[^)#\s]+)\)", readme)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_the_docs_link_to_files_that_are_there() -> None:
    for page in (ROOT / "docs").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        missing = [
            link for link in re.findall(r"\]\(([^)#\s:]+)\)", text) if not (page.parent / link).exists()
        ]
        assert missing == [], page.name


def _prose(path: Path) -> list[str]:
    """The comments and docstrings of a module: the words that may name other modules."""
    source = path.read_text(encoding="utf-8")
    comments = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [node for node in ast.walk(ast.parse(source)) if isinstance(node, documented)]
    return comments + [doc for node in nodes if (doc := ast.get_docstring(node, clean=False))]


def _dotted_exists(name: str) -> bool:
    """`chaos_mode.x.y` (or `chaos_mode.x.y.Name`): the longest module it starts with is there, and the name
    after it, if any, is in that module."""
    parts = name.split(".")
    for end in range(len(parts), 1, -1):
        base = PACKAGE.parent.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[end:]
            return not rest or re.search(rf"\b{rest[0]}\b", module.read_text(encoding="utf-8")) is not None
    return False


def test_the_modules_docstrings_and_comments_name_are_there() -> None:
    """A `something.py` (from the repository, `addon/`, the package or the naming module's folder) or a
    `chaos_mode.x.y` a docstring or comment names exists: a renamed module leaves no stale name behind."""
    missing = []
    for package in (PACKAGE, TOOLS_PACKAGE):
        for _, path in _modules(package):
            for text in _prose(path):
                for name in re.findall(r"[\w./]*\w\.py\b", text):
                    bases = (ROOT, ROOT / "addon", PACKAGE, package, path.parent)
                    if not any((base / name).is_file() for base in bases):
                        missing.append(f"{path.relative_to(package)} names {name}")
                for name in re.findall(r"\bchaos_mode(?:_tools)?(?:\.\w+)+", text):
                    if not _dotted_exists(name):
                        missing.append(f"{path.relative_to(package)} names {name}")
    assert missing == [], missing


def _assumptions() -> dict[str, str]:
    """`zai/assumptions.py`'s constants, each with its docstring (empty when it has none)."""
    body = ast.parse((PACKAGE / "zai" / "assumptions.py").read_text(encoding="utf-8")).body
    found = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            assert isinstance(target, ast.Name)
            doc = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = str(after.value.value)
            found[target.id] = doc
    return found


def test_each_zai_assumption_is_named_once_and_followed() -> None:
    """Every `zai.assumptions.NAME` a module names exists, each assumption has its docstring, the table in
    docs/zai.md, and a module outside `zai/` that rests on it (one that imports it, or names it so)."""
    assumptions = _assumptions()
    assert assumptions and all(assumptions.values())
    named: dict[str, set[str]] = {}
    for folder, path in _modules():
        text = path.read_text(encoding="utf-8")
        names = set(re.findall(r"\bzai\.assumptions\.(\w+)", text))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "chaos_mode.zai.assumptions":
                names |= {alias.name for alias in node.names}
        for name in names:
            named.setdefault(name, set()).add(folder)
    assert sorted(set(named) - set(assumptions)) == []
    unfollowed = [name for name in assumptions if not named.get(name, set()) - {"zai"}]
    assert unfollowed == []
    table = (ROOT / "docs" / "zai.md").read_text(encoding="utf-8")
    assert [name for name in assumptions if f"`{name}`" not in table] == []

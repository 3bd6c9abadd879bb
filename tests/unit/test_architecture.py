"""The proxy's structure, read from its source with ast: no import cycles, narrow behaviours, sans-IO cores."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"
PACKAGE = "insync_proxy.proxy"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PROXY).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _runtime_modules() -> dict[str, Path]:
    """proxy/'s modules, without the dev cluster and the producer-side tools (not the proxy's runtime)."""
    return {_module_name(p): p for p in PROXY.rglob("*.py") if "devcluster" not in p.parts}


def _imports(path: Path, package: str) -> set[str]:
    """Every module a file imports, TYPE_CHECKING imports included (they are still arrows)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _runtime_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        graph[name] = {m for m in _imports(path, package) if m in modules and m != name}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_of_proxy_has_no_cycle() -> None:
    graph = _graph()
    assert len(graph) > 15  # the walk really saw the package
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle_when_there_is_one() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_behaviours_never_see_the_process_object() -> None:
    for path in (PROXY / "behaviours").glob("*.py"):
        text = path.read_text()
        assert "InsyncProxy" not in text, f"{path.name} references InsyncProxy"
        assert f"{PACKAGE}.server" not in _imports(path, f"{PACKAGE}.behaviours"), f"{path.name} imports the server"


def test_no_string_keyed_exchange_context() -> None:
    for path in PROXY.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "context" and \
                    isinstance(node.value, ast.Name) and node.value.id == "exchange":
                raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} uses exchange.context")


def test_the_connection_core_is_sans_io() -> None:
    imports = _imports(PROXY / "core.py", PACKAGE)
    assert not {m for m in imports if m.split(".")[0] in {"asyncio", "socket", "ssl", "selectors", "uvloop"}}
    # and of the project, only the codec and the exchange model
    project = {m for m in imports if m.startswith("insync_proxy.")}
    assert all(m.startswith(("insync_proxy.protocol", f"{PACKAGE}.exchange")) for m in project), project

"""The package's structure, read from its source with ast: one-way doors between the rooms, no import
cycles, narrow behaviours, sans-IO cores, the dev tooling in a room of its own, and the package made of exactly
its linked folders, which every tool can follow. Beside the package: the harness (harness/) that the tests and the
benchmarks both import, neither of them importing the other, nor loading the other's modules by path; the
benchmarks' own tests (benchmarks/tests/) import the benchmarks and the harness, never the tests."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.source_tree import ROOT, SOURCE_FOLDERS

PROXY = ROOT / "proxy"
PACKAGE = "insync_proxy.proxy"
#: The wings of the runtime, lowest first: a wing imports only itself and the wings below it. Configuration
#: is the floor (it imports no runtime module, not even for its defaults); observability counts and logs for
#: everyone above; the data path is below the control plane, which drives it (new brokers to the listeners)
#: and writes what it learns into the data path's own ClusterView; the audit sinks use the control
#: connection; behaviours use all of them; proxy/'s top (the process object and its reloads) wires them.
WINGS = ("config", "observability", "datapath", "controlplane", "audit", "behaviours")
#: The modules at proxy/'s top, above every wing (__init__.py only holds the version; lifecycle.py runs the
#: process object from start to stop).
TOP = {"__init__.py", "server.py", "reload.py", "lifecycle.py"}
#: Client-side helpers (client/): not the proxy, and not imported by it.
CLIENT = "insync_proxy.client"
#: The dev tooling: the local Kafka, chaos, certificates, probes (devcluster/).
DEV_TOOLING = "insync_proxy.devcluster"
#: The folders linked into insync_proxy (insync_proxy/<name> -> ../<name>), by subpackage name.
FOLDERS = SOURCE_FOLDERS


def _own_files() -> list[Path]:
    """The package's own modules (insync_proxy/, insync_proxy/cli/), not those behind its links."""
    return [Path(d, n) for d, dirs, files in os.walk(ROOT / "insync_proxy") for n in files if n.endswith(".py")]


def _module_name(path: Path) -> str:
    """The module a source file is, e.g. proxy/audit/summary.py -> insync_proxy.proxy.audit.summary."""
    relative = path.relative_to(ROOT)
    parts = list(relative.with_suffix("").parts)
    if parts[0] == "insync_proxy":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["insync_proxy", *parts])


def _package_modules() -> dict[str, Path]:
    """Every module of the package: insync_proxy/ itself (the command line, insync_proxy/cli/, included) and the
    folders linked into it."""
    files = [*_own_files(), *(p for folder in FOLDERS.values() for p in folder.rglob("*.py"))]
    return {_module_name(p): p for p in files}


def _runtime_modules() -> dict[str, Path]:
    """proxy/'s modules (the dev cluster is a room of its own, devcluster/)."""
    return {name: p for name, p in _package_modules().items() if name.startswith(PACKAGE)}


def _imports(path: Path, package: str) -> set[str]:
    """Every module a file imports, wherever the import stands (in a function, under TYPE_CHECKING: an
    arrow all the same); `from m import n` names both m and m.n (n may be a module)."""
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


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
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


def _project_imports(folder: str) -> dict[str, set[str]]:
    """Each module of a folder and the project modules it imports (function-level imports included)."""
    modules = _package_modules()
    graph = _graph(modules)
    return {name: targets for name, targets in graph.items() if name.startswith(f"insync_proxy.{folder}")}


def test_the_import_graph_of_the_package_has_no_cycle() -> None:
    # Given every module of the package and every import in it, function-level ones included
    graph = _graph(_package_modules())
    assert len(graph) > 60  # the walk really saw the package
    # Then no module reaches itself through its imports
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_import_graph_of_the_proxy_runtime_has_no_cycle() -> None:
    graph = _graph(_runtime_modules())
    assert len(graph) > 15
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_protocol_imports_nothing_else_of_the_project() -> None:
    # The codec is the bottom room: neither the proxy, nor the pipeline, nor the audit contract.
    offenders = {name: sorted(t for t in targets if not t.startswith("insync_proxy.protocol"))
                 for name, targets in _project_imports("protocol").items()}
    assert not {k: v for k, v in offenders.items() if v}


def test_the_audit_contract_imports_nothing_else_of_the_project_and_no_runtime() -> None:
    # Both the proxy and the pipeline import it: it carries neither's runtime (standard library only).
    for name, path in _package_modules().items():
        if not name.startswith("insync_proxy.audit"):
            continue
        imports = _imports(path, "insync_proxy.audit")
        project = {m for m in imports if m.startswith("insync_proxy") and not m.startswith("insync_proxy.audit")}
        assert not project, (name, project)
        third_party = {m.split(".")[0] for m in imports if not m.startswith("insync_proxy")} - set(sys.stdlib_module_names)
        assert third_party <= {"__future__"}, (name, third_party)


def test_nothing_in_proxy_imports_the_pipeline() -> None:
    # The command line (insync_proxy/cli.py) is the application above both rooms: only it reaches into the
    # pipeline, for `report`.
    offenders = {name: sorted(t for t in targets if t.startswith("insync_proxy.pipeline"))
                 for name, targets in _project_imports("proxy").items()}
    assert not {k: v for k, v in offenders.items() if v}


def test_the_runtime_rooms_import_no_dev_tooling() -> None:
    # The dev tooling (the local Kafka, chaos, certificates, probes) is a room of its own, devcluster/:
    # the codec, the audit contract, the proxy and the pipeline import none of it, function-level
    # imports included. It may use them (its probe speaks through the codec and the blocking client).
    assert "devcluster" in FOLDERS
    runtime = [folder for folder in FOLDERS if folder != "devcluster"]
    offenders = {name: sorted(t for t in targets if t.startswith(DEV_TOOLING))
                 for folder in runtime for name, targets in _project_imports(folder).items()}
    assert len(offenders) > 60  # the walk really saw the runtime rooms
    assert not {k: v for k, v in offenders.items() if v}


def test_the_command_line_reaches_the_dev_tooling_only_inside_its_commands() -> None:
    # `insync-proxy run` loads no dev tooling: the command line (insync_proxy/cli/) imports it inside the
    # functions of `demo`, `dev-cluster` and `chaos`, never at module level (tests/unit/test_packaging.py
    # checks the same in a fresh interpreter).
    lazy, eager = [], []
    for cli in sorted((ROOT / "insync_proxy" / "cli").glob("*.py")):
        tree = ast.parse(cli.read_text(), str(cli))
        functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
        inside = {id(node) for function in functions for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(DEV_TOOLING):
                (lazy if id(node) in inside else eager).append(f"{cli.name}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(a.name.startswith(DEV_TOOLING) for a in node.names):
                (lazy if id(node) in inside else eager).append(f"{cli.name}:{node.lineno}")
    assert lazy, "the command line no longer reaches the dev tooling: the check would see nothing"
    assert eager == [], f"the command line imports the dev tooling at module level: {eager}"


def test_the_package_is_its_linked_folders_only() -> None:
    # Given a fresh interpreter in the checkout (the checkout on sys.path, as the suite and benchmarks
    # run it, and as `pip install -e .` puts it there); Then each subpackage is its top-level folder, seen
    # through the package's link, with no import hook; and nothing else of the checkout is part of the
    # package: not harness/, tests/, benchmarks/ nor setup.py.
    code = ("import importlib, json, sys, insync_proxy\n"
            "found = {}\n"
            f"for name in ('harness', 'tests', 'benchmarks', 'setup', 'scripts', *{sorted(FOLDERS)!r}):\n"
            "    try:\n"
            "        found[name] = importlib.import_module('insync_proxy.' + name).__file__\n"
            "    except ModuleNotFoundError as exc:\n"
            "        found[name] = 'not found: ' + str(exc.name)\n"
            "hooks = [type(f).__module__ for f in sys.meta_path if 'insync' in type(f).__module__]\n"
            "print(json.dumps({'path': list(insync_proxy.__path__), 'found': found, 'hooks': hooks}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = __import__("json").loads(out.stdout)
    assert seen["path"] == [str(ROOT / "insync_proxy")]
    assert seen["hooks"] == []
    for name in ("harness", "tests", "benchmarks", "setup", "scripts"):
        assert seen["found"][name] == f"not found: insync_proxy.{name}", (name, seen["found"][name])
    for name, folder in FOLDERS.items():
        assert seen["found"][name] == str(ROOT / "insync_proxy" / name / "__init__.py"), (name, seen["found"][name])
        assert Path(seen["found"][name]).resolve() == folder / "__init__.py"


def test_every_import_of_the_package_lands_on_a_module_of_its_folders() -> None:
    # Every `insync_proxy.<...>` that the package's source imports is a module of insync_proxy/ or of a
    # mapped folder (`from m import n`: m is; n may be a name in it): the import graph above follows
    # every import, and nothing reaches a part of the checkout outside the package.
    modules = _package_modules()
    unresolved: list[str] = []
    for path in modules.values():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                targets = [node.module or ""]
            else:
                continue
            unresolved += [f"{path.relative_to(ROOT)}:{node.lineno} {t}" for t in targets
                           if t.startswith("insync_proxy") and t not in modules]
    assert unresolved == []


def test_the_pipeline_imports_no_proxy_module() -> None:
    offenders = {name: sorted(t for t in targets if t.startswith("insync_proxy.proxy"))
                 for name, targets in _project_imports("pipeline").items()}
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_the_pipeline_loads_no_proxy_runtime() -> None:
    # Given a fresh interpreter; When every pipeline module is imported; Then sys.modules holds none of
    # the proxy's modules and none of its runtime dependencies (what the source check cannot see:
    # imports of imports, package __init__s).
    modules = sorted(n for n in _package_modules() if n.startswith("insync_proxy.pipeline"))
    assert "insync_proxy.pipeline.report" in modules
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loaded = set(__import__("json").loads(out.stdout))
    assert "insync_proxy.pipeline.report" in loaded and "insync_proxy.audit.buckets" in loaded
    runtime = sorted(m for m in loaded if m.startswith("insync_proxy.proxy") or m.split(".")[0] in
                     {"prometheus_client", "uvloop"})
    assert runtime == []


def test_the_cycle_check_follows_function_level_imports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    from a import x\n")
    graph = {"a": _imports(a, "") & {"a", "b"}, "b": _imports(b, "") & {"a", "b"}}
    assert _find_cycle(graph) == ["a", "b", "a"]


def test_the_package_links_each_top_level_source_folder_and_nothing_else() -> None:
    # Each link is relative (a clone anywhere works), tracked by git as a link, and names a top-level folder
    # that is a package; the folders hold no link of their own (a tool that does not follow links, ruff, sees
    # each file once, at its folder).
    links = sorted(p for p in (ROOT / "insync_proxy").iterdir() if p.is_symlink())
    assert [p.name for p in links] == sorted(FOLDERS) and len(links) >= 6
    for link in links:
        assert os.readlink(link) == f"../{link.name}"
        assert (ROOT / link.name / "__init__.py").is_file()
    inner = [str(Path(d, n).relative_to(ROOT)) for folder in FOLDERS.values()
             for d, dirs, files in os.walk(folder) for n in dirs + files if Path(d, n).is_symlink()]
    assert inner == []
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert sorted(line.split("\t")[1] for line in tracked.splitlines() if line.startswith("120000")) == \
        [f"insync_proxy/{p.name}" for p in links]


def test_setuptools_finds_the_package_through_the_links() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"": "."}  # the checkout's root is the source root: a plain path entry
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"]))
    packages = {_module_name(p.parent) for folder in FOLDERS.values() for p in folder.rglob("__init__.py")}
    own = {_module_name(p.parent) for p in _own_files() if p.name == "__init__.py"}
    assert "insync_proxy.cli" in own
    assert found == packages | own


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
    imports = _imports(PROXY / "datapath" / "core.py", f"{PACKAGE}.datapath")
    assert not {m for m in imports if m.split(".")[0] in {"asyncio", "socket", "ssl", "selectors", "uvloop"}}
    # and of the project, only the codec and the exchange model
    project = {m for m in imports if m.startswith("insync_proxy.")}
    assert all(m.startswith(("insync_proxy.protocol", f"{PACKAGE}.datapath.exchange")) for m in project), project


def test_the_process_object_wires_and_starts_and_hosts_no_service() -> None:
    # Given the process object's module
    server = PROXY / "server.py"
    # Then it stays small: services (listeners, the proxy's Metadata, readiness, TLS, topic-id lookups) live
    # in rooms of their own
    assert len(server.read_text().splitlines()) <= 250
    tree = ast.parse(server.read_text())
    (proxy_class,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InsyncProxy"]
    coroutines = {n.name for n in proxy_class.body if isinstance(n, ast.AsyncFunctionDef)}
    assert coroutines <= {"start", "stop", "_summary_loop"}, coroutines
    # And nothing but the process's life (lifecycle.py, which `run` and `demo` call) imports it (check-config's
    # preflight makes TLS contexts from tls.py)
    for name, path in _package_modules().items():
        if name in (f"{PACKAGE}.server", f"{PACKAGE}.lifecycle"):
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        assert f"{PACKAGE}.server" not in _imports(path, package), f"{name} imports the process object"


def test_no_module_of_the_runtime_is_over_600_lines() -> None:
    # Settings are rooms of the config/ wing (settings.py what each is, schema.py their checks, loader.py where
    # values come from, reference.py the page); no module of proxy/ is a house of its own
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines()) for path in PROXY.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 600} == {}


def _layer(module: str) -> int | None:
    """A runtime module's layer: its wing's place in WINGS, the top above them; None for the package itself."""
    parts = module.split(".")
    if module == PACKAGE:
        return None
    if parts[2] in WINGS:
        return WINGS.index(parts[2])
    return len(WINGS)


def test_each_wing_of_the_runtime_is_a_folder() -> None:
    # Given proxy/; Then it holds the wings, each a folder (a package of several modules), and at its top
    # only the process object, its reloads and the version: the tree says what the building is
    folders = {p.name for p in PROXY.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(WINGS)
    for wing in WINGS:
        assert (PROXY / wing / "__init__.py").is_file(), wing
        assert len([p for p in (PROXY / wing).glob("*.py") if p.name != "__init__.py"]) >= 2, wing
    assert {p.name for p in PROXY.glob("*.py")} == TOP


def test_no_wing_imports_a_wing_above_it() -> None:
    # Given every import of the runtime, function-level and TYPE_CHECKING ones included
    graph = _graph(_runtime_modules())
    assert len(graph) > 40
    # Then each arrow goes to the same wing or a lower one
    upward = sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                    if None not in (_layer(name), _layer(target)) and _layer(target) > _layer(name))
    assert upward == []


def test_the_layer_check_sees_an_upward_arrow() -> None:
    assert _layer(f"{PACKAGE}.config.settings") < _layer(f"{PACKAGE}.datapath.budget")
    assert _layer(f"{PACKAGE}.behaviours.acks") < _layer(f"{PACKAGE}.server") == len(WINGS)
    assert _layer(PACKAGE) is None


def test_the_runtime_imports_nothing_of_the_client_helpers() -> None:
    # client/ (a blocking client, a producer-side partitioner, check-config's preflight) is not the proxy:
    # the runtime, the codec and the audit contract import none of it, function-level imports included.
    # (insync_proxy/cli.py may: `check-config --connect` runs the preflight.)
    assert "client" in FOLDERS
    offenders = {name: sorted(t for t in targets if t.startswith(CLIENT))
                 for folder in ("proxy", "protocol", "audit") for name, targets in _project_imports(folder).items()}
    assert len(offenders) > 60
    assert not {k: v for k, v in offenders.items() if v}


def _loaded_after(imports: str) -> list[str]:
    """sys.modules of a fresh interpreter in the checkout after `imports`."""
    code = f"import json, sys\n{imports}\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return list(__import__("json").loads(out.stdout))


def test_what_a_producer_imports_from_the_client_loads_no_proxy_runtime() -> None:
    # Given a fresh interpreter; When a producer imports the blocking client and the partitioner; Then none
    # of the proxy's modules is loaded, nor its runtime dependencies
    client = _loaded_after("import insync_proxy.client.blocking_client, insync_proxy.client.partitioner")
    assert "insync_proxy.client.partitioner" in client
    assert [m for m in client if m.startswith(PACKAGE) or m.split(".")[0] in {"prometheus_client", "uvloop"}] == []
    # And the process (`run`: the server and the command line) loads no client module
    runtime = _loaded_after("import insync_proxy.proxy.server, insync_proxy.cli")
    assert "insync_proxy.proxy.server" in runtime
    assert [m for m in runtime if m.startswith(CLIENT)] == []


def test_behaviours_return_what_happens_to_a_request() -> None:
    # Given every behaviour module; Then none sets what goes upstream, a local answer or a response hook itself:
    # it returns a RequestResult (FORWARD, forward, FORWARD_WITHOUT_RESPONSE, respond, wait) for the core to act on
    owned_by_the_core = {"upstream_frame", "local_response", "expects_response", "response_hooks"}
    found: list[str] = []
    for path in sorted((PROXY / "behaviours").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in owned_by_the_core:
                    found.append(f"{path.name}:{node.lineno} sets {target.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr == "answer_locally" or (node.func.attr == "append" and isinstance(
                        node.func.value, ast.Attribute) and node.func.value.attr == "response_hooks")):
                found.append(f"{path.name}:{node.lineno} calls {ast.unparse(node.func)}")
    assert found == []


def _folder_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of a top-level folder of the checkout (by its path) and every module it imports, wherever the
    import stands (in a function, under TYPE_CHECKING)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder.parent).with_suffix("").parts)
        package = ".".join(parts[:-1])
        found[path.relative_to(folder.parent).as_posix()] = _imports(path, package)
    return found


def _arrows_into(imports: dict[str, set[str]], room: str, exempt: tuple[str, ...] = ()) -> list[str]:
    """`file imports module` for each import of a module of `room` (a top-level name); a file of `exempt`, and an
    import of one of its modules, is not an arrow."""
    exempt_modules = tuple(e.removesuffix(".py").replace("/", ".") for e in exempt)
    return sorted(f"{file} imports {target}" for file, targets in imports.items() if file not in exempt
                  for target in targets if target.split(".")[0] == room
                  and not any(target == m or target.startswith(m + ".") for m in exempt_modules))


def test_the_harness_imports_neither_the_tests_nor_the_benchmarks() -> None:
    # Given every module of harness/, imports inside functions and under TYPE_CHECKING counted
    imports = _folder_imports(ROOT / "harness")
    assert "harness/proxy_process.py" in imports and len(imports) > 10  # the walk really saw the harness
    # Then none of them reaches the tests or the benchmarks: both import the harness, it imports neither
    assert _arrows_into(imports, "tests") == []
    assert _arrows_into(imports, "benchmarks") == []


def test_the_benchmarks_import_nothing_of_the_tests() -> None:
    imports = _folder_imports(ROOT / "benchmarks")
    assert "benchmarks/proxy_bench.py" in imports
    assert "benchmarks/scenario/runner.py" in imports  # the scenario package is walked too
    assert _arrows_into(imports, "tests") == []


def test_the_tests_import_nothing_of_the_benchmarks() -> None:
    imports = _folder_imports(ROOT / "tests")
    assert "tests/unit/test_architecture.py" in imports
    assert _arrows_into(imports, "benchmarks") == []


def test_the_benchmarks_tests_import_the_benchmarks_and_the_harness_never_the_tests() -> None:
    # Given the benchmarks' own tests (benchmarks/tests/, collected with the suite)
    imports = {file: targets for file, targets in _folder_imports(ROOT / "benchmarks").items()
               if file.startswith("benchmarks/tests/")}
    assert {"benchmarks/tests/test_peers_bench.py", "benchmarks/tests/test_bench_clients.py"} <= imports.keys()
    # Then they import the benchmarks and the harness as modules, and nothing of tests/
    rooms = {target.split(".")[0] for targets in imports.values() for target in targets}
    assert {"benchmarks", "harness"} <= rooms, rooms
    assert _arrows_into(imports, "tests") == []


#: What loads a module from its file (importlib's and runpy's): an import the import statements the checks
#: above read do not show.
PATH_LOADERS = frozenset({"spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "run_path"})
#: What imports a module named by a string, just as unseen by those checks.
NAME_LOADERS = frozenset({"import_module", "run_module", "__import__"})


def _loads_around_imports(path: Path, room: str) -> list[str]:
    """`file:line loads room ... (callee)` for each call in a file that loads a module of `room` (a top-level
    folder) other than by an import statement: a path loader in a file whose code (docstrings aside) names the
    folder in a string (the path is mostly built apart, `ROOT / "benchmarks" / "x.py"`, and handed on through
    names and helpers), or a name loader given `room` or `room.<module>`."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    names_room = any(isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                     and room in Path(node.value).parts for node in ast.walk(tree))
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee in PATH_LOADERS and names_room:
            found.append(f"{where}:{node.lineno} loads {room}/ by path ({callee})")
        elif callee in NAME_LOADERS and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.split(".")[0] == room:
            found.append(f"{where}:{node.lineno} loads {node.args[0].value} by name ({callee})")
    return found


def test_no_test_loads_a_benchmark_or_a_test_module_around_the_import_rules() -> None:
    # Given every module of tests/ and of benchmarks/tests/
    tests = sorted((ROOT / "tests").rglob("*.py"))
    benchmark_tests = sorted((ROOT / "benchmarks" / "tests").rglob("*.py"))
    assert ROOT / "tests" / "deploy" / "test_prometheus_rules.py" in tests  # a path loader, of deploy's scripts
    assert ROOT / "benchmarks" / "tests" / "test_peers_bench.py" in benchmark_tests
    # Then none loads a benchmark by its file's path or by a name in a string (the tests import nothing of the
    # benchmarks; the benchmarks' tests import them), and the benchmarks' tests load nothing of tests/ so either
    found = [load for path in (*tests, *benchmark_tests) for load in _loads_around_imports(path, "benchmarks")]
    found += [load for path in benchmark_tests for load in _loads_around_imports(path, "tests")]
    assert found == []


def test_the_load_check_sees_a_benchmark_loaded_by_path(tmp_path: Path) -> None:
    # Given a test that loads a benchmark by path through a helper, as tests/unit/test_peers_bench.py did, one
    # that runs a benchmark's file, one that imports one by name, and one that loads a deploy script by path
    (tmp_path / "test_helper.py").write_text(
        'import importlib.util\nfrom pathlib import Path\n"""benchmarks/ named in a docstring only"""\n'
        'BENCH = Path(__file__).parents[2] / "benchmarks" / "peers_bench.py"\n'
        "def _load(name, path):\n    return importlib.util.spec_from_file_location(name, path)\n"
        'bench = _load("peers_bench", BENCH)\n')
    (tmp_path / "test_run.py").write_text('import runpy\nrunpy.run_path("benchmarks/proxy_bench.py")\n')
    (tmp_path / "test_name.py").write_text('import importlib\nimportlib.import_module("benchmarks.shared")\n')
    (tmp_path / "test_deploy.py").write_text(
        '"""Not benchmarks/."""\nfrom importlib.machinery import SourceFileLoader\n'
        'SourceFileLoader("rules", "deploy/prometheus/check-rules")\n')
    # Then the first three are loads, the deploy script's is not
    assert [load for name in ("test_helper", "test_run", "test_name", "test_deploy")
            for load in _loads_around_imports(tmp_path / f"{name}.py", "benchmarks")] == [
        "test_helper.py:6 loads benchmarks/ by path (spec_from_file_location)",
        "test_run.py:2 loads benchmarks/ by path (run_path)",
        "test_name.py:2 loads benchmarks.shared by name (import_module)"]


def test_the_room_check_sees_an_arrow(tmp_path: Path) -> None:
    # Given a harness module that imports a test helper inside a function, and a benchmark importing a test module
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "waits.py").write_text("def f():\n    from tests.helpers import Clock\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "a_bench.py").write_text("from tests import helpers\n")
    (tmp_path / "benchmarks" / "exempt.py").write_text("import tests.helpers\n")
    # Then both are arrows, and an exempted file's is not
    assert _arrows_into(_folder_imports(tmp_path / "harness"), "tests") == [
        "harness/waits.py imports tests.helpers", "harness/waits.py imports tests.helpers.Clock"]
    assert _arrows_into(_folder_imports(tmp_path / "benchmarks"), "tests", exempt=("benchmarks/exempt.py",)) == [
        "benchmarks/a_bench.py imports tests", "benchmarks/a_bench.py imports tests.helpers"]


def test_the_root_conftest_loads_no_dev_cluster() -> None:
    # Given a fresh interpreter in the checkout; When it imports the root conftest (as pytest does for every run)
    code = ("import json, sys, tests.conftest\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('insync_proxy.devcluster', "
            "'tests.cluster_fixtures')))))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # Then neither the dev cluster nor the cluster fixtures are loaded: the codec's tests run without them
    assert __import__("json").loads(out.stdout) == []


def test_the_jar_fetch_runs_from_the_checkout_before_any_dependency_is_installed() -> None:
    # scripts/test fetches Kafka's jars with the checkout's own `python -m insync_proxy dev-cluster fetch` beside pip,
    # on a bare machine before pip has installed anything: what that command imports may need only the stdlib
    blocker = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'mypy_extensions', 'uvloop', 'prometheus_client', 'tomli_w'}:\n"
        "            raise ImportError(f'{name} is not installed yet')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import insync_proxy.devcluster.detached, insync_proxy.cli.dev\n"
        "print('imported')\n"
    )
    result = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0 and "imported" in result.stdout, result.stderr[-2000:]

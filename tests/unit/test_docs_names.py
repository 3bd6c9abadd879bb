"""docs/architecture.md and docs/pipeline.md name today's code: every code name in backticks is defined by
the package, and a dotted name (`module.name`, `Class.member`) is defined where the docs say it is."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.source_tree import ROOT, SOURCE_FOLDERS

DOCS = ("docs/architecture.md", "docs/pipeline.md")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: Names in backticks that are code, but not this package's: Kafka's, Spark's, the JVM's, other tools'.
NOT_OURS = {
    "DontCompileHugeMethods",  # a JVM flag
    "Expand",  # a Spark plan node
    "input_file_name", "from_json", "try_variant_get", "singleVariantColumn",  # Spark's
    "spark.sql.defaultColumn.enabled", "spark.jars", "sys.path",
    "INSYNC_SPARK_KAFKA_VERSION", "INSYNC_SPARK_TOKEN_PROVIDER_VERSION", "INSYNC_SPARK_JARS_DIR",  # read by name
    "INSYNC_DEBUG",
    "SparkContext", "PySpark", "DuckDB",  # Spark's, and the pipeline benchmark's baseline
    "insync_proxy.tests", "insync_proxy.benchmarks",  # named because they must not import
}
#: Files a command writes (not the repository's, not code).
_OUTPUT_FILE = re.compile(r"[\w-]+\.(html|json|jsonl|csv|parquet|txt|log)")


@dataclass
class Definitions:
    """What the package itself defines: per module (its top-level names, imports re-exported included), per
    class (its methods, class attributes, fields and the attributes its methods set on self), and every name
    a string literal of the package spells whole (event fields, table columns, metric and setting names)."""

    modules: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)
    everywhere: set[str] = field(default_factory=set)

    def defines(self, name: str) -> bool:
        return name in self.everywhere


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def _names_of(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for t in target.elts for n in _names_of(t)]
    return []


def _module_key(path: Path) -> str:
    """protocol/endpoints.py -> protocol.endpoints; a package's __init__.py -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "insync_proxy":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@cache
def _definitions() -> Definitions:
    found = Definitions()
    for path in _package_files():
        tree = ast.parse(path.read_text(), str(path))
        top: set[str] = set(path.relative_to(ROOT).with_suffix("").parts)
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                top.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                top.update((a.asname or a.name).split(".")[0] for a in node.names)
            for target in _targets(node):
                top.update(_names_of(target))
        found.modules[_module_key(path)] = top
        found.everywhere |= top
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                members = found.classes.setdefault(node.name, set())
                for item in ast.walk(node):
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        members.add(item.name)
                        members.update(a.arg for a in item.args.args + item.args.kwonlyargs)
                    for target in _targets(item):
                        members.update(_names_of(target))
                        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                                and target.value.id == "self":
                            members.add(target.attr)
                found.everywhere |= members | {node.name}
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.everywhere.add(node.name)
                found.everywhere.update(a.arg for a in node.args.args + node.args.kwonlyargs)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                # a string that is one name (or a dotted key), not a sentence that mentions one
                if _DOTTED.fullmatch(node.value):
                    found.everywhere.update(node.value.split("."))
    return found


def _package_files() -> list[Path]:
    """The package's modules, and setup.py (the compiled build's module list)."""
    # rglob does not follow the package's links: insync_proxy/ and insync_proxy/cli/, then the linked folders
    files = [*(ROOT / "insync_proxy").rglob("*.py"), *(p for folder in SOURCE_FOLDERS.values() for p in folder.rglob("*.py"))]
    return [ROOT / "setup.py", *files]


def _file_exists(name: str) -> bool:
    """A repository path, or a module named by its path below its folder (`server.py`, `behaviours/acks.py`)."""
    return (ROOT / name).exists() or any(p.as_posix().endswith("/" + name) for p in _package_files())


#: Fenced blocks in these languages are commands or configuration (flags, settings, Kafka's words), not
#: pictures of the code: their words are not checked as code names.
_COMMAND_BLOCKS = {"bash", "sh", "shell", "console", "toml", "properties", "json", "yaml", "sql", "python"}


def _code_spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks, and every word of a fenced block without a command language
    (a diagram, a layout, a table of modules) that could name code: a file name or an identifier."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", prose)
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        if language not in _COMMAND_BLOCKS:
            spans += [word for word in (w.rstrip(".") for w in re.findall(r"[\w./-]*\w(?:\(\))?", block))
                      if _diagram_code_word(word)]
    return spans


def _diagram_code_word(word: str) -> bool:
    """A word of a diagram that is code, not prose: a file, a snake_case name (not an ENVIRONMENT_VARIABLE)
    or a CamelCase one with a capital inside it (`ConnectionCore`, not `Metadata` or `Java`)."""
    return word.endswith(".py") or ("_" in word.strip("_") and not word.isupper()) \
        or re.search(r"[a-z][A-Z]", word) is not None


def _is_code_name(span: str) -> bool:
    """An identifier that looks like code: CamelCase, with an underscore, or a dotted path that starts
    with one of the package's modules or a CamelCase name (not `min.insync.replicas`)."""
    parts = span.split(".")
    if not all(_IDENTIFIER.fullmatch(p) for p in parts):
        return False
    if len(parts) > 1:
        return parts[0] in _MODULES or _camel(parts[0])
    return "_" in span.strip("_") or _camel(span)


def _camel(name: str) -> bool:
    return name[0].isupper() and any(c.islower() for c in name) and "_" not in name


_MODULES = {"insync_proxy", *SOURCE_FOLDERS, *(p.stem for p in (ROOT / "insync_proxy").rglob("*.py")),
            *(p.stem for folder in SOURCE_FOLDERS.values() for p in folder.rglob("*.py"))}


def _module_for(parts: list[str], defs: Definitions) -> tuple[str | None, list[str]]:
    """The longest leading run of `parts` that names a module of the package, and the parts after it.
    `insync_proxy.audit.events.envelope` -> (audit.events, [envelope]); `single_pass.cube` -> (the module
    whose last part is single_pass, [cube])."""
    if parts and parts[0] == "insync_proxy":
        parts = parts[1:]
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in defs.modules:
            return head, parts[cut:]
        matches = [key for key in defs.modules if key.endswith("." + head)]
        if len(matches) == 1:
            return matches[0], parts[cut:]
    return None, parts


def _defined(name: str, defs: Definitions) -> bool:
    """A single name defined somewhere in the package; a dotted name defined where it says."""
    parts = name.split(".")
    if len(parts) == 1:
        return defs.defines(name)
    if parts[0] in _MODULES and parts[0] not in defs.classes:
        module, rest = _module_for(parts, defs)
        if module is None:
            return False
        if not rest:
            return True
        if rest[0] not in defs.modules[module]:
            return False  # not defined (or imported) in the module the docs name
        parts = rest
    for owner, member in zip(parts, parts[1:], strict=False):
        if owner in defs.classes and member not in defs.classes[owner]:
            return False  # the class the docs name has no such member
    return all(defs.defines(p) for p in parts)


def _stale(doc: str, defs: Definitions) -> list[str]:
    stale = []
    for span in _code_spans((ROOT / doc).read_text()):
        name = span.removesuffix("()").strip()
        if name in NOT_OURS or _OUTPUT_FILE.fullmatch(name):
            continue
        if re.fullmatch(r"[\w./-]+\.py|[\w.-]+/[\w./-]+\.json", name):  # a file of the repository
            if not _file_exists(name):
                stale.append(name)
        elif _is_code_name(name) and not _defined(name, defs):
            stale.append(name)
    return stale


def test_every_code_name_in_the_docs_exists_in_the_package() -> None:
    defs = _definitions()
    for doc in DOCS:
        assert _stale(doc, defs) == [], f"{doc} names code that is gone or lives elsewhere"


def test_a_wrong_name_in_a_diagram_would_be_caught() -> None:
    defs = _definitions()
    picture = "```\n proxy/  | core.py  ConnectionCore (sans-IO)  |\n          | FrameSplitterX  gone.py |\n```\n"
    names = [name for name in _code_spans(picture) if _is_code_name(name) or name.endswith(".py")]
    assert "ConnectionCore" in names and "FrameSplitterX" in names and "gone.py" in names
    assert _defined("ConnectionCore", defs) and not _defined("FrameSplitterX", defs) and not _file_exists("gone.py")
    # a command or configuration block is not a picture of the code
    assert "UnknownFlagLike_Name" not in _code_spans("```bash\nrun --x UnknownFlagLike_Name\n```\n")


def test_a_renamed_class_would_be_caught() -> None:
    defs = _definitions()
    assert defs.defines("FrameStream") and not defs.defines("FrameSplitterX")
    assert _is_code_name("FrameSplitterX") and _is_code_name("single_pass.cube") and _is_code_name("run_report")
    assert not _is_code_name("min.insync.replicas") and not _is_code_name("date") and not _is_code_name("--master")


def test_a_moved_or_only_mentioned_definition_would_be_caught() -> None:
    defs = _definitions()
    # Given names that exist, but not where a doc would put them
    assert _defined("InsyncProxy._behaviours", defs) and not _defined("ConnectionCore._behaviours", defs)
    assert _defined("insync_proxy.audit.events.envelope", defs)
    assert not _defined("insync_proxy.audit.buckets.envelope", defs)
    assert _defined("endpoints.ENDPOINT_REWRITERS", defs) and not _defined("server.ENDPOINT_REWRITERS", defs)
    # And a name that only a sentence (a docstring, a log line) mentions is no definition
    assert not defs.defines("resolve_topic_ids")

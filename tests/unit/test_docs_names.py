"""docs/architecture.md and docs/pipeline.md name today's code: every code name in backticks exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import insync_proxy

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/architecture.md", "docs/pipeline.md")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Names in backticks that are code, but not this package's: Kafka's, Spark's, the JVM's, other tools'.
NOT_OURS = {
    "DontCompileHugeMethods",  # a JVM flag
    "Expand",  # a Spark plan node
    "input_file_name", "from_json", "try_variant_get", "singleVariantColumn",  # Spark's
    "spark.sql.defaultColumn.enabled", "spark.jars", "sys.path",
    "INSYNC_SPARK_KAFKA_VERSION", "INSYNC_SPARK_TOKEN_PROVIDER_VERSION", "INSYNC_SPARK_JARS_DIR",  # read by name
    "INSYNC_DEBUG",
}


def _defined_names() -> set[str]:
    """Every name the package defines or uses: modules, classes, functions, attributes, arguments,
    and the identifiers inside its string literals (event fields, table columns, config keys)."""
    names: set[str] = set()
    for path in _package_files():
        names.update(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.update(node.name.split("."))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(_IDENTIFIER.findall(node.value))
    return names


def _package_files() -> list[Path]:
    """The package's modules, and setup.py (the compiled build's module list)."""
    folders = [ROOT / "insync_proxy", *(ROOT / f for f in insync_proxy.SOURCE_FOLDERS)]
    return [ROOT / "setup.py", *(p for folder in folders for p in folder.rglob("*.py"))]


def _file_exists(name: str) -> bool:
    """A repository path, or a module named by its path below its folder (`server.py`, `behaviours/acks.py`)."""
    return (ROOT / name).exists() or any(p.as_posix().endswith("/" + name) for p in _package_files())


def _code_spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose)


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


_MODULES = {"insync_proxy", *insync_proxy.SOURCE_FOLDERS,
            *(p.stem for f in insync_proxy.SOURCE_FOLDERS for p in (ROOT / f).rglob("*.py"))}


def _stale(doc: str, names: set[str]) -> list[str]:
    stale = []
    for span in _code_spans((ROOT / doc).read_text()):
        name = span.removesuffix("()").strip()
        if name in NOT_OURS:
            continue
        if re.fullmatch(r"[\w./-]+\.py|[\w.-]+/[\w./-]+\.json", name):  # a file of the repository
            if not _file_exists(name):
                stale.append(name)
        elif _is_code_name(name) and not all(part in names for part in name.split(".")):
            stale.append(name)
    return stale


def test_every_code_name_in_the_docs_exists_in_the_package() -> None:
    names = _defined_names()
    for doc in DOCS:
        assert _stale(doc, names) == [], f"{doc} names code that is gone"


def test_a_renamed_class_would_be_caught(tmp_path: Path) -> None:
    names = _defined_names()
    assert "FrameStream" in names and "FrameSplitterX" not in names
    assert _is_code_name("FrameSplitterX") and _is_code_name("single_pass.cube") and _is_code_name("run_report")
    assert not _is_code_name("min.insync.replicas") and not _is_code_name("date") and not _is_code_name("--master")

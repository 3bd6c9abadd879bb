"""Read Kafka's JSON message specs, write protocol/kafka_messages.py and protocol/kafka_versions.py.

``python -m protocolgen [--check] [--specs JAR|DIR] [--kafka-version X] [--out DIR]``:

* no option: regenerate the two modules from the committed specs (protocolgen/specs/);
* ``--check``: write nothing, print the difference and exit 1 when the committed modules (or, with
  ``--specs``, the committed specs) are not what generation gives;
* ``--specs``: take the spec files from a kafka-clients jar (``common/message/*.json``) or a folder and
  copy the ones the generator reads into protocolgen/specs/ (with ``--check``: a dry run of a Kafka bump).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from insync_proxy.protocol.schema import MAX_VERSION, VersionRange

from . import config

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "protocolgen" / "specs"
MESSAGES_OUT = Path("protocol") / "kafka_messages.py"
VERSIONS_OUT = Path("protocol") / "kafka_versions.py"
WALKERS_OUT = Path("protocol") / "kafka_walkers.py"
#: Summary of every API key's request spec (name, versions, flexible versions): the header tables.
API_SUMMARY = "api_keys.json"
KAFKA_VERSION_FILE = "KAFKA_VERSION"

# ------------------------------------------------------------------------------------------------
# Reading the specs


def parse_spec(text: str) -> dict[str, Any]:
    """A spec file: JSON with whole-line ``//`` comments."""
    spec: dict[str, Any] = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    return spec


def spec_files_needed() -> list[str]:
    names = [f"{api}{kind}" for api in [*config.DECODED_APIS, *config.WALKED_ONLY_APIS]
             for kind in ("Request", "Response")]
    return sorted([*names, *config.HEADER_SPECS])


def read_source(source: Path) -> dict[str, str]:
    """Every ``*.json`` spec of a kafka-clients jar or a folder: file name -> text."""
    out: dict[str, str] = {}
    if source.is_file():
        with zipfile.ZipFile(source) as jar:
            for name in jar.namelist():
                if name.startswith("common/message/") and name.endswith(".json"):
                    out[name.rsplit("/", 1)[1]] = jar.read(name).decode("utf-8")
    else:
        for path in sorted(source.glob("*.json")):
            out[path.name] = path.read_text()
    if not out:
        raise SystemExit(f"no Kafka message specs in {source}")
    return out


def import_specs(source: Path, kafka_version: str | None) -> dict[str, str]:
    """The files protocolgen/specs/ holds when taken from ``source``: the needed specs, the API summary
    and the Kafka version."""
    texts = read_source(source)
    if API_SUMMARY in texts:  # a folder of already imported specs
        return {**texts, KAFKA_VERSION_FILE: (source / KAFKA_VERSION_FILE).read_text()}
    files = {f"{name}.json": texts[f"{name}.json"] for name in spec_files_needed()}
    summary: dict[str, dict[str, Any]] = {}
    for text in texts.values():
        spec = parse_spec(text)
        if spec.get("type") == "request":
            summary[str(spec["apiKey"])] = {"name": spec["name"].removesuffix("Request"),
                                            "validVersions": spec["validVersions"],
                                            "flexibleVersions": spec.get("flexibleVersions", "none")}
    ordered = {k: summary[k] for k in sorted(summary, key=int)}
    files[API_SUMMARY] = json.dumps(ordered, indent=1) + "\n"
    if kafka_version is None:
        match = re.search(r"kafka-clients-([0-9][^/]*)\.jar$", source.name)
        if match is None:
            raise SystemExit("say which Kafka release the specs come from: --kafka-version")
        kafka_version = match.group(1)
    files[KAFKA_VERSION_FILE] = kafka_version + "\n"
    return files


# ------------------------------------------------------------------------------------------------
# The model


#: Kafka's version ranges: the codec's own class (protocol/schema.py), one definition of the notation.
Versions = VersionRange


PRIMITIVES = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
              "uint16": "UINT16", "uint32": "UINT32", "float64": "FLOAT64", "uuid": "UUID", "string": "STRING",
              "bytes": "BYTES", "records": "RECORDS"}
INTEGERS = {"int8", "int16", "int32", "int64", "uint16", "uint32"}


def snake(name: str) -> str:
    """Kafka's CamelCase field name in snake_case (``IsrNodes`` -> ``isr_nodes``)."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s).lower()


@dataclass
class Field:
    """One field of a struct, as the generated code declares it."""

    name: str  # Kafka's
    type: str  # Kafka's: int32, []Foo, Foo
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    default: str | None
    about: str
    struct: Struct | None = None  # the struct type of a struct or []struct field

    @property
    def element(self) -> str:
        return self.type[2:] if self.type.startswith("[]") else self.type

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")


@dataclass
class Struct:
    """A struct (or a whole message) of a spec."""

    spec: str  # the message it is defined in, e.g. ProduceResponse
    kafka_name: str
    name: str  # the Python class name
    fields: list[Field]
    about: str
    message: Message | None = None
    uses: list[Versions] = field(default_factory=list)  # the versions of each field holding it


@dataclass
class Message:
    """A request or response spec of a decoded (or walked) API."""

    api: str
    kind: str  # Request, Response
    api_key: int
    spec_versions: Versions
    flexible: Versions
    caps: tuple[int, int]
    root: Struct


def _field(raw: dict[str, Any]) -> Field:
    for key in raw:
        if key not in {"name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default",
                       "about", "fields", "mapKey", "ignorable", "entityType", "zeroCopy"}:
            raise SystemExit(f"field {raw['name']}: the generator does not handle {key!r}")
    versions = Versions.parse(raw["versions"])
    tag = raw.get("tag")
    default = raw.get("default")
    return Field(name=raw["name"], type=raw["type"], versions=versions,
                 nullable=Versions.parse(raw.get("nullableVersions", "none")),
                 tag=None if tag is None else int(tag),
                 tagged=Versions.parse(raw.get("taggedVersions", raw["versions"])) if tag is not None
                 else Versions(1, 0),
                 default=None if default is None else str(default), about=raw.get("about", ""))


def load_message(api: str, kind: str, caps: tuple[int, int], texts: dict[str, str]) -> Message:
    spec_name = f"{api}{kind}"
    spec = parse_spec(texts[f"{spec_name}.json"])
    common = {s["name"]: s for s in spec.get("commonStructs", [])}
    structs: dict[str, Struct] = {}

    def build(kafka_name: str, raw_fields: list[dict[str, Any]], about: str) -> Struct:
        name = config.STRUCT_NAMES.get((spec_name, kafka_name), kafka_name)
        fields = [_field(f) for f in raw_fields]
        for after, extra in config.FIELDS_OF_REMOVED_VERSIONS.get((spec_name, kafka_name), []):
            if any(f.name == extra["name"] for f in fields):
                continue  # specs of a release that still has the field
            at = next(i for i, f in enumerate(fields) if f.name == after)
            fields.insert(at + 1, _field(extra))
        fields.extend(_field(extra) for extra in config.PROJECT_FIELDS.get((spec_name, kafka_name), []))
        for f in fields:
            override = config.DEFAULTS.get((spec_name, kafka_name, f.name))
            if override is not None:
                f.default = override
            if f.element in PRIMITIVES:
                continue
            raw = next((r for r in raw_fields if r["name"] == f.name), None)
            nested = raw.get("fields") if raw else None
            if nested is not None:
                f.struct = build(f.element, nested, f.about)
            elif f.element in common:
                if f.element not in structs:
                    structs[f.element] = build(f.element, common[f.element]["fields"], f.about)
                f.struct = structs[f.element]
            else:
                raise SystemExit(f"{spec_name}: unknown type {f.type}")
        return Struct(spec=spec_name, kafka_name=kafka_name, name=name, fields=fields, about=about)

    root = build(spec_name, spec["fields"], "")
    message = Message(api=api, kind=kind, api_key=int(spec["apiKey"]),
                      spec_versions=Versions.parse(spec["validVersions"]),
                      flexible=Versions.parse(spec.get("flexibleVersions", "none")), caps=caps, root=root)
    root.message = message
    return message


def walk_structs(struct: Struct, within: Versions) -> list[tuple[Struct, Versions]]:
    """Every struct below ``struct`` (children first, the struct last) with the versions it is on the wire."""
    out: list[tuple[Struct, Versions]] = []
    for f in struct.fields:
        if f.struct is not None:
            out.extend(walk_structs(f.struct, within & f.versions))
    out.append((struct, within))
    return out


# ------------------------------------------------------------------------------------------------
# Writing the message classes

HEADER = '''"""Kafka's message classes, generated from Apache Kafka {kafka}'s JSON message specs: do not edit.

Generated by protocolgen (scripts/generate-protocol) from protocolgen/specs/ and protocolgen/config.py;
change those and regenerate. One frozen dataclass per message and struct, one class for every version of
a message (fields a version lacks decode to their default and are not written), declared with the schema
DSL of protocol/schema.py. Field names are Kafka's in snake_case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .api_keys import ApiKey
from .schema import (
{imports}
    ArrayOf,
    Message,
    Struct,
    kfield,
)

NULL_UUID = uuid.UUID(int=0)
'''

#: The table of the messages' class attributes (Message.API_KEY, VALID_VERSIONS, FLEXIBLE_FROM), set on the classes
#: after they are made: mypyc gives a compiled dataclass every annotated name of its body as a field, ClassVars too.
MESSAGE_VERSIONS_HEAD = [
    "#: Every message's API key, versions (lowest, highest) and first flexible version (None: never), set on its",
    "#: class as Message's class attributes (API_KEY, VALID_VERSIONS, FLEXIBLE_FROM). Set here, not in the class",
    "#: body: compiled with mypyc, a dataclass takes every annotated name of its body for a field, ClassVars too.",
    "MESSAGE_VERSIONS: dict[type[Message], tuple[int, tuple[int, int], int | None]] = {",
]
MESSAGE_VERSIONS_TAIL = [
    "for _message, (_api_key, _versions, _flexible_from) in MESSAGE_VERSIONS.items():",
    "    _message.API_KEY, _message.VALID_VERSIONS, _message.FLEXIBLE_FROM = _api_key, _versions, _flexible_from",
]


def _annotation(f: Field) -> str:
    el = f.element
    if el in INTEGERS:
        base = "int"
    elif el == "float64":
        base = "float"
    elif el == "bool":
        base = "bool"
    elif el == "uuid":
        base = "uuid.UUID"
    elif el == "string":
        base = "str"
    elif el == "bytes":
        base = "bytes"
    elif el == "records":
        return "memoryview | bytes | None"
    else:
        assert f.struct is not None
        base = f.struct.name
    nullable = not f.nullable.empty
    if f.is_array:
        return f"tuple[{base}, ...]" + (" | None" if nullable else "")
    return base + (" | None" if nullable else "")


def _default(f: Field) -> str:
    d = f.default
    el = f.element
    if d == "null":
        return "None"
    if f.is_array:
        return "()" if d is None else _bad_default(f)
    if el in INTEGERS:
        return "0" if d is None else str(int(d, 0))
    if el == "float64":
        return "0.0" if d is None else repr(float(d))
    if el == "bool":
        return "False" if d is None or d == "false" else ("True" if d == "true" else _bad_default(f))
    if el == "string":
        if d is None:  # null when it may be null in every version it exists in
            return "None" if f.nullable.covers(f.versions) else '""'
        return json.dumps(d)
    if el == "bytes":
        return 'b""' if d is None else _bad_default(f)
    if el == "records":
        return "None"
    if el == "uuid":
        return "NULL_UUID" if d is None else _bad_default(f)
    assert f.struct is not None
    return f"{f.struct.name}()"


def _bad_default(f: Field) -> str:
    raise SystemExit(f"field {f.name}: cannot use default {f.default!r}")


def _ktype(f: Field) -> str:
    el = PRIMITIVES.get(f.element) or (f.struct.name if f.struct is not None else "?")
    return f"ArrayOf({el})" if f.is_array else el


def _normalized(f: Field, within: Versions) -> tuple[Versions, Versions, Versions]:
    """(versions, nullable, tagged) of a field of a struct used in several places: a range that covers
    every version the struct is on the wire in is written "0+"."""
    present = f.versions & within
    versions = Versions(0, MAX_VERSION) if f.versions.covers(within) else f.versions
    nullable = f.nullable
    if not (f.nullable & present).empty and f.nullable.covers(present):
        nullable = Versions(0, MAX_VERSION)
    tagged = f.tagged
    if f.tag is not None and f.tagged.covers(present):
        tagged = Versions(0, MAX_VERSION)
    return versions, nullable, tagged


def _field_line(f: Field, versions: Versions, nullable: Versions, tagged: Versions) -> str:
    args = [_ktype(f), json.dumps(versions.text())]
    if not nullable.empty:
        args.append(f"nullable={json.dumps(nullable.text())}")
    if f.tag is not None:
        args.append(f"tag={f.tag}")
        if tagged != versions:
            args.append(f"tagged_versions={json.dumps(tagged.text())}")
    args.append(f"default={_default(f)}")
    return f"    {snake(f.name)}: {_annotation(f)} = kfield({', '.join(args)})"


def _docstring(text: str) -> str:
    text = " ".join(text.split()).replace('"""', "'''").replace("\\", "\\\\")
    return text if text.endswith(".") else text + "."


def _class_code(struct: Struct, lines: list[str]) -> str:
    m = struct.message
    out = ["", "", "@dataclass(frozen=True, slots=True, kw_only=True)"]
    if m is not None:
        lo, hi = m.caps
        out += [f"class {struct.name}(Message):",
                f'    """{m.api}{m.kind} v{lo}-v{hi} (API key {m.api_key}; Kafka {m.spec_versions.text()},'
                f' flexible {m.flexible.text()})."""']
    else:
        out += [f"class {struct.name}(Struct):", f'    """{_docstring(struct.about or struct.kafka_name)}"""']
    if lines:
        out.append("")
    return "\n".join(out + lines)


def _message_versions_row(m: Message) -> str:
    """A message's row of MESSAGE_VERSIONS: its class, API key, versions and first flexible version."""
    lo, hi = m.caps
    flexible = "None" if m.flexible.empty else str(m.flexible.low)
    return f"    {m.root.name}: (ApiKey.{_api_member(m.api)}, ({lo}, {hi}), {flexible}),"


def generate_messages(messages: list[Message], kafka: str) -> str:
    occurrences: dict[str, list[tuple[Struct, Versions]]] = {}
    order: list[str] = []
    for m in messages:
        for struct, within in walk_structs(m.root, Versions(0, MAX_VERSION)):
            if struct.name not in occurrences:
                occurrences[struct.name] = []
                order.append(struct.name)
            occurrences[struct.name].append((struct, within))
    blocks: list[str] = []
    used: set[str] = set()
    for name in order:
        places = occurrences[name]
        shared = len(places) > 1
        rendered: set[tuple[str, ...]] = set()
        for struct, within in places:
            lines = []
            for f in struct.fields:
                v, n, t = _normalized(f, within) if shared else (f.versions, f.nullable, f.tagged)
                lines.append(_field_line(f, v, n, t))
                used.add(_ktype(f).removeprefix("ArrayOf(").removesuffix(")"))
            rendered.add(tuple(lines))
        if len(rendered) > 1:
            specs = sorted({s.spec for s, _ in places})
            raise SystemExit(f"struct {name} differs between {specs}: name them apart in config.STRUCT_NAMES")
        blocks.append(_class_code(places[0][0], list(next(iter(rendered)))))
    imports = "\n".join(f"    {p}," for p in sorted(set(PRIMITIVES.values()) & used, key=_natural))
    registry = ["", "", "#: Every message class by API key (requests).",
                "REQUEST_TYPES: dict[int, type[Message]] = {"]
    registry += [f"    ApiKey.{_api_member(m.api)}: {m.root.name}," for m in messages if m.kind == "Request"]
    registry += ["}", "#: Every message class by API key (responses).", "RESPONSE_TYPES: dict[int, type[Message]] = {"]
    registry += [f"    ApiKey.{_api_member(m.api)}: {m.root.name}," for m in messages if m.kind == "Response"]
    registry += ["}", *MESSAGE_VERSIONS_HEAD]
    registry += [_message_versions_row(m) for m in messages]
    registry += ["}", *MESSAGE_VERSIONS_TAIL]
    names = sorted([*order, "MESSAGE_VERSIONS", "NULL_UUID", "REQUEST_TYPES", "RESPONSE_TYPES"])
    all_ = ["", "__all__ = ["] + [f'    "{n}",' for n in names] + ["]"]
    return HEADER.format(kafka=kafka, imports=imports) + "\n".join([*all_, *blocks, *registry]) + "\n"


def _natural(name: str) -> tuple[str, int]:
    """INT8 before INT16, as isort orders them."""
    digits = re.search(r"[0-9]+$", name)
    return (name[: digits.start()], int(digits.group())) if digits else (name, -1)


def _api_member(api: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", api).upper()


# ------------------------------------------------------------------------------------------------
# Writing the version tables

VERSIONS_HEADER = '''"""Kafka's version facts, generated from Apache Kafka {kafka}'s JSON message specs: do not edit.

Generated by protocolgen (scripts/generate-protocol). The fast walkers (protocol/produce.py,
metadata_scan.py, metadata_splice.py, fetch.py, headers.py) read here which version has which field, from
which version a message is flexible, and the tags of tagged fields: the same specs the message classes
(protocol/kafka_messages.py) come from. Names: ``<MESSAGE>_<FIELD PATH>_SINCE`` (first version with the
field), ``_UNTIL`` (last), ``_NULLABLE_SINCE``, ``_TAG``; ``<API>_MIN_VERSION`` / ``_MAX_VERSION``: the versions
protocol/ supports (protocolgen/config.py), ``<API>_FLEXIBLE_SINCE``: the first flexible version. ``ApiKey``:
every API key the specs define, by Kafka's name.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

#: The Kafka release the specs come from.
KAFKA_VERSION: Final = "{kafka}"
'''


def _facts(prefix: str, struct: Struct, within: Versions, out: list[str]) -> None:
    """The facts of ``struct``'s fields that say more than the versions ``within`` it is on the wire in."""
    for f in struct.fields:
        name = f"{prefix}_{snake(f.name).upper()}"
        present = f.versions & within
        if present.low > within.low:
            out.append(f"{name}_SINCE: Final = {present.low}")
        if present.high < within.high:
            out.append(f"{name}_UNTIL: Final = {present.high}")
        nullable = f.nullable & present
        if not nullable.empty and nullable.low > present.low:
            out.append(f"{name}_NULLABLE_SINCE: Final = {nullable.low}")
        if f.tag is not None:
            out.append(f"{name}_TAG: Final = {f.tag}")
            tagged = f.tagged & present
            if tagged.low > present.low:
                out.append(f"{name}_TAGGED_SINCE: Final = {tagged.low}")
        if f.struct is not None:
            _facts(name, f.struct, present, out)


def generate_versions(messages: list[Message], texts: dict[str, str], kafka: str) -> str:
    out = [VERSIONS_HEADER.format(kafka=kafka)]
    apis: dict[str, list[Message]] = {}
    for m in messages:
        apis.setdefault(m.api, []).append(m)
    for api, pair in apis.items():
        request, response = pair
        if request.flexible != response.flexible:
            raise SystemExit(f"{api}: request and response flexible versions differ")
        member = _api_member(api)
        lo, hi = request.caps
        out.append(f"\n# {api} (key {request.api_key}): Kafka {kafka} defines v{request.spec_versions.text()}")
        out.append(f"{member}_MIN_VERSION: Final = {lo}")
        out.append(f"{member}_MAX_VERSION: Final = {hi}")
        out.append(f"{member}_FLEXIBLE_SINCE: Final = {request.flexible.low if not request.flexible.empty else -1}")
        for m in pair:
            facts: list[str] = []
            if m.api in config.WALKED_ONLY_APIS and m.kind == "Request":
                continue  # only their answers are walked
            _facts(f"{member}_{m.kind.upper()}", m.root, Versions(0, MAX_VERSION), facts)
            out.extend(facts)
    for header in config.HEADER_SPECS:
        spec = parse_spec(texts[f"{header}.json"])
        member = _api_member(header)
        out.append(f"\n# {header}: v{spec['validVersions']}")
        out.append(f"{member}_FLEXIBLE_SINCE: Final = {Versions.parse(spec['flexibleVersions']).low}")
        for raw in spec["fields"]:
            v = Versions.parse(raw["versions"])
            if v.low > 0:
                out.append(f"{member}_{snake(raw['name']).upper()}_SINCE: Final = {v.low}")
    summary = json.loads(texts[API_SUMMARY])
    out.append("\n\nclass ApiKey(IntEnum):")
    out.append('    """Kafka API keys, named as in ``org.apache.kafka.common.protocol.ApiKeys``: every key of the specs."""')
    out.append("")
    for key, entry in summary.items():
        out.append(f"    {_api_member(entry['name'])} = {key}")
    for alias, key in config.API_KEY_ALIASES.items():
        out.append(f"    {alias} = {key}  # {summary[str(key)]['name']}'s older name (protocolgen/config.py)")
    out.append("\n#: First flexible version of every API key Kafka defines (None: never flexible); the keys Kafka")
    out.append("#: 4.0 removed keep their last one (protocolgen/config.py). Picks the header versions.")
    out.append("FIRST_FLEXIBLE_VERSION: Final[dict[int, int | None]] = {")
    for key, entry in summary.items():
        flexible = Versions.parse(entry["flexibleVersions"])
        first: int | None = None if flexible.empty else flexible.low
        if int(key) in config.REMOVED_API_FIRST_FLEXIBLE:
            first = config.REMOVED_API_FIRST_FLEXIBLE[int(key)]
        out.append(f"    {key}: {first},  # {entry['name']} {entry['validVersions']}")
    out.append("}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# Command line


def generate(texts: dict[str, str]) -> dict[Path, str]:
    kafka = texts[KAFKA_VERSION_FILE].strip()
    messages = [load_message(api, kind, caps, texts)
                for api, caps in config.DECODED_APIS.items() for kind in ("Request", "Response")]
    walked = [load_message(api, kind, caps, texts)
              for api, caps in config.WALKED_ONLY_APIS.items() for kind in ("Request", "Response")]
    for m in messages + walked:
        lo, hi = m.caps
        if hi > m.spec_versions.high:
            raise SystemExit(f"{m.api}: cap v{hi} is above Kafka {kafka}'s v{m.spec_versions.high}")
        if hi < m.spec_versions.high:
            print(f"note: Kafka {kafka} defines {m.api}{m.kind} up to v{m.spec_versions.high}, "
                  f"the cap is v{hi} (protocolgen/config.py)", file=sys.stderr)
    from .walkers import generate_walkers

    return {MESSAGES_OUT: generate_messages(messages, kafka),
            VERSIONS_OUT: generate_versions(messages + walked, texts, kafka),
            WALKERS_OUT: generate_walkers(messages + walked, kafka)}


def committed_specs() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(SPECS.iterdir()) if p.is_file() and p.name != "README.md"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/generate-protocol", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 (and show the difference) when the output would change")
    parser.add_argument("--specs", type=Path, help="a kafka-clients jar or a folder of its common/message specs")
    parser.add_argument("--kafka-version", help="the Kafka release of --specs (default: from the jar's name)")
    parser.add_argument("--out", type=Path, default=ROOT, help="write under this folder instead of the repository")
    args = parser.parse_args(argv)
    specs = import_specs(args.specs, args.kafka_version) if args.specs else committed_specs()
    outputs: dict[Path, str] = {Path("protocolgen") / "specs" / name: text for name, text in specs.items()}
    outputs.update(generate(specs))
    changed = 0
    for path, text in outputs.items():
        target = args.out / path
        old = target.read_text() if target.exists() else ""
        if old == text:
            continue
        changed += 1
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       f"a/{path}", f"b/{path}"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {path}")
    if args.specs:  # spec files of APIs no longer generated go with the old release
        for stale in sorted(set(committed_specs()) - set(specs)):
            changed += 1
            print(f"{'would delete' if args.check else 'deleted'} protocolgen/specs/{stale}")
            if not args.check:
                (args.out / "protocolgen" / "specs" / stale).unlink()
    if args.check and changed:
        print(f"{changed} generated file(s) differ: run scripts/generate-protocol", file=sys.stderr)
        return 1
    return 0

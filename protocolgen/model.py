"""The generator's model of Kafka's JSON message specs: version ranges, fields, structs and messages, read from the
spec files (with protocolgen/config.py's few facts the specs do not say). protocolgen/generate.py writes the message
classes and version tables from it, protocolgen/walkers.py the skip functions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from insync_proxy.protocol.schema import VersionRange

from . import config


def parse_spec(text: str) -> dict[str, Any]:
    """A spec file: JSON with whole-line ``//`` comments."""
    spec: dict[str, Any] = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    return spec


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
    map_key: bool = False  # Kafka's mapKey: the field that names an element of its array (a topic's name or id)

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
                 default=None if default is None else str(default), about=raw.get("about", ""),
                 map_key=bool(raw.get("mapKey", False)))


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


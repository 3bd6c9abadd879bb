"""The walks the hot path runs, from the specs: a capture IR beside walkers.py's skip `Op`s, emitted as Python (into
protocol/kafka_walkers.py) and, the Produce walks, as C (protocol/_wire_walkers.h, included by protocol/_wire.c).

config.CAPTURED_WALKS says, per message, where a walk starts and stops, which fields it captures and where its hooks
are; the specs say the rest: which field exists at which version, its type, compact or not, tagged fields. For every
version up to the caps the walk is resolved into a `Node` tree (the versions resolved here, not at run time, as for the
skip functions), and each distinct tree becomes one straight-line function, named after the lowest version that has
it, in both languages:

* Python ``walk_<message>_v<N>(buf, pos, hooks) -> end`` and ``<MESSAGE>_WALK`` per version; the hooks are the methods
  of the generated ``<Message>Hooks`` class, which the hand-written walks (protocol/produce.py, metadata_scan.py)
  implement: the Python objects they build, their error messages, the record-batch header peek.
* C ``walk_<message>_v<N>(f, pos, w)`` and ``walk_<message>(version, f, pos, w)``; the hooks are static functions of
  protocol/_wire.c, declared here so that a signature that drifts fails the build. A C walk returns 0 (walked), -1
  (left to the Python walk: anything cut, a non-empty tagged-field section, elements of an array of structs it skips)
  or a hook's -2 (a Python error is set).

A hook is called at the end of its struct's element (after the elements inside it) with the captures of the structs
enclosing it (the message's own excepted), its own, and the element's ``start``, ``tags_start`` (its tagged fields;
``end`` where it has none) and ``end``. Int captures are read when their hook is called, from where their fixed-width
run started; a hook that waits for a non-zero field tests its bytes first, and a mapKey only such hooks use is decoded
when one of them is called. An element whose flexible tail is fields with one-byte empty forms (an empty array, a null
string, no tagged fields) is tested for those bytes in one comparison before the general path: every acknowledged
Produce partition ends in ``1, 0, 0``.

The Metadata scan's walk (Python only: config.CAPTURED_WALKS' ``c``) adds what a scan needs, each resolved per version
like the rest: captured strings (None where null, a version allowing it), uuids, bools (checked 0 or 1), int arrays (a
precompiled struct per length up to 15) and tagged ints (tag 637, ``min_insync_replicas``, read from the tagged
fields); a field a version lacks is handed its default, so the hooks are the same for every version; ``spans``: where a
run of fields starts and ends (a broker's host and port, the controller id); a captured array of structs (a topic's
partitions) is skipped by an elements walk of its own, ``walk_<message>_<field>_v<N>(buf, pos, count, starts)``,
which appends each element's start to ``starts`` when given (the splice's offsets), its count and span handed to the
hook; ``rows``: the same elements read on demand, ``read_<message>_<field>_v<N>(buf, pos, count, starts)``, as a
NamedTuple of their captures; ``steps``: the top-level array a caller walks a few elements at a time, which cuts the
walk in three: ``walk_<message>_v<N>`` from the body's start to that array's elements (its count read;
``<message>_head`` hook), ``walk_<message>_<field>_v<N>(buf, pos, count, hooks, offsets)`` over ``count`` of them,
``walk_<message>_after_<field>_v<N>`` after them (the ``<message>`` hook).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from dataclasses import field as default_of
from typing import cast

from . import config
from .model import Field, Message, Struct, Versions, snake
from .walkers import FIXED, Layouts, Op

#: A line that assigns what struct reads (Any): its names are declared int (native ints in the compiled build).
_UNPACKED = re.compile(r"^\s*([a-z_0-9, ]+?),? = _[A-Z0-9_a-z]+\.unpack_from")
#: struct format letters of the captured ints, by width.
_FORMAT = {1: "b", 2: "h", 4: "i", 8: "q"}
_C_READ = {1: "(int8_t)f->p[{at}]", 2: "be16(f->p + {at})", 4: "be32(f->p + {at})"}


@dataclass(frozen=True)
class Capture:
    """A value a walk hands to a hook (or puts in a row): an int of a fixed-width run (a bool too), a mapKey (string or
    uuid), a record set, a string, a uuid, an int array, an array of structs the walk skips (its count and its
    elements' span; their starts recorded on request), a tagged int, or a span of fields (where the first starts, where
    the last ends). ``absent``: not on the wire at this version, the hook is handed ``default``."""

    name: str  # snake: acks, key, records, host
    kind: str  # int, bool, key, records, string, uuid, ints, array, tagged, span
    field: str = ""  # Kafka's name of its field (a span's first)
    optional: bool = False  # a string or uuid that may be None
    default: str = ""  # what is handed over at a version without the field
    last: str = ""  # a span's last field (snake)
    absent: bool = False

    def python_type(self) -> str:
        """The type of its one value (a row's field)."""
        if self.kind in ("int", "tagged"):
            return "int"
        if self.kind == "bool":
            return "bool"
        if self.kind == "string":
            return "str | None" if self.optional else "str"
        if self.kind == "uuid":
            return "uuid.UUID | None" if self.optional else "uuid.UUID"
        if self.kind == "ints":
            return "tuple[int, ...]"
        raise SystemExit(f"{self.name}: a {self.kind} capture is not one value")

    def python_params(self) -> list[str]:
        if self.kind == "key":
            return [f"{self.name}: str | uuid.UUID", f"{self.name}_end: int"]
        if self.kind == "records":
            return [f"{self.name}_start: int", f"{self.name}_size: int"]
        if self.kind == "array":
            return [f"{self.name}_count: int", f"{self.name}_start: int", f"{self.name}_end: int"]
        if self.kind == "span":
            return [f"{self.name}_start: int", f"{self.last}_end: int"]
        return [f"{self.name}: {self.python_type()}"]

    def python_args(self) -> list[str]:
        if self.absent:
            return self.default.split(", ")
        if self.kind == "key":
            return [self.name, f"{self.name}_end"]
        if self.kind == "records":
            return [f"{self.name}_start", f"{self.name}_size"]
        if self.kind == "array":
            return [f"{self.name}_count", f"{self.name}_start", f"{self.name}_end"]
        if self.kind == "bool":
            return [f"{self.name} == 1"]
        return [self.name]

    def c_params(self) -> list[str]:
        if self.kind == "int":
            return [f"int64_t {self.name}"]
        if self.kind == "key":
            return [f"Key {self.name}", f"Py_ssize_t {self.name}_end"]
        if self.kind == "records":
            return [f"Py_ssize_t {self.name}_start", f"int64_t {self.name}_size"]
        raise SystemExit(f"{self.name}: the C walks do not capture {self.kind}")


@dataclass(frozen=True)
class Step:
    """One step of a walk at one version.

    fixed: a run of fixed-width fields (``ints``: the captured ones, (name, offset, width); ``places``: those and the
    ones a span starts or ends at, whose place the hook needs); skip: a field skipped whole (``op``, walkers.py's);
    key: the element's mapKey (``key_type`` string or uuid); records: a record set captured as (start, size); string,
    uuid, ints: a captured string (``nullable`` at this version), uuid, int array (of ``element``); array: a captured
    array of structs, skipped by its own elements walk (``node``: its element); each: an array of structs walked
    element by element (``node``; ``stepped``: the top-level array a caller walks in steps); tags: the tagged fields
    (``tagged``: the captured ones, (name, tag, width)). ``empty``: the one byte of the field's empty form (empty
    array, null string, no tags), None if it has none. ``start_mark`` / ``end_mark``: the variables that keep where
    the field starts / ends (a span's bounds outside fixed runs).
    """

    kind: str
    what: str
    width: int = 0
    ints: tuple[tuple[str, int, int], ...] = ()
    op: Op | None = None
    key_type: str = ""
    node: Node | None = None
    empty: int | None = None
    places: tuple[tuple[str, int, int], ...] = ()
    nullable: bool = False
    element: str = ""
    stepped: bool = False
    tagged: tuple[tuple[str, int, int], ...] = ()
    start_mark: str = ""
    end_mark: str = ""


@dataclass(frozen=True)
class Node:
    """A struct as one walk reads it at one version: its steps, and the hook called at the end of each element."""

    path: str  # "" the message, else its array fields' names joined by "."
    field: str  # the snake name of its array field (the message's for the root)
    hook: str | None  # the hook's name (Python method), None: none
    when: str | None  # the int capture that must be non-zero for the hook
    own: tuple[Capture, ...]
    inherited: tuple[Capture, ...]
    counted: bool  # the walk counts this array's elements for the message's hook
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Walk:
    """config.CAPTURED_WALKS' entry for one message."""

    message: Message
    start: str | None
    stop: str | None
    captures: dict[str, tuple[str, ...]]
    hooks: tuple[str, ...]
    when: dict[str, str]
    counts: tuple[str, ...]
    at: tuple[str, ...]
    spans: dict[str, tuple[tuple[str, str], ...]] = default_of(default_factory=dict)
    steps: str | None = None  # the top-level array walked in steps: the walk is cut before and after its elements
    rows: dict[str, str] = default_of(default_factory=dict)  # captured arrays read on demand: the class of their rows
    hooked_by: str = ""  # the module whose classes implement the hooks
    c: bool = True  # emitted in C too

    @property
    def spec(self) -> str:
        return f"{self.message.api}{self.message.kind}"

    @property
    def function(self) -> str:
        return snake(self.spec)

    def flexible(self, version: int) -> bool:
        return not self.message.flexible.empty and version >= self.message.flexible.low

    def root(self, version: int, layouts: Layouts) -> Node:
        return self._node(self.message.root, "", self.function, (), version, layouts)

    def _capture(self, struct: Struct, name: str) -> Capture:
        """The capture ``name`` of ``struct`` (config.CAPTURED_WALKS), its kind and what it is at a version without it."""
        if name == "mapKey":
            return Capture("key", "key")
        f = next((f for f in struct.fields if f.name == name), None)
        if f is None:
            raise SystemExit(f"{self.spec}: {struct.kafka_name} has no {name} (config.CAPTURED_WALKS)")
        lo, hi = self.message.caps
        caps = Versions(lo, hi)
        always = f.versions.covers(caps) and f.tag is None
        what = snake(f.name)
        if f.tag is not None:
            if f.type not in ("int8", "int16", "int32", "int64"):
                raise SystemExit(f"{self.spec}.{f.name}: only signed ints are captured from the tagged fields")
            return Capture(what, "tagged", f.name, default=_int_default(f))
        if f.type == "bool":
            return Capture(what, "bool", f.name, default="True" if f.default == "true" else "False")
        if f.type in ("int8", "int16", "int32", "int64"):
            return Capture(what, "int", f.name, default=_int_default(f))
        if f.type == "string":
            optional = not (f.nullable & f.versions & caps).empty or (not always and f.default == "null")
            default = "None" if f.default == "null" or f.default is None and optional else json.dumps(f.default or "")
            return Capture(what, "string", f.name, optional=optional, default=default)
        if f.type == "uuid":
            return Capture(what, "uuid", f.name, optional=not always, default="None")
        if f.type == "records":
            return Capture(what, "records", f.name)
        if f.is_array and f.element in ("int16", "int32", "int64"):
            return Capture(what, "ints", f.name, default="()")
        if f.is_array and f.struct is not None:
            return Capture(what, "array", f.name, default="0, -1, -1")
        raise SystemExit(f"{self.spec}.{f.name}: a {f.type} field is not captured (config.CAPTURED_WALKS)")

    def _node(self, struct: Struct, path: str, field: str, inherited: tuple[Capture, ...], version: int,
              layouts: Layouts) -> Node:
        flexible = self.flexible(version)
        wanted = self.captures.get(path, ())
        spans = self.spans.get(path, ())
        firsts = {first: snake(first) for first, _ in spans}
        lasts = {last: snake(last) for _, last in spans}
        steps: list[Step] = []
        run: list[tuple[str, int]] = []  # (field, width) of the fixed run being built
        ints: list[tuple[str, int, int]] = []
        places: list[tuple[str, int, int]] = []
        fields = [f for f in struct.fields if f.versions.low <= version <= f.versions.high
                  and not (f.tag is not None and f.tagged.low <= version <= f.tagged.high)]
        if not path:  # from the start field, before the stop field (or where it would be at this version)
            order = [f.name for f in struct.fields]
            first = order.index(self.start) if self.start else 0
            last = order.index(self.stop) if self.stop else len(order)
            fields = [f for f in fields if first <= order.index(f.name) < last]
        on_wire = {f.name for f in fields}
        tagged_here = {f.name for f in struct.fields if flexible and f.tag is not None
                       and f.versions.low <= version <= f.versions.high and f.tagged.low <= version <= f.tagged.high}
        missing = [c for c in (*wanted, *firsts, *lasts) if c != "mapKey" and c not in {f.name for f in struct.fields}]
        if missing:
            raise SystemExit(f"{self.spec} v{version}: {path or 'the message'} has no {', '.join(missing)} "
                             f"(config.CAPTURED_WALKS)")
        own: list[Capture] = []
        for name in wanted:
            capture = self._capture(struct, name)
            present = name == "mapKey" or (name in tagged_here if capture.kind == "tagged" else name in on_wire)
            own.append(replace(capture, absent=not present))
        for opening, closing in spans:
            own.append(Capture(snake(opening), "span", opening, default="-1, -1", last=snake(closing),
                               absent=opening not in on_wire or closing not in on_wire))

        def close_run() -> None:
            if run:
                steps.append(Step("fixed", ", ".join(snake(n) for n, _ in run), width=sum(w for _, w in run),
                                  ints=tuple(ints), places=tuple(places)))
                run.clear()
                ints.clear()
                places.clear()

        for f in fields:
            name = snake(f.name)
            keyed = "mapKey" in wanted and f.map_key
            captured = f.name in wanted
            step: Step | None = None
            if keyed:
                close_run()
                step = Step("key", name, key_type="uuid" if f.type == "uuid" else "string")
            elif f.type in FIXED and not (captured and f.type == "uuid"):
                if captured:
                    if f.type not in ("int8", "int16", "int32", "int64", "bool"):
                        raise SystemExit(f"{self.spec}.{f.name}: only signed ints and bools are captured, not {f.type}")
                    ints.append((name, sum(w for _, w in run), FIXED[f.type]))
                if captured or f.name in firsts or f.name in lasts:
                    places.append((name, sum(w for _, w in run), FIXED[f.type]))
                run.append((f.name, FIXED[f.type]))
                continue
            elif captured and f.type == "records":
                close_run()
                step = Step("records", name)
            elif captured and f.type == "string":
                close_run()
                step = Step("string", name, nullable=version in f.nullable)
            elif captured and f.type == "uuid":
                close_run()
                step = Step("uuid", name)
            elif captured and f.is_array and f.struct is None:
                close_run()
                step = Step("ints", name, element=f.element)
            elif captured and f.is_array and f.struct is not None:
                close_run()
                inner = f"{path}.{f.name}" if path else f.name
                if inner in self.hooks:
                    raise SystemExit(f"{self.spec}.{inner}: a captured array is skipped, its elements have no hook")
                step = Step("array", name, node=self._node(f.struct, inner, name, (), version, layouts))
            elif captured:
                raise SystemExit(f"{self.spec}.{f.name}: a {f.type} field is not captured (config.CAPTURED_WALKS)")
            elif f.is_array and f.struct is not None and self._walked(path, f):
                close_run()
                inner = f"{path}.{f.name}" if path else f.name
                passed = inherited + tuple(own) if path else inherited
                step = Step("each", name, node=self._node(f.struct, inner, name, passed, version, layouts),
                            stepped=not path and f.name == self.steps)
            else:
                close_run()
                step = Step("skip", name, op=_skip_op(layouts, f, version, flexible), empty=_empty_byte(f, flexible))
            steps.append(replace(step, start_mark=f"{name}_start" if f.name in firsts else "",
                                 end_mark=f"{name}_end" if f.name in lasts else ""))
        close_run()
        if flexible and (not path and self.stop is None or path):
            tagged = tuple((c.name, self._tag_of(struct, c.field), FIXED[self._type_of(struct, c.field)])
                           for c in own if c.kind == "tagged" and not c.absent)
            steps.append(Step("tags", "tagged fields", empty=0, tagged=tagged))
        when = self.when.get(path)
        return Node(path=path, field=field, hook=field if path in self.hooks else None,
                    when=None if when is None else snake(when), own=tuple(own), inherited=inherited,
                    counted=path in self.counts, steps=tuple(steps))

    @staticmethod
    def _tag_of(struct: Struct, name: str) -> int:
        tag = next(f.tag for f in struct.fields if f.name == name)
        assert tag is not None
        return tag

    @staticmethod
    def _type_of(struct: Struct, name: str) -> str:
        return next(f.type for f in struct.fields if f.name == name)

    def _walked(self, path: str, f: Field) -> bool:
        inner = f"{path}.{f.name}" if path else f.name
        return any(p == inner or p.startswith(inner + ".") for p in (*self.captures, *self.hooks))


def _int_default(f: Field) -> str:
    return "0" if f.default is None else str(int(f.default, 0))


def _skip_op(layouts: Layouts, f: Field, version: int, flexible: bool) -> Op:
    name = snake(f.name)
    if f.type in ("string",):
        return Op("string", what=name)
    if f.type in ("bytes", "records"):
        return Op("bytes", what=name)
    if f.is_array and f.struct is not None:
        return Op("array_struct", target=layouts.skip_of(f.struct, version), what=name)
    if f.is_array and f.element in FIXED:
        return Op("array_fixed", FIXED[f.element], what=name)
    if f.is_array and f.element == "string":
        return Op("array_string", what=name)
    if f.struct is not None:
        return Op("struct", target=layouts.skip_of(f.struct, version), what=name)
    raise SystemExit(f"{f.name}: the walk generator does not skip {f.type}")


def _empty_byte(f: Field, flexible: bool) -> int | None:
    """The one byte of a flexible field's empty form: an empty compact array (1), a null compact string (0, where the
    field defaults to null) or an empty one (1); None for a field without one."""
    if not flexible:
        return None
    if f.is_array:
        return 1
    if f.type in ("string", "bytes", "records"):
        return 0 if f.default == "null" else 1
    return None


def walks(messages: list[Message]) -> list[Walk]:
    by_name = {f"{m.api}{m.kind}": m for m in messages}
    out: list[Walk] = []
    for spec, entry in config.CAPTURED_WALKS.items():
        if spec not in by_name:
            raise SystemExit(f"config.CAPTURED_WALKS: {spec} is not a decoded message")
        out.append(Walk(message=by_name[spec], start=cast("str | None", entry["start"]),
                        stop=cast("str | None", entry["stop"]),
                        captures=cast("dict[str, tuple[str, ...]]", entry["captures"]),
                        hooks=cast("tuple[str, ...]", entry["hooks"]), when=cast("dict[str, str]", entry["when"]),
                        counts=cast("tuple[str, ...]", entry["counts"]), at=cast("tuple[str, ...]", entry["at"]),
                        spans=cast("dict[str, tuple[tuple[str, str], ...]]", entry.get("spans", {})),
                        steps=cast("str | None", entry.get("steps")), rows=cast("dict[str, str]", entry.get("rows", {})),
                        hooked_by=cast("str", entry["hooked_by"]), c=cast("bool", entry.get("c", True))))
    return out


def layouts_of(walk: Walk, layouts: Layouts, at: str = "") -> tuple[dict[int, str], list[tuple[str, Node, bool, list[int]]]]:
    """Each version's function name, and each distinct walk (name, root, flexible, its versions); with ``at``, those
    of the walk from the body's start to that top-level field (no captures, no hooks)."""
    lo, hi = walk.message.caps
    per_version: dict[int, str] = {}
    distinct: list[tuple[str, Node, bool, list[int]]] = []
    if at:
        walk = replace(walk, start=None, stop=at, captures={}, hooks=(), when={}, counts=(), spans={})
    for version in range(lo, hi + 1):
        root = walk.root(version, layouts)
        flexible = walk.flexible(version)
        found = next((d for d in distinct if d[1] == root and d[2] == flexible), None)
        if found is None:
            name = f"{walk.function}_{snake(at)}_at_v{version}" if at else f"walk_{walk.function}_v{version}"
            found = (name, root, flexible, [])
            distinct.append(found)
        found[3].append(version)
        per_version[version] = found[0]
    return per_version, distinct


def _versions_text(versions: list[int]) -> str:
    return f"v{versions[0]}" if len(versions) == 1 else f"v{versions[0]}-v{versions[-1]}"


def _hook_nodes(root: Node) -> list[Node]:
    out: list[Node] = []

    def visit(node: Node) -> None:
        for step in node.steps:
            if step.node is not None:
                visit(step.node)
        if node.hook is not None:
            out.append(node)

    visit(root)
    return out


def _counted(root: Node) -> list[str]:
    out: list[str] = []

    def visit(node: Node) -> None:
        if node.counted:
            out.append(f"{node.field}_count")
        for step in node.steps:
            if step.node is not None:
                visit(step.node)

    visit(root)
    return out


def _lazy_keys(root: Node) -> set[str]:
    """The paths of nodes whose mapKey only hooks that wait for a field use: decoded when one is called."""
    lazy: set[str] = set()

    def users(node: Node, path: str) -> list[Node]:
        found = [n for n in _hook_nodes(node) if any(c.kind == "key" for c in (*n.own, *n.inherited))]
        return [n for n in found if n.path == path or n.path.startswith(path + ".")]

    def visit(node: Node) -> None:
        if any(c.kind == "key" for c in node.own):
            using = users(node, node.path)
            if using and all(n.when is not None for n in using):
                lazy.add(node.path)
        for step in node.steps:
            if step.node is not None:
                visit(step.node)

    visit(root)
    return lazy


# ------------------------------------------------------------------------------------------------
# Python


class _Python:
    """One walk function in Python."""

    def __init__(self, walk: Walk, flexible: bool, lazy: set[str], formats: dict[str, str],
                 arrays: dict[tuple[Node, bool], str] | None = None) -> None:
        self.walk = walk
        self.flexible = flexible
        self.lazy = lazy
        self.formats = formats  # struct format -> constant name
        self.arrays = arrays or {}  # a captured array's element node -> its elements walk
        self.lines: list[str] = []
        self.ints: dict[str, tuple[str, int, int]] = {}  # capture or span bound -> (run variable, offset, width)
        self.runs: dict[int, int] = {}  # depth -> fixed runs with a variable so far (at<d>, at<d>_1, ...)
        self.declared: dict[str, str] = {}  # variables of the captured strings, uuids, arrays: their types
        self.skipping = False  # an elements walk: the captured fields are skipped, not read
        self.inline_tags = False  # an empty tagged-field section tested in place, not by a call
        self.root: Node | None = None

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * (depth + 1) + text)

    def declarations(self) -> list[str]:
        """The typed names of the function (struct reads are Any: declared int, native ints in the compiled build)."""
        declared = sorted({v.strip() for line in self.lines if (m := _UNPACKED.match(line))
                           for v in m.group(1).split(",") if v.strip()})
        if any(line.strip().startswith("key = None") for line in self.lines):
            declared.append("key: str | uuid.UUID | None")
        declared += [f"{name}: {kind}" for name, kind in sorted(self.declared.items()) if name not in declared]
        return [f"    {v}" if ":" in v else f"    {v}: int" for v in declared]

    def function(self, name: str, root: Node, versions: list[int]) -> list[str]:
        where = f"from {snake(self.walk.start)}" if self.walk.start else "from the body's start"
        until = f", up to {snake(self.walk.stop)}" if self.walk.stop else ""
        self.emit(0, f'"""{self.walk.spec} {_versions_text(versions)} {where}{until}: the hooks see every '
                     f'captured value; returns where the walk ends."""')
        for count in _counted(root):
            self.emit(0, f"{count} = 0")
        self.node(root, 0)
        self.emit(0, "return pos")
        head = [f"def {name}(buf: Buffer, pos: int, hooks: {_hooks_class(self.walk)}) -> int:"]
        return head + [self.lines[0]] + self.declarations() + self.lines[1:]

    def head(self, name: str, root: Node, versions: list[int]) -> list[str]:
        """A stepped walk's start: the message from the body's start to its stepped array, whose count it reads."""
        k, stepped = _stepped(root)
        count = f"{stepped.what}_count"
        self.emit(0, f'"""{self.walk.spec} {_versions_text(versions)} from the body\'s start to its {stepped.what} (their '
                     f'count read): the hooks see every captured value before them; returns where the first starts."""')
        self.emit(0, "start0 = pos")
        for step in root.steps[:k]:
            self.step(root, step, 0, 0)
        self.emit(0, f"{count}, pos = read_array_length_at(buf, pos, {self.flexible})  # {stepped.what}")
        self.emit(0, f"if {count} < 0:")
        self.emit(1, f'raise MalformedFrame("null {stepped.what} in {self.walk.spec}")')
        own = _before(self.walk, root, stepped)
        self.hook(replace(root, own=own), 0, name=f"{self.walk.function}_head", tail=[count, "start0", "pos"])
        self.emit(0, "return pos")
        return ([f"def {name}(buf: Buffer, pos: int, hooks: {_hooks_class(self.walk)}) -> int:", self.lines[0],
                 *self.declarations(), *self.lines[1:]])

    def elements(self, name: str, node: Node, versions: list[int]) -> list[str]:
        """``count`` elements of a stepped array, each one's hook called."""
        self.emit(0, f'"""``count`` {node.field} of {self.walk.spec} {_versions_text(versions)} from ``pos``: the hooks '
                     f'see each one\'s captured values; returns where the last ends.' + (
                         " Each one's captured arrays are skipped by their elements walks, which append each element's "
                         "start to ``offsets[<the first element's offset>]`` when ``offsets`` is given." if
                         _arrays(node) else "") + '"""')
        self.emit(0, "for _ in range(count):")
        self.node(node, 1)
        self.emit(0, "return pos")
        offsets = ", offsets: dict[int, list[int]] | None" if _arrays(node) else ""
        return ([f"def {name}(buf: Buffer, pos: int, count: int, hooks: {_hooks_class(self.walk)}{offsets}) -> int:",
                 self.lines[0], *self.declarations(), *self.lines[1:]])

    def tail(self, name: str, root: Node, versions: list[int]) -> list[str]:
        """A stepped walk's end: the message after its stepped array's last element."""
        k, stepped = _stepped(root)
        self.emit(0, f'"""{self.walk.spec} {_versions_text(versions)} after its {stepped.what}, from where the last '
                     f'ends: the hooks see every captured value after them; returns where the walk ends."""')
        self.emit(0, "start0 = pos")
        for step in root.steps[k + 1:]:
            self.step(root, step, 0, 0)
        if not any(s.kind == "tags" for s in root.steps):
            self.emit(0, "tags0 = pos")
        own = tuple(c for c in root.own if c not in _before(self.walk, root, stepped))
        self.hook(replace(root, own=own), 0)
        self.emit(0, "return pos")
        return ([f"def {name}(buf: Buffer, pos: int, hooks: {_hooks_class(self.walk)}) -> int:", self.lines[0],
                 *self.declarations(), *self.lines[1:]])

    def array_walk(self, name: str, node: Node, versions: list[int]) -> list[str]:
        """Past ``count`` elements of a captured array (their starts appended to ``starts`` if given)."""
        self.skipping = self.inline_tags = True
        self.emit(0, f'"""Past ``count`` {node.field} of {self.walk.spec} {_versions_text(versions)} from ``pos`` (each '
                     f'one\'s start appended to ``starts``, if given)."""')
        self.emit(0, "for _ in range(count):")
        self.emit(1, "if starts is not None:")
        self.emit(2, "starts.append(pos)")
        for step in node.steps:
            self.step(node, step, 1, 1)
        self.emit(0, "if pos > len(buf):")
        self.emit(1, f'raise TruncatedData("{node.field} of {self.walk.spec} run past the frame\'s end")')
        self.emit(0, "return pos")
        return ([f"def {name}(buf: Buffer, pos: int, count: int, starts: list[int] | None) -> int:", self.lines[0],
                 *self.declarations(), *self.lines[1:]])

    def array_read(self, name: str, node: Node, versions: list[int], row: str) -> list[str]:
        """``count`` elements of a captured array as rows of its captures (their starts appended to ``starts``)."""
        self.emit(0, f'"""``count`` {node.field} of {self.walk.spec} {_versions_text(versions)} from ``pos``, as `{row}` '
                     f'rows (each one\'s start appended to ``starts``, if given)."""')
        self.inline_tags = True
        self.emit(0, f"rows: list[{row}] = []")
        self.emit(0, "append = rows.append")
        self.emit(0, "new = tuple.__new__")
        self.emit(0, "for _ in range(count):")
        self.emit(1, "if starts is not None:")
        self.emit(2, "starts.append(pos)")
        for step in node.steps:
            self.step(node, step, 1, 1)
        self.unpack(node.own, 1)
        values = [a for c in node.own for a in c.python_args()]
        self.emit(1, f"append(new({row}, ({', '.join(values)})))")
        self.emit(0, "return rows")
        return ([f"def {name}(buf: Buffer, pos: int, count: int, starts: list[int] | None) -> list[{row}]:",
                 self.lines[0], *self.declarations(), *self.lines[1:]])

    def node(self, node: Node, depth: int) -> None:
        d = depth
        self.runs[d] = 0
        if node.hook is not None:
            self.emit(d, f"start{d} = pos")
        self.steps(node, list(node.steps), d)
        if node.hook is not None and not any(s.kind == "tags" for s in node.steps):
            self.emit(d, f"tags{d} = pos")
        self.hook(node, d)

    def steps(self, node: Node, steps: list[Step], d: int) -> None:
        tail = _empty_tail(steps) if self.flexible else 0
        head = steps[: len(steps) - tail] if tail else steps
        for step in head:
            self.step(node, step, d, d)
        if not tail:
            return
        rest = steps[len(steps) - tail:]
        test = " and ".join(f"buf[pos{'' if i == 0 else f' + {i}'}] == {s.empty}" for i, s in enumerate(rest))
        self.emit(d, f"if {test}:  # {', '.join(s.what for s in rest)}: empty")
        tags = next((i for i, s in enumerate(rest) if s.kind == "tags"), None)
        if tags is not None and node.hook is not None:
            self.emit(d + 1, f"tags{d} = pos + {tags}" if tags else f"tags{d} = pos")
        self.emit(d + 1, f"pos += {tail}")
        self.emit(d, "else:")
        for step in rest:
            self.step(node, step, d, d + 1)

    def step(self, node: Node, step: Step, d: int, indent: int) -> None:
        i = indent
        if step.start_mark:
            self.emit(i, f"{step.start_mark} = pos")
        self._step(node, step, d, i)
        if step.end_mark:
            self.emit(i, f"{step.end_mark} = pos")

    def _step(self, node: Node, step: Step, d: int, i: int) -> None:
        flexible = self.flexible
        if step.kind == "fixed":
            if step.places and not self.skipping:
                k = self.runs.get(d, 0)
                self.runs[d] = k + 1
                var = f"at{d}" if k == 0 else f"at{d}_{k}"
                self.emit(i, f"{var} = pos")
                for name, offset, width in step.places:
                    self.ints[name] = (var, offset, width)
            self.emit(i, f"pos += {step.width}  # {step.what}")
        elif step.kind == "skip":
            assert step.op is not None
            for line in _python_skip(step.op, flexible):
                self.emit(i, line)
        elif step.kind == "key":
            self.key(node, step, d, i)
        elif step.kind == "records":
            r = step.what
            if flexible:
                self.emit(i, f"{r}_size, pos = read_uvarint_at(buf, pos)  # {r}")
                self.emit(i, f"{r}_size -= 1")
            else:
                self.emit(i, f"{r}_size = _I32.unpack_from(buf, pos)[0]  # {r}")
                self.emit(i, "pos += 4")
                self.emit(i, f"if {r}_size < -1:")
                self.emit(i + 1, f'raise MalformedFrame(f"negative length {{{r}_size}} of {r} at offset {{pos - 4}}")')
            self.emit(i, f"{r}_start = pos")
            self.emit(i, f"if {r}_size > 0:")
            self.emit(i + 1, f"pos += {r}_size")
            self.emit(i + 1, "if pos > len(buf):")
            self.emit(i + 2, f'raise TruncatedData("{r} of {self.walk.spec} run past the frame\'s end")')
        elif step.kind == "string":
            self.string(step, i)
        elif step.kind == "uuid":
            if not self.skipping:
                self.emit(i, "if pos + 16 > len(buf):")
                self.emit(i + 1, f'raise TruncatedData("{step.what} of {self.walk.spec} runs past the frame\'s end")')
                self.emit(i, f"{step.what} = read_uuid_at(buf, pos)")
                self.declared[step.what] = "uuid.UUID"
            self.emit(i, f"pos += 16  # {step.what}")
        elif step.kind == "ints":
            self.int_array(step, i)
        elif step.kind == "array":
            self.array(step, i)
        elif step.kind == "each":
            assert step.node is not None
            count = f"count{d}"
            self.emit(i, f"{count}, pos = read_array_length_at(buf, pos, {flexible})  # {step.what}")
            self.emit(i, f"if {count} < 0:")
            self.emit(i + 1, f'raise MalformedFrame("null {step.what} in {self.walk.spec}")')
            if step.node.counted:
                self.emit(i, f"{step.node.field}_count += {count}")
            self.emit(i, f"for _ in range({count}):")
            start = len(self.lines)
            self.node(step.node, d + 1)
            # the element's lines were emitted at depth d + 1: indent them under the loop
            extra = i - d
            if extra:
                self.lines[start:] = ["    " * extra + line for line in self.lines[start:]]
        elif step.kind == "tags":
            if node.hook is not None:
                self.emit(i, f"tags{d} = pos")
            if step.tagged:
                self.tagged(node, step, i)
            elif self.inline_tags:
                self.emit(i, "if buf[pos] == 0:  # tagged fields")
                self.emit(i + 1, "pos += 1")
                self.emit(i, "else:")
                self.emit(i + 1, "pos = skip_tagged_fields_at(buf, pos)")
            else:
                self.emit(i, "pos = skip_tagged_fields_at(buf, pos)")
        else:
            raise AssertionError(step.kind)

    def string(self, step: Step, i: int) -> None:
        """A captured string: its value (None if null where it may be), its bytes checked to be in the frame."""
        what = step.what
        if self.skipping:
            for line in _python_skip(Op("string", what=what), self.flexible):
                self.emit(i, line)
            return
        if self.flexible:
            self.emit(i, f"n = buf[pos] - 1  # {what}")
            self.emit(i, "if n < 0x7f:")
            self.emit(i + 1, "pos += 1")
            self.emit(i, "else:")
            self.emit(i + 1, "n, pos = read_uvarint_at(buf, pos)")
            self.emit(i + 1, "n -= 1")
        else:
            self.emit(i, f"n = _I16.unpack_from(buf, pos)[0]  # {what}")
            self.emit(i, "pos += 2")
        self.emit(i, "if n < 0:")
        if not step.nullable:
            self.emit(i + 1, f'raise MalformedFrame("null {what} in {self.walk.spec}")')
        else:
            if not self.flexible:
                self.emit(i + 1, "if n < -1:")
                self.emit(i + 2, f'raise MalformedFrame(f"negative length {{n}} of {what} at offset {{pos - 2}}")')
            self.emit(i + 1, f"{what} = None")
            self.emit(i, "else:")
            i += 1
        self.emit(i, "if pos + n > len(buf):")
        self.emit(i + 1, f'raise TruncatedData("{what} of {self.walk.spec} runs past the frame\'s end")')
        self.emit(i, f'{what} = str(buf[pos:pos + n], "utf-8")')
        self.emit(i, "pos += n")
        optional = step.nullable or self.declared.get(what, "str") != "str"
        self.declared[what] = "str | None" if optional else "str"

    def int_array(self, step: Step, i: int) -> None:
        """A captured int array: a tuple (a precompiled struct per length up to 15), or skipped by an elements walk."""
        what, width, letter = step.what, FIXED[step.element], _FORMAT[FIXED[step.element]]
        arrays = f"_{step.element.upper()}_ARRAYS"
        null = f'raise MalformedFrame("null {what} in {self.walk.spec}")'
        if self.skipping and self.flexible:
            self.emit(i, f"n = buf[pos]  # {what}")
            self.emit(i, "if 0 < n < 0x80:")
            self.emit(i + 1, f"pos += {width} * n - {width - 1}")
            self.emit(i, "else:")
            self.emit(i + 1, "n, pos = read_uvarint_at(buf, pos)")
            self.emit(i + 1, "if n == 0:")
            self.emit(i + 2, null)
            self.emit(i + 1, f"pos += {width} * (n - 1)")
            return
        if self.skipping:
            self.emit(i, f"n = _I32.unpack_from(buf, pos)[0]  # {what}")
            self.emit(i, "if n < 0:")
            self.emit(i + 1, null)
            self.emit(i, f"pos += 4 + {width} * n")
            return
        self.formats.setdefault(f"[]{letter}", arrays)
        self.declared[what] = "tuple[int, ...]"
        if self.flexible:
            self.emit(i, f"n = buf[pos] - 1  # {what}")
            self.emit(i, "if 0 <= n < 16:")
            self.emit(i + 1, f"{what} = {arrays}[n].unpack_from(buf, pos + 1)")
            self.emit(i + 1, f"pos += 1 + {width} * n")
            self.emit(i, "else:")
            self.emit(i + 1, "n, pos = read_uvarint_at(buf, pos)")
            self.emit(i + 1, "if n == 0:")
            self.emit(i + 2, null)
            self.emit(i + 1, "n -= 1")
            self.emit(i + 1, f'{what} = struct.unpack_from(f">{{n}}{letter}", buf, pos)')
            self.emit(i + 1, f"pos += {width} * n")
            return
        self.emit(i, f"n = _I32.unpack_from(buf, pos)[0]  # {what}")
        self.emit(i, "if n < 0:")
        self.emit(i + 1, null)
        self.emit(i, "if n < 16:")
        self.emit(i + 1, f"{what} = {arrays}[n].unpack_from(buf, pos + 4)")
        self.emit(i, "else:")
        self.emit(i + 1, f'{what} = struct.unpack_from(f">{{n}}{letter}", buf, pos + 4)')
        self.emit(i, f"pos += 4 + {width} * n")

    def array(self, step: Step, i: int) -> None:
        """A captured array of structs: its count, and its elements' span, skipped by their elements walk."""
        assert step.node is not None
        what, count = step.what, f"{step.what}_count"
        if self.flexible:
            self.emit(i, f"{count} = buf[pos] - 1  # {what}")
            self.emit(i, f"if {count} < 0x7f:")
            self.emit(i + 1, "pos += 1")
            self.emit(i, "else:")
            self.emit(i + 1, f"{count}, pos = read_uvarint_at(buf, pos)")
            self.emit(i + 1, f"{count} -= 1")
        else:
            self.emit(i, f"{count} = _I32.unpack_from(buf, pos)[0]  # {what}")
            self.emit(i, "pos += 4")
        self.emit(i, f"if {count} < 0:")
        self.emit(i + 1, f'raise MalformedFrame("null {what} in {self.walk.spec}")')
        self.emit(i, f"{what}_start = pos")
        walk = self.arrays[(step.node, self.flexible)]
        self.emit(i, "if offsets is None:")
        self.emit(i + 1, f"pos = {walk}(buf, pos, {count}, None)")
        self.emit(i, "else:")
        self.emit(i + 1, "starts = offsets[pos] = []")
        self.emit(i + 1, f"pos = {walk}(buf, pos, {count}, starts)")
        self.emit(i, f"{what}_end = pos")
        self.declared["starts"] = "list[int]"

    def tagged(self, node: Node, step: Step, i: int) -> None:
        """The tagged fields, the captured ones read (their defaults where absent or of another width)."""
        for name, _, _ in step.tagged:
            self.emit(i, f"{name} = {next(c.default for c in node.own if c.name == name)}")
        self.emit(i, "if buf[pos] == 0:  # tagged fields")
        self.emit(i + 1, "pos += 1")
        self.emit(i, "else:")
        self.emit(i + 1, "tags = Reader(buf, pos)")
        self.emit(i + 1, "for tag, data in tags.tagged_fields():")
        for k, (name, tag, width) in enumerate(step.tagged):
            constant = self.formats.setdefault(f">{_FORMAT[width]}", f"_UNPACK_{_FORMAT[width]}")
            self.emit(i + 2, f"{'if' if k == 0 else 'elif'} tag == {tag} and len(data) == {width}:  # {name}")
            self.emit(i + 3, f"{name} = {constant}.unpack_from(data)[0]")
        self.emit(i + 1, "pos = tags.pos")

    def key(self, node: Node, step: Step, d: int, i: int) -> None:
        lazy = node.path in self.lazy
        if step.key_type == "uuid":
            if lazy:
                self.emit(i, "key = None")
                self.emit(i, f"key_at = pos  # {step.what}")
            else:
                self.emit(i, "if pos + 16 > len(buf):")
                self.emit(i + 1, f'raise TruncatedData("{step.what} of {self.walk.spec} runs past the frame\'s end")')
                self.emit(i, f"key = read_uuid_at(buf, pos)  # {step.what}")
            self.emit(i, "pos += 16")
            self.emit(i, "key_end = pos")
            return
        if self.flexible:
            self.emit(i, f"n, pos = read_uvarint_at(buf, pos)  # {step.what}")
            self.emit(i, "n -= 1")
        else:
            self.emit(i, f"n = _I16.unpack_from(buf, pos)[0]  # {step.what}")
            self.emit(i, "pos += 2")
        self.emit(i, "if n < 0:")
        self.emit(i + 1, f'raise MalformedFrame("null {step.what} in {self.walk.spec}")')
        if lazy:
            self.emit(i, "key = None")
            self.emit(i, "key_at = pos")
        else:
            self.emit(i, "if pos + n > len(buf):")
            self.emit(i + 1, f'raise MalformedFrame(f"{step.what} of {{n}} bytes runs past the frame\'s end")')
            self.emit(i, 'key = str(buf[pos:pos + n], "utf-8")')
        self.emit(i, "pos += n")
        self.emit(i, "key_end = pos")

    def unpack(self, own: tuple[Capture, ...], i: int) -> None:
        """The node's int captures, one struct read per fixed run, and its bools, each checked to be 0 or 1."""
        runs: dict[str, list[tuple[int, int, str]]] = {}
        for c in own:
            if c.kind == "int" and not c.absent:
                var, offset, width = self.ints[c.name]
                runs.setdefault(var, []).append((offset, width, c.name))
        for var, fields in runs.items():
            fmt, at = ">", 0
            for offset, width, _ in sorted(fields):
                fmt += f"{offset - at}x" if offset > at else ""
                fmt += _FORMAT[width]
                at = offset + width
            constant = self.formats.setdefault(fmt, f"_UNPACK_{fmt[1:]}")
            names = [n for _, _, n in sorted(fields)]
            self.emit(i, f"{', '.join(names)}{',' if len(names) == 1 else ''} = {constant}.unpack_from(buf, {var})")
        for c in own:
            if c.kind == "bool" and not c.absent:
                var, offset, _ = self.ints[c.name]
                place = f"{var} + {offset}" if offset else var
                self.emit(i, f"{c.name} = buf[{place}]")
                self.emit(i, f"if {c.name} > 1:")
                self.emit(i + 1, f'raise MalformedFrame(f"boolean byte {{{c.name}}} at offset {{{place}}} is neither 0 nor 1")')

    def args(self, c: Capture) -> list[str]:
        """What the hook is handed for ``c``: its values, where its span starts and ends."""
        if c.kind != "span" or c.absent:
            return c.python_args()
        first = self.ints.get(c.name)
        last = self.ints.get(c.last)
        start = f"{c.name}_start" if first is None else (f"{first[0]} + {first[1]}" if first[1] else first[0])
        end = f"{c.last}_end" if last is None else f"{last[0]} + {last[1] + last[2]}"
        return [start, end]

    def hook(self, node: Node, d: int, name: str | None = None, tail: list[str] | None = None) -> None:
        hook = name or node.hook
        if hook is None:
            return
        i = d
        if node.when is not None:
            var, offset, width = self.ints[node.when]
            test = " or ".join(f"buf[{var} + {offset + b}]" for b in range(width))
            self.emit(d, f"if {test}:  # {node.when}")
            i = d + 1
            lazy = next((path for path in self.lazy if node.path.startswith(path + ".")), None)
            if lazy is not None:
                assert self.root is not None
                key_type = next(s.key_type for s in _node_at(self.root, lazy).steps if s.kind == "key")
                self.emit(i, "if key is None:")
                if key_type == "uuid":
                    self.emit(i + 1, "if key_at + 16 > len(buf):")
                    self.emit(i + 2, f'raise TruncatedData("topic id of {self.walk.spec} runs past the frame\'s end")')
                    self.emit(i + 1, "key = read_uuid_at(buf, key_at)")
                else:
                    self.emit(i + 1, "if key_end > len(buf):")
                    self.emit(i + 2, f'raise MalformedFrame("the key of {self.walk.spec} runs past the frame\'s end")')
                    self.emit(i + 1, 'key = str(buf[key_at:key_end], "utf-8")')
        self.unpack(node.own, i)
        args = [a for c in node.inherited for a in self.args(c)]
        args += [a for c in node.own for a in self.args(c)]
        if tail is not None:
            args += tail
        else:
            if not node.path:
                args += _counted(node)
            args += [f"start{d}", f"tags{d}", "pos"]
        self.emit(i, f"hooks.{hook}({', '.join(args)})")


def _stepped(root: Node) -> tuple[int, Step]:
    """The stepped array of a root: its index among the steps, and its step."""
    k = next(k for k, s in enumerate(root.steps) if s.stepped)
    return k, root.steps[k]


def _before(walk: Walk, root: Node, stepped: Step) -> tuple[Capture, ...]:
    """The root's captures of fields before its stepped array (the head's), in the captures' order."""
    order = [f.name for f in walk.message.root.fields]
    at = next(i for i, f in enumerate(walk.message.root.fields) if snake(f.name) == stepped.what)
    return tuple(c for c in root.own if order.index(c.field) < at)


def _arrays(node: Node) -> list[Step]:
    """The captured arrays of a node's elements."""
    return [s for s in node.steps if s.kind == "array"]


def _node_at(root: Node, path: str) -> Node:
    if root.path == path:
        return root
    for step in root.steps:
        if step.node is not None and (step.node.path == path or path.startswith(step.node.path + ".")):
            return _node_at(step.node, path)
    raise KeyError(path)


def _empty_tail(steps: list[Step]) -> int:
    """How many of the last steps have one-byte empty forms (0 unless two or more: one is its own test)."""
    n = 0
    for step in reversed(steps):
        if step.empty is None or step.kind not in ("skip", "tags"):
            break
        n += 1
    return n if n >= 2 else 0


def _python_skip(op: Op, flexible: bool) -> list[str]:
    if op.kind == "fixed":
        return [f"pos += {op.size}  # {op.what}"]
    if op.kind in ("string", "bytes"):
        if flexible:
            return [f"n, pos = read_uvarint_at(buf, pos)  # {op.what}", "if n > 1:", "    pos += n - 1"]
        unpack, width = ("_I16", 2) if op.kind == "string" else ("_I32", 4)
        return [f"n = {unpack}.unpack_from(buf, pos)[0]  # {op.what}", f"pos += {width}", "if n > 0:",
                "    pos += n", "elif n < -1:",
                f'    raise MalformedFrame(f"negative length {{n}} of {op.what} at offset {{pos - {width}}}")']
    if op.kind == "array_struct":
        return [f"n, pos = read_array_length_at(buf, pos, {flexible})  # {op.what}", "for _ in range(n):",
                f"    pos = {op.target}(buf, pos)"]
    if op.kind == "array_fixed":
        return [f"n, pos = read_array_length_at(buf, pos, {flexible})  # {op.what}", "if n > 0:",
                f"    pos += n * {op.size}"]
    if op.kind == "struct":
        return [f"pos = {op.target}(buf, pos)  # {op.what}"]
    raise SystemExit(f"{op.what}: the Python walk emitter does not skip {op.kind}")


def _hooks_class(walk: Walk) -> str:
    return f"{walk.spec}Hooks"


def python_walks(walk: Walk, layouts: Layouts) -> tuple[list[str], list[str], dict[str, str]]:
    """(the hooks class, the walk functions and their table, the struct formats they read with)."""
    if walk.steps is not None:
        return _python_stepped(walk, layouts)
    per_version, distinct = layouts_of(walk, layouts)
    formats: dict[str, str] = {}
    functions: list[str] = []
    for name, root, flexible, versions in distinct:
        emitter = _Python(walk, flexible, _lazy_keys(root), formats)
        emitter.root = root
        functions.append("\n".join(emitter.function(name, root, versions)) + "\n\n")
    lo, hi = walk.message.caps
    entries = ", ".join(per_version.get(v, "None") for v in range(hi + 1))
    signature = f"Callable[[Buffer, int, {_hooks_class(walk)}], int]"
    functions.append(f"#: The {walk.spec} walk of each version (None outside the caps): (buf, pos, hooks) -> end.\n"
                     f"{walk.function.upper()}_WALK: Final[tuple[{signature} | None, ...]] = ({entries},)\n")
    for field in walk.at:
        at_versions, at_distinct = layouts_of(walk, layouts, field)
        for name, root, flexible, versions in at_distinct:
            emitter = _Python(walk, flexible, set(), formats)
            emitter.emit(0, f'"""Where {snake(field)} starts in {walk.spec} {_versions_text(versions)}, from the '
                            f'body\'s start."""')
            for step in root.steps:
                emitter.step(root, step, 0, 0)
            emitter.emit(0, "return pos")
            lines = emitter.lines
            declared = sorted({v.strip() for line in lines if (m := _UNPACKED.match(line))
                               for v in m.group(1).split(",") if v.strip()})
            functions.append("\n".join([f"def {name}(buf: Buffer, pos: int) -> int:", lines[0],
                                         *[f"    {v}: int" for v in declared], *lines[1:]]) + "\n\n")
        entries = ", ".join(at_versions.get(v, "None") for v in range(hi + 1))
        functions.append(f"#: Where {snake(field)} starts in {walk.spec}, by version (None outside the caps): "
                         f"(buf, body start) -> position.\n{walk.function.upper()}_{snake(field).upper()}_AT: "
                         f"Final[tuple[Skip | None, ...]] = ({entries},)\n")
    return _python_hooks(walk, distinct), functions, formats


def _python_hooks(walk: Walk, distinct: list[tuple[str, Node, bool, list[int]]]) -> list[str]:
    root = distinct[-1][1]
    out = [f"class {_hooks_class(walk)}:",
           f'    """What the generated {walk.spec} walks hand over ({walk.hooked_by} implements it): each method is called at',
           "    the end of its element, after the elements inside it, with the captures of the elements enclosing it, its",
           '    own, and where the element starts, its tagged fields start (its end where it has none) and it ends."""',
           "",
           "    __slots__ = ()",
           ""]
    for node in _hook_nodes(root):
        params = [p for c in node.inherited for p in c.python_params()]
        params += [p for c in node.own for p in c.python_params()]
        if not node.path:
            params += [f"{c}: int" for c in _counted(node)]
        params += ["start: int", "tags_start: int", "end: int"]
        what = f"each {node.field} element" if node.path else "the message"
        if node.when:
            what += f" whose {node.when} is not 0"
        out.append(f"    def {node.hook}(self, {', '.join(params)}) -> None:")
        out.append(f'        """{what[0].upper()}{what[1:]}."""')
        out.append("        raise NotImplementedError")
        out.append("")
    return out


Piece = Callable[[Node], Node]


def _pieces(walk: Walk, layouts: Layouts, piece: Piece, prefix: str
            ) -> tuple[dict[int, str], list[tuple[str, Node, bool, list[int]]]]:
    """Like `layouts_of`, for one piece of each version's walk (``piece`` of its root): each version's function, and
    each distinct piece (name ``<prefix>_v<lowest version>``, the piece, flexible, its versions)."""
    lo, hi = walk.message.caps
    per_version: dict[int, str] = {}
    distinct: list[tuple[str, Node, bool, list[int]]] = []
    for version in range(lo, hi + 1):
        node = piece(walk.root(version, layouts))
        flexible = walk.flexible(version)
        found = next((d for d in distinct if d[1] == node and d[2] == flexible), None)
        if found is None:
            found = (f"{prefix}_v{version}", node, flexible, [])
            distinct.append(found)
        found[3].append(version)
        per_version[version] = found[0]
    return per_version, distinct


def _table(walk: Walk, name: str, per_version: dict[int, str], signature: str, what: str) -> str:
    hi = walk.message.caps[1]
    entries = ", ".join(per_version.get(v, "None") for v in range(hi + 1))
    return f"#: {what} (None outside the caps).\n{name}: Final[tuple[{signature} | None, ...]] = ({entries},)\n"


def _python_stepped(walk: Walk, layouts: Layouts) -> tuple[list[str], list[str], dict[str, str]]:
    """A walk in steps (config.CAPTURED_WALKS' ``steps``): the head to the stepped array (its count read), ``count``
    of its elements, the rest after them; the captured arrays of its elements, skipped by an elements walk of their
    own that records their starts on request, and read on demand as rows."""
    formats: dict[str, str] = {}
    functions: list[str] = []
    hooks = _hooks_class(walk)
    upper = walk.function.upper()

    def head(root: Node) -> Node:
        k, stepped = _stepped(root)
        return replace(root, own=_before(walk, root, stepped), steps=(*root.steps[:k], replace(stepped, node=None)))

    def tail(root: Node) -> Node:
        k, stepped = _stepped(root)
        before = _before(walk, root, stepped)
        return replace(root, own=tuple(c for c in root.own if c not in before),
                       steps=(replace(stepped, node=None), *root.steps[k + 1:]))

    def elements(root: Node) -> Node:
        node = _stepped(root)[1].node
        assert node is not None
        return node

    top = walk.root(walk.message.caps[1], layouts)
    field = _stepped(top)[1].what
    rows: list[str] = []
    arrays: dict[tuple[Node, bool], str] = {}
    for j, array in enumerate(_arrays(elements(top))):
        def element(root: Node, j: int = j) -> Node:
            node = _arrays(elements(root))[j].node
            assert node is not None
            return node

        per_version, distinct = _pieces(walk, layouts, element, f"walk_{walk.function}_{array.what}")
        for name, node, flexible, versions in distinct:
            arrays[(node, flexible)] = name
            functions.append("\n".join(_Python(walk, flexible, set(), formats).array_walk(name, node, versions)) + "\n\n")
        functions.append(_table(walk, f"{upper}_{array.what.upper()}_WALK", per_version,
                                "Callable[[Buffer, int, int, list[int] | None], int]",
                                f"Past ``count`` {array.what} of {walk.spec}, by version: (buf, pos, count, starts) -> end"))
        assert array.node is not None
        row = walk.rows.get(array.node.path)
        if row is None:
            continue
        rows += _row_class(walk, layouts, row, element)
        per_version, distinct = _pieces(walk, layouts, element, f"read_{walk.function}_{array.what}")
        for name, node, flexible, versions in distinct:
            lines = _Python(walk, flexible, set(), formats).array_read(name, node, versions, row)
            functions.append("\n".join(lines) + "\n\n")
        functions.append(_table(walk, f"{upper}_{array.what.upper()}_READ", per_version,
                                f"Callable[[Buffer, int, int, list[int] | None], list[{row}]]",
                                f"``count`` {array.what} of {walk.spec} as `{row}` rows, by version: "
                                f"(buf, pos, count, starts) -> rows"))
    per_version, distinct = _pieces(walk, layouts, head, f"walk_{walk.function}")
    for name, node, flexible, versions in distinct:
        functions.append("\n".join(_Python(walk, flexible, set(), formats, arrays).head(name, node, versions)) + "\n\n")
    functions.append(_table(walk, f"{upper}_WALK", per_version, f"Callable[[Buffer, int, {hooks}], int]",
                            f"The {walk.spec} walk from the body's start to its {field}, by version: (buf, pos, hooks) "
                            f"-> where the first starts"))
    per_version, distinct = _pieces(walk, layouts, elements, f"walk_{walk.function}_{field}")
    offsets = ", dict[int, list[int]] | None" if _arrays(elements(top)) else ""
    for name, node, flexible, versions in distinct:
        emitter = _Python(walk, flexible, set(), formats, arrays)
        functions.append("\n".join(emitter.elements(name, node, versions)) + "\n\n")
    functions.append(_table(walk, f"{upper}_{field.upper()}_WALK", per_version,
                            f"Callable[[Buffer, int, int, {hooks}{offsets}], int]",
                            f"``count`` {field} of {walk.spec}, by version: (buf, pos, count, hooks{', offsets' if offsets else ''}) -> end"))
    per_version, distinct = _pieces(walk, layouts, tail, f"walk_{walk.function}_after_{field}")
    for name, node, flexible, versions in distinct:
        functions.append("\n".join(_Python(walk, flexible, set(), formats, arrays).tail(name, node, versions)) + "\n\n")
    functions.append(_table(walk, f"{upper}_AFTER_{field.upper()}_WALK", per_version,
                            f"Callable[[Buffer, int, {hooks}], int]",
                            f"The {walk.spec} walk after its {field}, by version: (buf, pos, hooks) -> end"))
    return rows + _stepped_hooks(walk, top), functions, formats


def _row_class(walk: Walk, layouts: Layouts, row: str, element: Piece) -> list[str]:
    """The row of a captured array read on demand: a NamedTuple of its captures, in the captures' order."""
    lo, hi = walk.message.caps
    nodes = [element(walk.root(v, layouts)) for v in range(lo, hi + 1)]
    out = [f"class {row}(NamedTuple):",
           f'    """One of the {nodes[-1].field} of {walk.spec}, as `read_{walk.function}_{nodes[-1].field}_v<N>` reads it '
           f"(a tuple: thousands are read at\n    once); a field its version lacks holds its default.\"\"\"", ""]
    for k, capture in enumerate(nodes[-1].own):
        absent = [lo + v for v, node in enumerate(nodes) if node.own[k].absent]
        note = ""
        if absent and absent == list(range(lo, absent[-1] + 1)):
            note = f"  # {capture.default} before v{absent[-1] + 1}"
        elif absent:
            note = f"  # {capture.default} in v{', v'.join(map(str, absent))}"
        out.append(f"    {capture.name}: {capture.python_type()}{note}")
    return [*out, "", ""]


def _stepped_hooks(walk: Walk, root: Node) -> list[str]:
    """The hooks class of a walk in steps: each walked element's hook, the head's and the rest's."""
    k, stepped = _stepped(root)
    before = _before(walk, root, stepped)
    out = ["@mypyc_attr(allow_interpreted_subclasses=True)  # the tests' recording hooks",
           f"class {_hooks_class(walk)}:",
           f'    """What the generated {walk.spec} walks hand over ({walk.hooked_by} implements it): each element\'s method is called',
           "    at its end, after the elements inside it, with its captures and where it starts, its tagged fields start (its",
           f"    end where it has none) and it ends; ``{walk.function}_head`` once its {stepped.what} are counted, ``{walk.function}`` at",
           f'    the end, each with the message\'s captures before and after its {stepped.what}."""',
           "",
           "    __slots__ = ()",
           ""]

    def method(name: str, params: list[str], what: str) -> None:
        out.append(f"    def {name}(self, {', '.join(params)}) -> None:")
        out.append(f'        """{what}"""')
        out.append("        raise NotImplementedError")
        out.append("")

    nodes = [n for n in _hook_nodes(root) if n.path]
    for node in [n for n in nodes if not n.path.startswith(stepped.node.path if stepped.node else "?")]:
        method(node.hook or "", [p for c in node.own for p in c.python_params()] + ["start: int", "tags_start: int", "end: int"],
               f"Each {node.field} element.")
    method(f"{walk.function}_head", [p for c in before for p in c.python_params()]
           + [f"{stepped.what}_count: int", "start: int", "end: int"],
           f"The message up to its {stepped.what}: their count, where it starts and where the first starts.")
    for node in [n for n in nodes if stepped.node and n.path.startswith(stepped.node.path)]:
        method(node.hook or "", [p for c in node.own for p in c.python_params()] + ["start: int", "tags_start: int", "end: int"],
               f"Each {node.field} element.")
    method(walk.function, [p for c in root.own if c not in before for p in c.python_params()]
           + ["start: int", "tags_start: int", "end: int"],
           f"The message after its {stepped.what}: from where the last ends.")
    return out


# ------------------------------------------------------------------------------------------------
# C


class _C:
    """One walk function in C."""

    def __init__(self, walk: Walk, flexible: bool) -> None:
        self.walk = walk
        self.flexible = flexible
        self.lines: list[str] = []
        self.ints: dict[str, tuple[str, int, int]] = {}

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * (depth + 1) + text)

    def function(self, name: str, root: Node, versions: list[int]) -> list[str]:
        where = f"from {snake(self.walk.start)}" if self.walk.start else "from the body's start"
        until = f", up to {snake(self.walk.stop)}" if self.walk.stop else ""
        self.emit(0, "int64_t n = 0;")
        self.emit(0, "int rc = 0;")
        self.emit(0, "(void)n;")
        self.emit(0, "(void)rc;")
        for count in _counted(root):
            self.emit(0, f"int64_t {count} = 0;")
        self.node(root, 0)
        return [f"/* {self.walk.spec} {_versions_text(versions)} {where}{until}. */",
                f"static int {name}(const Frame *f, Py_ssize_t pos, {_c_walk_type(self.walk)} *w) {{",
                *self.lines, "}"]

    def node(self, node: Node, d: int) -> None:
        self.emit(d, f"Py_ssize_t start{d} = pos, tags{d} = -1;")
        self.steps(list(node.steps), d)
        if not any(s.kind == "tags" for s in node.steps):
            self.emit(d, f"tags{d} = pos;")
        self.hook(node, d)

    def steps(self, steps: list[Step], d: int) -> None:
        tail = _empty_tail(steps) if self.flexible else 0
        head = steps[: len(steps) - tail] if tail else steps
        for step in head:
            self.step(step, d, d)
        if not tail:
            return
        rest = steps[len(steps) - tail:]
        test = " && ".join(f"f->p[pos{'' if i == 0 else f' + {i}'}] == {s.empty}" for i, s in enumerate(rest))
        self.emit(d, f"if (pos + {tail} <= f->n && {test}) {{ /* {', '.join(s.what for s in rest)}: empty */")
        tags = next((i for i, s in enumerate(rest) if s.kind == "tags"), None)
        if tags is not None:
            self.emit(d + 1, f"tags{d} = pos + {tags};")
        self.emit(d + 1, f"pos += {tail};")
        self.emit(d, "} else {")
        for step in rest:
            self.step(step, d, d + 1)
        self.emit(d, "}")

    def step(self, step: Step, d: int, i: int) -> None:
        flexible = int(self.flexible)
        if step.kind == "fixed":
            self.emit(i, f"if (pos + {step.width} > f->n) return -1; /* {step.what} */")
            if step.ints:
                self.emit(i, f"Py_ssize_t at{d} = pos;")
                for name, offset, width in step.ints:
                    if width not in _C_READ:
                        raise SystemExit(f"{self.walk.spec}.{name}: the C walk reads ints of 1, 2 or 4 bytes")
                    self.ints[name] = (f"at{d}", offset, width)
            self.emit(i, f"pos += {step.width};")
        elif step.kind == "skip":
            op = step.op
            assert op is not None
            if op.kind == "string":
                self.emit(i, f"if (string_length(f, &pos, {flexible}, &n) < 0) return -1; /* {op.what} */")
                self.emit(i, "if (n > 0) {")
                self.emit(i + 1, "if (n > f->n - pos) return -1;")
                self.emit(i + 1, "pos += (Py_ssize_t)n;")
                self.emit(i, "}")
            elif op.kind == "array_struct":
                self.emit(i, f"if (array_length(f, &pos, {flexible}, &n) < 0) return -1; /* {op.what} */")
                self.emit(i, "if (n > 0) return -1; /* its elements: the Python walk's */")
            else:
                raise SystemExit(f"{self.walk.spec}.{op.what}: the C walk emitter does not skip {op.kind}")
        elif step.kind == "key":
            if step.key_type == "uuid":
                self.emit(i, f"if (pos + 16 > f->n) return -1; /* {step.what} */")
                self.emit(i, "Key key = {f->p + pos, 16, 1};")
                self.emit(i, "pos += 16;")
            else:
                self.emit(i, f"if (string_length(f, &pos, {flexible}, &n) < 0 || n < 0 || n > f->n - pos) return -1;"
                             f" /* {step.what} */")
                self.emit(i, "Key key = {f->p + pos, (Py_ssize_t)n, 0};")
                self.emit(i, "pos += (Py_ssize_t)n;")
            self.emit(i, "Py_ssize_t key_end = pos;")
        elif step.kind == "records":
            r = step.what
            self.emit(i, f"int64_t {r}_size; /* {r} */")
            if flexible:
                self.emit(i, f"if (uvarint(f, &pos, &{r}_size) < 0) return -1;")
                self.emit(i, f"{r}_size -= 1;")
            else:
                self.emit(i, "if (pos + 4 > f->n) return -1;")
                self.emit(i, f"{r}_size = be32(f->p + pos);")
                self.emit(i, "pos += 4;")
                self.emit(i, f"if ({r}_size < -1) return -1;")
            self.emit(i, f"Py_ssize_t {r}_start = pos;")
            self.emit(i, f"if ({r}_size > 0) {{")
            self.emit(i + 1, f"if ({r}_size > f->n - pos) return -1;")
            self.emit(i + 1, f"pos += (Py_ssize_t){r}_size;")
            self.emit(i, "}")
        elif step.kind == "each":
            assert step.node is not None
            self.emit(i, f"int64_t count{d};")
            self.emit(i, f"if (array_length(f, &pos, {flexible}, &count{d}) < 0 || count{d} < 0) return -1;"
                         f" /* {step.what} */")
            if step.node.counted:
                self.emit(i, f"{step.node.field}_count += count{d};")
            self.emit(i, f"for (int64_t i{d} = 0; i{d} < count{d}; i{d}++) {{")
            start = len(self.lines)
            self.node(step.node, d + 1)
            extra = i - d
            if extra:
                self.lines[start:] = ["    " * extra + line for line in self.lines[start:]]
            self.emit(i, "}")
        elif step.kind == "tags":
            self.emit(i, f"tags{d} = pos;")
            self.emit(i, "if (empty_tags(f, &pos) < 0) return -1; /* a non-empty section: the Python walk's */")
        else:
            raise AssertionError(step.kind)

    def hook(self, node: Node, d: int) -> None:
        if node.hook is None:
            self.emit(d, f"(void)start{d};")
            self.emit(d, f"(void)tags{d};")
            return
        i = d
        if node.when is not None:
            var, offset, width = self.ints[node.when]
            test = " || ".join(f"f->p[{var} + {offset + b}]" for b in range(width))
            self.emit(d, f"if ({test}) {{ /* {node.when} */")
            i = d + 1
        args = ["w"]
        for c in (*node.inherited, *node.own):
            if c.kind == "int":
                var, offset, width = self.ints[c.name]
                args.append(_C_READ[width].format(at=f"{var} + {offset}" if offset else var))
            elif c.kind == "key":
                args += ["key", "key_end"]
            else:
                args += [f"{c.name}_start", f"{c.name}_size"]
        if not node.path:
            args += _counted(node)
        args += [f"start{d}", f"tags{d}", "pos"]
        call = f"{_c_hook(self.walk, node)}({', '.join(args)})"
        if node.path:
            self.emit(i, f"if ((rc = {call}) < 0) return rc;")
        else:
            self.emit(i, f"return {call};")
        if node.when is not None:
            self.emit(d, "}")


def _c_walk_type(walk: Walk) -> str:
    return f"{walk.spec}Walk"


def _c_hook(walk: Walk, node: Node) -> str:
    return walk.function if not node.path else f"{walk.function}_{node.hook}"


C_HEADER = """/* The Produce walks of the compiled core, generated from Apache Kafka {kafka}'s JSON message specs: do not edit.
 *
 * Generated by protocolgen (scripts/generate-protocol; protocolgen/captures.py says how) from the same capture IR as
 * the Python walks of protocol/kafka_walkers.py. Included by protocol/_wire.c after its readers (Frame, be16, be32,
 * uvarint, array_length, string_length, empty_tags), which defines the walk states and the hooks declared here. A
 * walk returns 0 (walked: the hooks saw every captured value), -1 (left to the Python walk: anything cut or
 * malformed, a non-empty tagged-field section, elements of an array of structs it skips) or -2 (a hook raised).
 */
#ifndef INSYNC_WIRE_WALKERS_H
#define INSYNC_WIRE_WALKERS_H

/* A captured mapKey: a string's bytes (without their length) or a uuid's 16 (uuid 1). */
typedef struct {{
    const unsigned char *at;
    Py_ssize_t length;
    int uuid;
}} Key;
"""


def c_walks(walk: Walk, layouts: Layouts) -> list[str]:
    per_version, distinct = layouts_of(walk, layouts)
    root = distinct[-1][1]
    state = _c_walk_type(walk)
    out = [f"\n/* ------------------------------------------------------------------ {walk.spec} */",
           f"typedef struct {state} {state}; /* protocol/_wire.c's */"]
    for node in _hook_nodes(root):
        params = [f"{state} *w"]
        params += [p for c in (*node.inherited, *node.own) for p in c.c_params()]
        if not node.path:
            params += [f"int64_t {c}" for c in _counted(node)]
        params += ["Py_ssize_t start", "Py_ssize_t tags_start", "Py_ssize_t end"]
        what = f"each {node.field} element" if node.path else "the message"
        if node.when:
            what += f" whose {node.when} is not 0"
        out.append(f"/* {what[0].upper()}{what[1:]}: 0, or -1 / -2 to stop the walk. */")
        out.append(f"static int {_c_hook(walk, node)}({', '.join(params)});")
    for name, node, flexible, versions in distinct:
        out.append("")
        out.extend(_C(walk, flexible).function(name, node, versions))
    lo, hi = walk.message.caps
    for field in walk.at:
        _, at_distinct = layouts_of(walk, layouts, field)
        function = f"{walk.function}_{snake(field)}_at"
        for name, node, flexible, versions in at_distinct:
            emitter = _C(walk, flexible)
            emitter.emit(0, "int64_t n = 0;")
            emitter.emit(0, "(void)n;")
            for step in node.steps:
                emitter.step(step, 0, 0)
            emitter.emit(0, "return pos;")
            out += ["", f"/* Where {snake(field)} starts in {walk.spec} {_versions_text(versions)}, from the body's start; "
                        "-1: cut or malformed. */",
                    f"static Py_ssize_t {name}(const Frame *f, Py_ssize_t pos) {{", *emitter.lines, "}"]
        out += ["", f"/* Where {snake(field)} starts in {walk.spec} of a version; -1 outside v{lo}-v{hi}. */",
                f"static Py_ssize_t {function}(int version, const Frame *f, Py_ssize_t pos) {{",
                "    switch (version) {"]
        for name, _, _, versions in at_distinct:
            out += [f"    {' '.join(f'case {v}:' for v in versions)}", f"        return {name}(f, pos);"]
        out += ["    default:", "        return -1;", "    }", "}"]
    out.append("")
    out.append(f"/* The {walk.spec} walk of a version: -1 outside v{lo}-v{hi}. */")
    out.append(f"static int walk_{walk.function}(int version, const Frame *f, Py_ssize_t pos, {state} *w) {{")
    out.append("    switch (version) {")
    for name, _, _, versions in distinct:
        cases = " ".join(f"case {v}:" for v in versions)
        out.append(f"    {cases}")
        out.append(f"        return {name}(f, pos, w);")
    out.append("    default:")
    out.append("        return -1;")
    out.append("    }")
    out.append("}")
    return out


def generate_c(messages: list[Message], layouts: dict[str, Layouts], kafka: str) -> str:
    out = [C_HEADER.format(kafka=kafka)]
    for walk in walks(messages):
        if walk.c:
            out.extend(c_walks(walk, layouts.setdefault(walk.spec, Layouts(walk.message))))
    out.append("\n#endif")
    return "\n".join(out) + "\n"

"""Build hook for the optional compiled build; everything else is in pyproject.toml.

``INSYNC_PROXY_COMPILE=1`` compiles the modules every forwarded request runs through with mypyc (the
same source, type hints turned into C): about a third less CPU per request (docs/performance.md). The
interpreted package is the reference and what a plain ``pip install`` gives. ``scripts/compile`` builds
in place for development and tests; the container image builds a compiled wheel (Dockerfile).

mypyc names a module after its path: each is compiled as ``insync_proxy/<folder>/<module>.py`` (through the
package's link to the top-level folder), so the extension is ``insync_proxy.<folder>.<module>``, beside its
source with ``build_ext --inplace`` and under ``insync_proxy/`` in a wheel. The same switch builds the hand-written C
of `C_MODULES`.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup

#: The data path: framing, header peek, Produce walks, the connection core and the behaviours on it, with the
#: generated version tables the walkers read (compiled with them, their Final ints become constants), and the
#: message classes with the schema DSL and generic codec they are declared in (schema, kafka_messages, messages:
#: together, as a compiled dataclass cannot subclass an interpreted slotted Struct, nor an interpreted one a
#: compiled Struct). Compiled, a message class is a native class whose layout mypyc gives it (dataclass's
#: slots=True only makes a copy, which is dropped); Message's ClassVars are set after each class is made, not
#: declared in a dataclass body, which would make them fields (docs/protocol.md).
COMPILED_MODULES = [
    "protocol/kafka_versions.py",
    "protocol/kafka_walkers.py",
    "protocol/api_keys.py",
    "protocol/addresses.py",
    "protocol/primitives.py",
    "protocol/schema.py",
    "protocol/kafka_messages.py",
    "protocol/messages.py",
    "protocol/framing.py",
    "protocol/headers.py",
    "protocol/produce.py",
    "protocol/fetch.py",
    "protocol/metadata_scan.py",
    "protocol/metadata_splice.py",
    "audit/buckets.py",
    "proxy/datapath/exchange.py",
    "proxy/datapath/core.py",
    "proxy/datapath/observer.py",
    "proxy/observability/metrics.py",
    "proxy/datapath/connection.py",
    "proxy/datapath/cluster_view.py",
    "proxy/controlplane/min_insync.py",
    "proxy/behaviours/produce_exchange.py",
    "proxy/behaviours/topic_ids.py",
    "proxy/behaviours/acks.py",
    "proxy/behaviours/accounting.py",
    "proxy/behaviours/isr_learning.py",
    "proxy/behaviours/addresses.py",
    "proxy/behaviours/api_versions.py",
    "proxy/behaviours/config_changes.py",
    "proxy/behaviours/metadata.py",
    "proxy/audit/summary.py",
]

#: Hand-written C beside them: the walks every Produce request and answer takes, and the header peek of every
#: request (protocol/_wire.c; protocol/native.py loads it, the Python walks stay the reference and the fallback), with
#: the headers it includes (the Produce walks' grammar, generated from Kafka's specs: scripts/generate-protocol).
C_MODULES = {"insync_proxy.protocol._wire": "insync_proxy/protocol/_wire.c"}
C_HEADERS = {"insync_proxy.protocol._wire": ["insync_proxy/protocol/_wire_walkers.h"]}


#: setup.py's commands that only describe the project (pip's metadata step before a build: `dist_info`); they run
#: without the extensions, which mypyc would otherwise generate for nothing first (19 s of the image's build).
METADATA_COMMANDS = {"dist_info", "egg_info"}


def _ext_modules() -> list[object]:
    if os.environ.get("INSYNC_PROXY_COMPILE", "").lower() not in ("1", "true", "yes"):
        return []
    commands = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    if commands and commands[0] in METADATA_COMMANDS:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:  # pip's isolated build has only setuptools: see scripts/compile
        raise SystemExit("INSYNC_PROXY_COMPILE=1 needs mypy in the build environment: "
                         "pip install mypy, then build with --no-build-isolation") from exc
    # the runtime library shared by the modules lives in the package too: insync_proxy/_data_path__mypyc
    compiled = list(mypycify([f"insync_proxy/{m}" for m in COMPILED_MODULES], opt_level="3", debug_level="1",
                             group_name="insync_proxy._data_path"))
    return compiled + [Extension(name, [source], depends=C_HEADERS.get(name, []),
                                 extra_compile_args=["-O2", "-Wall", "-Werror"])
                       for name, source in C_MODULES.items()]


if __name__ == "__main__":
    setup(ext_modules=_ext_modules())

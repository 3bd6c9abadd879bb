"""Whether the data path runs compiled (mypyc: setup.py, scripts/compile), and whether that is stale.

Python imports a module's C extension in preference to its source, so a compiled module left behind
after its source changed runs the old code. Startup logs it and the test suite refuses to run on it.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: The hand-written C modules' names (setup.py: C_MODULES), told apart in an installed wheel too.
C_MODULE_NAMES = frozenset({"_wire"})


@dataclass(frozen=True)
class CompiledModule:
    name: str
    extension: Path
    #: The source it was built from in place (scripts/compile); None in an installed wheel, whose files
    #: all carry the time they were unpacked.
    source: Path | None

    @property
    def stale(self) -> bool:
        """Its source changed after it was compiled in place (or is gone)."""
        if self.source is None:
            return False
        if not self.source.exists():
            return True
        built = self.extension.stat().st_mtime
        # hand-written C: its generated headers beside it count too (protocol/_wire_walkers.h)
        headers = self.source.parent.glob(f"{self.source.stem}_*.h") if self.source.suffix == ".c" else ()
        return any(path.stat().st_mtime > built for path in (self.source, *headers))


def compiled_modules(package: Path | None = None) -> list[CompiledModule]:
    """The package's modules that have a C extension beside their source, by module name.

    `package` is an installed package's folder (insync_proxy/ with its subpackages inside, as in a
    wheel); by default, the folder the running package is imported from (in a checkout its subpackages
    are links to the top-level folders, followed)."""
    if package is None:
        import insync_proxy

        package = Path(str(insync_proxy.__file__)).parent
    return sorted(_find(("insync_proxy",), package), key=lambda m: m.name)


@functools.cache
def _find(package: tuple[str, ...], root: Path) -> tuple[CompiledModule, ...]:
    """Walked once per process and folder (startup log, build_info, every ProxyMetrics); `stale` is
    read from the files each time it is asked."""
    in_place = (root.parent / "setup.py").is_file()  # a source checkout, not site-packages
    found: list[CompiledModule] = []
    for directory, _dirs, files in os.walk(root, followlinks=True):
        relative = Path(directory).relative_to(root).parts
        for file in files:
            suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if file.endswith(s)), None)
            if suffix is None:
                continue
            stem = file[: -len(suffix)]
            if stem.endswith("__mypyc"):  # the runtime library the compiled modules share: no source
                continue
            extension = Path(directory) / file
            source = extension.with_name(stem + ".py")
            if not source.exists() and extension.with_name(stem + ".c").exists():
                source = extension.with_name(stem + ".c")  # hand-written C (setup.py: C_MODULES)
            found.append(CompiledModule(".".join((*package, *relative, stem)), extension,
                                        source if in_place else None))
    return tuple(found)


def describe(modules: list[CompiledModule]) -> str:
    """One line for the log and for scripts/compile."""
    if not modules:
        return "interpreted (scripts/compile builds the compiled data path)"
    stale = [m.name for m in modules if m.stale]
    in_c = sum(1 for m in modules if m.name.rpartition(".")[2] in C_MODULE_NAMES)
    line = f"compiled with mypyc: {len(modules) - in_c} modules"
    if in_c:
        line += f", and {in_c} in C"
    if stale:
        line += (f"; {len(stale)} older than their source, so not the code on disk: {', '.join(stale)} "
                 "(run scripts/compile again, or scripts/compile --clean)")
    return line


def main() -> int:
    modules = compiled_modules()
    print(describe(modules))
    return 1 if any(m.stale for m in modules) else 0


if __name__ == "__main__":
    sys.exit(main())

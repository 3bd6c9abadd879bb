"""Class data sharing for the local cluster's JVMs: a Kafka version's classes archived once per JDK.

A JVM spends most of its start loading, verifying and linking classes; a Kafka broker loads some 7,000.
A dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` writes it, ``-XX:SharedArchiveFile`` maps
it) holds them ready to map: a 3-broker cluster (4 JVMs) then starts on about 6 CPU seconds instead of 10,
in about half the time (measured on 2 cores, Kafka 4.3.1, JDK 17).

How it is made, without a step of its own:

- the first broker launched while no archive exists writes one when it exits, into a file of its own
  (a partial name: several clusters, in several processes, may make one at once);
- once that JVM has exited, another JVM must start with the file (``-Xshare:on``, which refuses an
  archive it cannot use; a truncated one can crash a JVM, so it is never used unchecked); only then is
  the file moved into place (an atomic rename, the last writer wins; every candidate was checked);
- the archive's name carries the JDK's identity and the jars' folder: another JDK (or an update in place)
  or another Kafka makes its own. They live in the cache (``class-archives/``, about 50 MB each), the
  MAX_ARCHIVES most recently used of them.

A JVM that cannot use the archive anyway (a classpath changed in place) prints one warning and runs
without it, as it would have. ``ClusterSettings.class_archive = False`` turns all of this off.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Partial archives older than this are left over from a process that never stopped its cluster: removed.
STALE_PARTIAL_SECONDS = 3600.0
#: A JDK's ``release`` file: JAVA_VERSION="17.0.15".
_JAVA_VERSION = re.compile(r'^JAVA_VERSION="(\d+)(?:\.[^"]*)?"', re.MULTILINE)
#: The first JDK whose JVM writes a dynamic archive at exit.
MIN_JAVA_MAJOR = 13
#: Archives kept in the cache (40-50 MB each): the most recently used; a new one removes the oldest beyond.
MAX_ARCHIVES = 8


def _jdk_identity(java: str) -> str | None:
    """A short key for the JDK behind ``java`` (its path, version and the JVM library's size and time), or
    None when it cannot write dynamic archives (older than 13) or does not say its version."""
    home = Path(java).resolve().parent.parent
    try:
        release = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _JAVA_VERSION.search(release)
    if found is None or int(found.group(1)) < MIN_JAVA_MAJOR:
        return None
    parts = [str(home), found.group(0)]
    for library in (home / "lib" / "server" / "libjvm.so", home / "lib" / "server" / "libjvm.dylib"):
        try:
            stat = library.stat()
        except OSError:
            continue
        parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one classpath (a Kafka version's ``libs/*``) for one JDK."""

    java: str
    classpath: str
    path: Path

    @classmethod
    def for_kafka(cls, java: str, libs: Path, directory: Path) -> ClassArchive | None:
        """The archive for Kafka's jars in ``libs``, kept in ``directory`` (named by the JDK and the jars' folder),
        or None when the JDK cannot make one."""
        jdk = _jdk_identity(java)
        if jdk is None:
            return None
        classpath = f"{libs.resolve()}/*"
        key = hashlib.sha256(f"{jdk}\n{classpath}".encode()).hexdigest()[:16]
        return cls(java, classpath, directory / f"kafka-{key}.jsa")

    def ready(self) -> bool:
        return self.path.is_file()

    def use_options(self) -> list[str]:
        """JVM options that map the archive (nothing while there is none); marks it used (see MAX_ARCHIVES)."""
        try:
            os.utime(self.path)
        except OSError:
            return []
        return [f"-XX:SharedArchiveFile={self.path}"]

    def dump_options(self) -> tuple[list[str], Path]:
        """JVM options that write a candidate archive when the JVM exits, and that candidate's file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_partials()
        candidate = self.path.with_name(f"{self.path.stem}.{os.getpid()}-{time.monotonic_ns()}.partial")
        return [f"-XX:ArchiveClassesAtExit={candidate}"], candidate

    def settle(self, candidate: Path, timeout: float = 60.0) -> bool:
        """After the JVM that wrote ``candidate`` exited: check it and move it into place (True), or remove it."""
        crash_report = candidate.with_suffix(".crash")
        try:
            if not candidate.is_file() or candidate.stat().st_size == 0:
                return False  # killed before it could write, or the JDK declined
            # A broken archive can crash the checking JVM: its crash report goes to a file removed below, no core.
            check = subprocess.run(
                [self.java, "-Xshare:on", f"-XX:SharedArchiveFile={candidate}", f"-XX:ErrorFile={crash_report}",
                 "-XX:-CreateCoredumpOnCrash", "-cp", self.classpath, "-version"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout,
                cwd=candidate.parent,
            )
            if check.returncode != 0:
                return False
            os.replace(candidate, self.path)
            self._keep_recent_archives()
            return True
        except (OSError, subprocess.SubprocessError):
            return False
        finally:
            candidate.unlink(missing_ok=True)
            crash_report.unlink(missing_ok=True)

    def _keep_recent_archives(self) -> None:
        """Each JDK update and each Kafka makes an archive of its own: keep the MAX_ARCHIVES most recently used."""
        def last_used(archive: Path) -> float:
            try:
                return archive.stat().st_mtime
            except OSError:
                return 0.0

        for old in sorted(self.path.parent.glob("*.jsa"), key=last_used, reverse=True)[MAX_ARCHIVES:]:
            if old != self.path:
                old.unlink(missing_ok=True)

    def _remove_stale_partials(self) -> None:
        now = time.time()
        for partial in self.path.parent.glob(f"{self.path.stem}.*.partial"):
            try:
                if now - partial.stat().st_mtime > STALE_PARTIAL_SECONDS:
                    partial.unlink()
            except OSError:
                pass

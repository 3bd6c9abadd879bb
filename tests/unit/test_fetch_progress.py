"""The first run's jar download progress: one updating line on a terminal, a line every few seconds in CI."""

from __future__ import annotations

import io

from insync_proxy.devcluster.distribution import FetchProgress

MAVEN_LINES = [
    "[INFO] Scanning for projects...\n",
    "Downloading from central: https://repo.maven.apache.org/maven2/org/apache/kafka/kafka-clients/4.3.1/"
    "kafka-clients-4.3.1.jar\n",
    *(
        f"Downloaded from central: https://repo.maven.apache.org/maven2/org/x/a{i}/1.0/a{i}-1.0.jar "
        f"({i} kB at 34 kB/s)\n"
        for i in range(50)
    ),
    "[INFO] BUILD SUCCESS\n",
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_updating_line() -> None:
    out = Terminal()
    progress = FetchProgress(stream=out)
    for line in MAVEN_LINES:
        progress.line(line)
    progress.finish()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("(latest: a49-1.0.jar)\n")
    assert text.count("\r") == 50
    assert "s)" not in text.replace("fetched (latest", "")


def test_off_a_terminal_progress_is_a_whole_line_every_few_seconds() -> None:
    said: list[str] = []
    progress = FetchProgress(said.append, interval=3600)
    for line in MAVEN_LINES:
        progress.line(line)
    progress.finish()
    assert said == ["  ... 50 artifacts fetched"]
    said.clear()
    progress = FetchProgress(said.append, interval=0)
    for line in MAVEN_LINES[:5]:
        progress.line(line)
    assert said[-1] == "  ... 3 artifacts fetched (latest: a2-1.0.jar)"
    assert all(line.startswith("  ... ") and line.count(")") == line.count("(") for line in said)


def test_a_pipe_without_a_callback_gets_whole_lines() -> None:
    out = io.StringIO()
    progress = FetchProgress(stream=out, interval=0)
    for line in MAVEN_LINES:
        progress.line(line)
    progress.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 50 and "\r" not in out.getvalue()
    assert lines[-1] == "  ... 50 artifacts fetched (latest: a49-1.0.jar)"

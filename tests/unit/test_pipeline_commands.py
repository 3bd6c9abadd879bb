"""`insync-proxy report` and `insync-proxy stream`: their command lines are cli.py's, one door each; the help
and the usage errors need no Spark, and without the pipeline extra both say so and exit 2."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from insync_proxy import cli
from insync_proxy.cli import build_parser, main, report_options, stream_options
from insync_proxy.pipeline import stream
from insync_proxy.pipeline.report import KafkaInput, ReportOptions
from insync_proxy.pipeline.stream import StreamOptions

ROOT = Path(__file__).resolve().parents[2]


def test_stream_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    # When a user asks the stream command for its help
    with pytest.raises(SystemExit) as exit_info:
        main(["stream", "--help"])
    # Then it exits 0 and names the command they typed, its source choice, its output, its exit codes
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: insync-proxy stream ")
    assert "(--kafka-bootstrap HOST:PORT[,...] | --input-dir DIR)" in out
    for flag in ("--checkpoint", "--available-now", "--watermark", "--starting-offsets", "--shuffle-partitions"):
        assert flag in out
    assert "OUTPUT/windows" in out and "exit status: 0 done" in out
    assert "pip install 'insync-proxy[pipeline]'" in out


def test_the_top_level_help_lists_both_pipeline_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "    report " in out and "    stream " in out


def test_a_mistyped_stream_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # Given an otherwise complete command with a misspelt --window
    with pytest.raises(SystemExit) as exit_info:
        main(["stream", "--input-dir", "in", "--output", "out", "--checkpoint", "ckpt", "--windw", "2 minutes"])
    # Then exit 2 and one line naming the flag (not its value) and where the flags are listed
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["insync-proxy stream: error: unrecognized arguments: --windw "
                     "(`insync-proxy stream --help` lists the flags)"]


def test_stream_flags_are_never_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["stream", "--input-dir", "in", "--output", "out", "--checkpoint", "ckpt", "--available"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --available " in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["stream", "--kafka-bootstrap", "h:9092", "--output", "o", "--checkpoint", "c"], "--kafka-bootstrap needs --topic"),
    (["stream", "--input-dir", "i", "--output", "o", "--checkpoint", "c", "--shuffle-partitions", "0"],
     "--shuffle-partitions must be at least 1"),
    (["stream", "--input-dir", "i", "--kafka-bootstrap", "h:9092", "--output", "o", "--checkpoint", "c"],
     "not allowed with argument"),
    (["report", "--output", "o"], "give --input, --staged and/or --kafka-bootstrap with --topic"),
    (["report", "--input", "i", "--topic", "t", "--output", "o"], "--kafka-bootstrap and --topic go together"),
    (["compact", "--input", "i", "--output", "o", "--rollup-seconds", "-1"], "--rollup-seconds must be 0"),
    (["compact", "--input", "i"], "the following arguments are required: --output"),
])
def test_options_that_do_not_go_together_are_usage_errors(argv: list[str], message: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"insync-proxy {argv[0]}: error: ") and message in err, err


@pytest.mark.parametrize("argv", [
    ["report", "--input", "audit/", "--output", "out/"],
    ["stream", "--input-dir", "audit/", "--output", "out/", "--checkpoint", "ckpt/"],
    ["compact", "--input", "audit/", "--output", "staged/"],
])
def test_without_the_pipeline_extra_both_commands_say_how_to_install_it(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Given an installation without PySpark (None in sys.modules: `import pyspark` raises ImportError)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    # When a complete command runs; Then one line says what to install, and the exit status is 2
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"insync-proxy {argv[0]} needs the pipeline extra: pip install 'insync-proxy[pipeline]'")
    assert len(err.splitlines()) == 1


def test_help_and_usage_errors_load_no_pipeline_module_and_no_spark() -> None:
    # Given a fresh interpreter; When both commands print their help and refuse a wrong flag
    code = ("import json, sys\n"
            "from insync_proxy.cli import main\n"
            "codes = []\n"
            "for argv in (['report', '--help'], ['stream', '--help'], ['stream', '--nope'], ['report', '-x'],\n"
            "             ['compact', '--help'], ['compact', '--nope']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as exc:\n"
            "        codes.append(exc.code)\n"
            "print(json.dumps([codes, sorted(m for m in sys.modules if m.startswith(('pyspark', 'py4j', "
            "'insync_proxy.pipeline')))]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    codes, loaded = json.loads(done.stdout.splitlines()[-1])
    # Then they exit 0, 0, 2, 2 and nothing of the pipeline or of Spark was imported (but the defaults their help
    # shows: constants only)
    assert codes == [0, 0, 2, 2, 0, 2]
    assert loaded == ["insync_proxy.pipeline", "insync_proxy.pipeline.defaults"]


def test_the_parsed_stream_command_is_the_stream_options() -> None:
    args = build_parser().parse_args(
        ["stream", "--kafka-bootstrap", "h1:9092,h2:9092", "--topic", "insync-audit", "-o", "out", "--checkpoint",
         "ckpt", "--master", "local[2]", "--window", "2 minutes", "--watermark", "1 minute", "--trigger",
         "5 seconds", "--available-now", "--starting-offsets", "latest", "--max-offsets-per-trigger", "1000",
         "--shuffle-partitions", "4", "-v"])
    assert stream_options(args) == StreamOptions(
        kafka_bootstrap="h1:9092,h2:9092", topic="insync-audit", input_dir=None, output="out", checkpoint="ckpt",
        master="local[2]", window="2 minutes", watermark="1 minute", trigger="5 seconds", available_now=True,
        starting_offsets="latest", max_offsets_per_trigger=1000, shuffle_partitions=4, verbose=True)


def test_the_stream_commands_defaults_are_the_jobs_defaults() -> None:
    # cli.py writes them out (it loads no pipeline module for `run`); the job's functions default to these
    options = stream_options(build_parser().parse_args(["stream", "--input-dir", "in", "-o", "o", "--checkpoint", "c"]))
    assert (options.window, options.watermark) == (stream.DEFAULT_WINDOW, stream.DEFAULT_WATERMARK)
    assert (options.trigger, options.available_now, options.starting_offsets, options.shuffle_partitions) == \
        ("30 seconds", False, None, cli.PIPELINE_SHUFFLE_PARTITIONS)


def test_the_parsed_report_command_is_the_report_options() -> None:
    args = build_parser().parse_args(
        ["report", "-i", "a/", "b/*.jsonl", "--input", "c/", "--staged", "s/", "-o", "out", "--kafka-bootstrap",
         "h:9092", "--topic", "insync-audit", "--ending-offsets", '{"insync-audit":{"0":10}}', "--staging", "memory",
         "-q"])
    assert report_options(args) == ReportOptions(
        inputs=("a/", "b/*.jsonl", "c/"), output="out", staged=("s/",),
        kafka=KafkaInput("h:9092", "insync-audit", "earliest", '{"insync-audit":{"0":10}}'), master=None,
        shuffle_partitions=8, driver_memory="2g", staging="memory", quiet=True, verbose=False)
    without_kafka = report_options(build_parser().parse_args(["report", "-i", "a/", "-o", "out"]))
    assert without_kafka.kafka is None


def test_the_jobs_parse_no_command_line() -> None:
    # One door: the report and stream modules take typed options; only cli.py reads a command line for them
    assert not (ROOT / "pipeline" / "report_job.py").exists()  # spark-submit runs insync_proxy/__main__.py
    for module in ("pipeline/report.py", "pipeline/stream.py", "pipeline/compact.py"):
        tree = ast.parse((ROOT / module).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "argparse" not in imported, module


@pytest.mark.parametrize("command", ["stream", "report"])
def test_the_pipeline_modules_run_as_commands_fail_and_say_where_the_command_went(command: str) -> None:
    # A scheduled job or an old runbook still running `python -m insync_proxy.pipeline.stream` must not pass
    ran = subprocess.run([sys.executable, "-m", f"insync_proxy.pipeline.{command}"], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 1, ran
    assert f"is not a command: the job is `insync-proxy {command}`" in ran.stderr, ran.stderr


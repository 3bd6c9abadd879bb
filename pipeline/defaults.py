"""The pipeline's defaults that its command line shows in `--help` as well: constants only, so the command line
reads them without loading a job (or PySpark)."""

from __future__ import annotations

from typing import Final

#: spark.sql.shuffle.partitions of the report's session and of a new stream checkpoint's state store (a
#: checkpoint keeps the number it started with). Spark's own 200 means 200 state-store tasks per micro-batch
#: and up to 200 Parquet files per batch: a finished 150 s stream run (1,833 lines) took 76 s and wrote 41
#: files for 45 window rows with 200, 21 s with 8.
SHUFFLE_PARTITIONS: Final = 8
#: The stream's window and watermark.
STREAM_WINDOW: Final = "1 minute"
STREAM_WATERMARK: Final = "5 minutes"

"""Record batches (magic 2), uncompressed: what the proxy's own producers (audit sink, dev cluster probe) send.

The CRC-32C (Castagnoli) here is table-driven pure Python: fine for the proxy's own small batches,
never used on clients' records (the proxy forwards those untouched).
"""

from __future__ import annotations

import struct
import time

__all__ = ["crc32c", "encode_record_batch"]

_CRC32C_TABLE: list[int] = []


def _crc32c_table() -> list[int]:
    if not _CRC32C_TABLE:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC32C_TABLE.append(c)
    return _CRC32C_TABLE


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of Kafka record batches (magic 2)."""
    table = _crc32c_table()
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record_batch(values: list[bytes], keys: list[bytes] | list[bytes | None] | None = None) -> bytes:
    """A magic-2 record batch, uncompressed, non-idempotent, one record per value."""
    now = int(time.time() * 1000)
    records = bytearray()
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        body = bytearray(b"\x00")  # attributes
        body += _varint(0)  # timestamp delta
        body += _varint(i)  # offset delta
        if key is None:
            body += _varint(-1)
        else:
            body += _varint(len(key)) + key
        body += _varint(len(value)) + value
        body += _varint(0)  # headers
        records += _varint(len(body)) + body
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(values) - 1, now, now, -1, -1, -1, len(values)) + bytes(records)
    )
    crc = crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length

"""Fuzzing every decoder with 100,000 mutated and random frames: only ProtocolError may escape.

A longer run: ``python -m tests.protocol.fuzz --iterations 10000000``.
"""

from __future__ import annotations

import os

from .fuzz import build_corpus, run


def test_every_corpus_frame_is_valid_before_mutation() -> None:
    # Given the unmutated corpus, every target accepts its frame (so the fuzzer mutates real frames)
    for frame, targets in build_corpus(seed=0):
        for target in targets:
            target(frame)


def test_hundred_thousand_mutated_frames_raise_only_protocol_errors() -> None:
    iterations = int(os.environ.get("PROTOCOL_FUZZ_ITERATIONS", "100000"))
    seed = int(os.environ.get("PROTOCOL_FUZZ_SEED", "20240637"))
    # When 100,000 random, bit-flipped, truncated and length-corrupted frames reach every decoder,
    # Then nothing but ProtocolError subclasses escapes (run raises AssertionError otherwise)
    calls = run(iterations, seed)
    assert calls >= iterations

"""The read path's C struct (rust/ferromq-py/include/ferromq_raw_feed.h) is checked
before the first read: a ``_core`` and a ``_protocol`` from different builds stop at
start-up with one error naming both versions, instead of calling through a struct
laid out differently.

Only a ``_core`` from another build can hand ``IOHub`` another version, so the test
makes that capsule itself with the header's layout and a version this build is not.
"""

from __future__ import annotations

import asyncio
import ctypes
import re
from pathlib import Path

import pytest

from ferromq._core import Engine, SocketSet
from ferromq._protocol import IOHub, ReadArena
from ferromq.config import Config
from ferromq.engine import engine_from_config

HEADER = Path(__file__).parents[2] / "rust" / "ferromq-py" / "include" / "ferromq_raw_feed.h"
CAPSULE_NAME = b"ferromq._core.RawFeed"


def header_version() -> int:
    found = re.search(r"^#define FERROMQ_RAW_FEED_VERSION (\d+)$", HEADER.read_text(), re.M)
    assert found, f"{HEADER} defines no FERROMQ_RAW_FEED_VERSION"
    return int(found.group(1))


class _RawFeed(ctypes.Structure):
    # ferromq_raw_feed as the header declares it.
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("engine", ctypes.c_void_p),
        ("feed", ctypes.c_void_p),
    ]


def _capsule_pointer(capsule: object) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    pointer = get(capsule, CAPSULE_NAME)
    assert isinstance(pointer, int) and pointer
    return pointer


class _OtherBuild:
    """An engine whose capsule says ``version`` (a ``_core`` built from other sources)."""

    def __init__(self, version: int) -> None:
        self.raw = _RawFeed(version, ctypes.sizeof(_RawFeed), None, None)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.capsule = new(ctypes.addressof(self.raw), CAPSULE_NAME, None)

    def raw_feed(self) -> object:
        return self.capsule


def _hub(engine: object) -> IOHub:
    loop = asyncio.new_event_loop()
    try:
        sockets = SocketSet(engine_from_config(Config()), 65536, 1024)
        return IOHub(engine, loop, ReadArena(), lambda event: None, 1024, sockets)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_this_builds_engine_hands_over_the_headers_version() -> None:
    engine: Engine = engine_from_config(Config())
    hub = _hub(engine)
    raw = _RawFeed.from_address(_capsule_pointer(hub.raw_feed))
    assert (raw.version, raw.size) == (header_version(), ctypes.sizeof(_RawFeed))


def test_a_raw_feed_of_another_version_is_refused_naming_both() -> None:
    size, version, other = ctypes.sizeof(_RawFeed), header_version(), header_version() + 1
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"ferromq._core's raw feed is version {other} ({size} bytes) but "
            f"ferromq._protocol was built for version {version} ({size} bytes): "
            "rebuild both from one source"
        ),
    ):
        _hub(_OtherBuild(other))

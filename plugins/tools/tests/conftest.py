"""Fixtures for astuner_tools: the sandboxes that work on this machine."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sandbox_parts import usable


@pytest.fixture(params=["bwrap", "unshare"])
def confined(request: pytest.FixtureRequest) -> str:
    """Each sandbox that confines the filesystem, where it works here."""
    return usable(request.param)


@pytest.fixture(
    params=[
        "bwrap",
        "unshare",
        pytest.param("none", marks=pytest.mark.xfail(strict=True, reason="without a sandbox it escapes")),
    ]
)
def confined_or_not(request: pytest.FixtureRequest) -> str:
    """The confining sandboxes, and `none`, where the escape must succeed: proof that the test catches it."""
    return usable(request.param)


@pytest.fixture
def host_listener() -> Iterator[tuple[str, int]]:
    """A server on the host's loopback that the code must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()
    server.close()

"""Shared fixtures: a real Mosquitto broker for the tests marked ``mqtt``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NoReturn

import pytest

from p2pem.deploy.broker import BrokerHandle, find_mosquitto, start_broker, write_password_file

BrokerFactory = Callable[..., BrokerHandle]

#: CI (``CI=true``, as .ci/run is started) must run every test: a missing broker or namespace support fails there.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip a test whose requirement this machine lacks; in CI fail instead, so nothing is hidden."""
    if IN_CI:
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI a missing Mosquitto stops the run at once rather than skipping a third of the deployment tests."""
    if IN_CI and (find_mosquitto() is None or find_mosquitto("mosquitto_passwd") is None):
        raise pytest.UsageError("CI=true but mosquitto (and mosquitto_passwd) are not installed: the MQTT tests cannot run")


@pytest.fixture
def mosquitto_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Factory that starts Mosquitto brokers on free local ports; all are stopped afterwards.

    Call it as ``broker = mosquitto_broker(passwords={"node1": "pw"}, acl=acl_text)``;
    both arguments are optional (anonymous access, no ACL).  The returned
    :class:`~p2pem.deploy.broker.BrokerHandle` has ``host``, ``port``, ``restart()`` and
    ``log_text()``.  Tests using it should carry ``pytest.mark.mqtt``.
    """
    executable = find_mosquitto()
    if executable is None:
        unavailable("mosquitto is not installed (apt-get install mosquitto); MQTT tests need a real broker")
    handles: list[BrokerHandle] = []

    def start(*, passwords: Mapping[str, str] | None = None, acl: str | None = None) -> BrokerHandle:
        directory = tmp_path / f"broker{len(handles)}"
        directory.mkdir()
        password_file = None
        if passwords is not None:
            password_file = write_password_file(directory / "passwords", passwords)
        acl_file = None
        if acl is not None:
            acl_file = directory / "acl"
            acl_file.write_text(acl, encoding="utf-8")
        handle = start_broker(directory, password_file=password_file, acl_file=acl_file, executable=executable)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()

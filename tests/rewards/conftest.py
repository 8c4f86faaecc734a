"""The remote reward's test service, shared by test_remote.py and test_remote_faults.py."""

import pytest

from tests.rewards.test_remote import Service


@pytest.fixture
def service():
    """``start(answer)``: a ``Service`` on 127.0.0.1 answering with ``answer(items, n)``; each
    one started is closed after the test."""
    started = []

    def start(answer):
        started.append(Service(answer))
        return started[-1]

    yield start
    for s in started:
        s.close()

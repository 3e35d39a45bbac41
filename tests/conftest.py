import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_aiorest_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiorest")

"""The build's command runner (torch_dlpack_bridge/_build.py: Commands), called directly: a stopped build starts
no further command and stops the ones running (tests/test_loader.py covers whole builds at import)."""

import threading
import time

import pytest

from torch_dlpack_bridge import _build


def test_a_stopped_build_starts_no_further_command(tmp_path):
    commands = _build.Commands()
    commands.stop_all()
    marker = tmp_path / "ran"
    with pytest.raises(RuntimeError, match="the build was stopped"):
        commands.run(["touch", str(marker)])
    assert not marker.exists()


def test_stopping_a_build_kills_the_commands_running():
    commands = _build.Commands()
    outcome = []

    def run():
        try:
            commands.run(["sleep", "60"])
        except RuntimeError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=run)
    start = time.monotonic()
    thread.start()
    while not commands._running and time.monotonic() - start < 10:
        time.sleep(0.01)
    commands.stop_all()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - start < 20
    assert outcome and "failed with exit code -9" in outcome[0]

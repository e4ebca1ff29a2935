"""The VLLMServer resource against real vLLM processes: a server that dies while starting, attaching to
the session's server, refusing another configuration on its port, a server shared by two users."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from eagle_assets.resources import VLLMServer
from eagle_assets.resources.server_lifecycle import VLLMServerError
from eagle_assets.resources.server_process import port_in_use
from tests.helpers.logs import Lines
from tests.helpers.ports import free_port


def test_a_server_that_dies_while_starting_fails_fast_with_its_log_tail(tmp_path):
    port = free_port()
    server = VLLMServer(
        model=str(tmp_path / "no-such-model"),
        port=port,
        state_dir=str(tmp_path),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        startup_timeout_s=900,
    )
    log = Lines()
    with (
        pytest.raises(VLLMServerError, match=r"exited with exit code \d+ before it was ready") as failure,
        server.serve(log=log),
    ):
        pass
    assert "no-such-model" in str(failure.value)  # the log tail says what was wrong
    assert any(line.startswith("[vllm] ") for line in log.lines)  # server lines reached the step log
    assert not port_in_use("127.0.0.1", port) and not list(tmp_path.glob("*.json"))


def test_the_same_configuration_attaches_to_the_running_server(vllm_server_config, vllm_server_urls):
    log = Lines()
    with vllm_server_config.serve(log=log) as urls:
        assert urls == vllm_server_urls
    assert "attaching to running server" in log.text() and "starting" not in log.text()
    # Leaving an attached server alone: it belongs to the session fixture.
    assert httpx.get(vllm_server_urls[0].removesuffix("/v1") + "/health").status_code == 200


def test_another_configuration_on_a_running_servers_port_is_refused(vllm_server_config, vllm_server_urls):
    other = vllm_server_config.model_copy(update={"max_num_seqs": 8})
    with pytest.raises(VLLMServerError, match="different configuration"), other.serve(log=Lines()):
        pass


@pytest.mark.stops_session_server
def test_a_shared_server_is_stopped_by_its_last_user_not_its_launcher(
    vllm_server, vllm_server_config, vllm_server_urls
):
    """The session's server, which its fixture launched, used by this test as a second step (e.g. a second
    partition's step in the same run): the launcher leaving keeps it up for this one; this last user stops it.
    It runs after every other test of that server (tests/conftest.py)."""
    log = Lines()
    attacher = vllm_server_config.serve(log=log)
    urls = attacher.__enter__()
    try:
        assert urls == vllm_server_urls
        vllm_server.close()  # the launching step leaves
        assert "still used by 1 other step" in vllm_server.log.text()
        assert httpx.get(urls[0].removesuffix("/v1") + "/health").status_code == 200
    finally:
        attacher.__exit__(None, None, None)
    assert "stopping pid" in log.text()
    assert not port_in_use("127.0.0.1", vllm_server_config.port)
    assert not list(Path(vllm_server_config.state_dir).glob("*.json"))

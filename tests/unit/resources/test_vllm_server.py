"""The VLLMServer resource: launch description, refusals and fast failure, against fake vLLM processes
and ports nothing listens on (the real server: tests/integration/resources/test_vllm_server.py)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from eagle_assets.resources import VLLMServer, server_lifecycle
from eagle_assets.resources.server_lifecycle import VLLMServerError
from eagle_assets.resources.server_process import LogFollower, stop_process_group
from tests.helpers.logs import Lines
from tests.helpers.ports import free_port
from tests.helpers.processes import fake_vllm, kill_group


def test_command_binds_localhost_and_never_carries_the_api_key(monkeypatch):
    monkeypatch.setenv("MY_VLLM_KEY", "s3cret-key")
    server = VLLMServer(model="/models/m", port=8123, api_key_env="MY_VLLM_KEY", extra_args=["--seed", "1"])
    argv = server.command("/models/m")
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[-2:] == ["--seed", "1"]
    assert not any("s3cret" in arg for arg in argv)
    assert server.api_key() == "s3cret-key"
    # The key is part of the identity (a server with another key cannot be attached to) only as a hash.
    with_key = server.fingerprint(argv, server.launch_env())
    monkeypatch.delenv("MY_VLLM_KEY")
    assert server.fingerprint(argv, server.launch_env()) != with_key and server.api_key() is None


def test_the_embedded_verifier_gets_a_small_cpu_kv_cache_unless_one_is_set(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert VLLMServer().launch_env() == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert VLLMServer(env={"VLLM_CPU_KVCACHE_SPACE": "4"}).launch_env() == {"VLLM_CPU_KVCACHE_SPACE": "4"}
    assert VLLMServer(model="/models/big").launch_env() == {}


def test_kimi_preset_is_tensor_parallel_8_with_its_reasoning_parser():
    argv = VLLMServer.kimi_k25("/models/Kimi-K2.5", port=9000).command("/models/Kimi-K2.5")
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--reasoning-parser") + 1] == "kimi_k2"
    assert "--trust-remote-code" in argv and argv[argv.index("--port") + 1] == "9000"
    # A production model is compiled: the embedded verifiers' eager serving never reaches it.
    assert "--enforce-eager" not in argv and "--compilation-config" not in argv


def test_embedded_verifiers_are_served_eager_and_tiny_kimi_without_vllm_cpus_rotary_op():
    qwen3 = VLLMServer(embedded="tiny-qwen3").command("/cache/tiny-qwen3")
    assert "--enforce-eager" in qwen3 and "--compilation-config" not in qwen3
    kimi = VLLMServer(embedded="tiny-kimi", extra_args=["--seed", "1"]).command("/cache/tiny-kimi")
    assert "--enforce-eager" in kimi and kimi[-2:] == ["--seed", "1"]  # the user's arguments come last
    assert json.loads(kimi[kimi.index("--compilation-config") + 1]) == {"custom_ops": ["all", "-rotary_embedding"]}
    assert "--enforce-eager" not in VLLMServer(model="/models/m").command("/models/m")


def test_a_port_taken_by_another_process_is_a_clear_error(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = VLLMServer(model="/models/m", port=port, state_dir=str(tmp_path))
        with (
            pytest.raises(VLLMServerError, match=rf"port {port} .* already in use by another process"),
            server.serve(log=Lines()),
        ):
            pass


def test_external_mode_names_the_unreachable_url_after_its_timeout():
    url = f"http://127.0.0.1:{free_port()}/v1"
    server = VLLMServer(mode="external", base_urls=[url], startup_timeout_s=0.5)
    with pytest.raises(VLLMServerError, match=f"not ready after 0.5s .*{url}"), server.serve(log=Lines()):
        pass


def test_modes_without_their_settings_are_refused():
    with pytest.raises(VLLMServerError, match="needs base_urls"), VLLMServer(mode="external").serve(log=Lines()):
        pass
    with pytest.raises(VLLMServerError, match="needs systemd_unit"), VLLMServer(mode="systemd").serve(log=Lines()):
        pass


@pytest.mark.skipif(shutil.which("systemctl") is None, reason="needs systemctl")
def test_systemd_mode_reports_a_unit_that_cannot_start():
    server = VLLMServer(mode="systemd", systemd_unit="eagle-assets-no-such-unit.service", startup_timeout_s=5)
    with (
        pytest.raises(VLLMServerError, match=r"systemctl start eagle-assets-no-such-unit.service` failed"),
        server.serve(log=Lines()),
    ):
        pass


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored():
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert stubborn.stdout.readline().strip() == "up"
    log = Lines()
    stop_process_group(stubborn.pid, grace_s=1, log=log, child=stubborn)
    assert stubborn.returncode == -signal.SIGKILL
    assert "ignored SIGTERM" in log.text()


def test_a_failure_before_the_readiness_wait_still_leaves_the_server(tmp_path, monkeypatch):
    """The heartbeat and the log follower start inside serve()'s try: when starting one fails, the
    heartbeat stops, the user's marker goes, and the last user out stops the server it launched."""
    launched: list[subprocess.Popen] = []

    def launch(launch, files, log):
        launched.append(fake_vllm())
        files.state.write_text(
            json.dumps({"pid": launched[0].pid, "fingerprint": launch.fingerprint, "argv": launch.argv})
        )
        return launched[0]

    class BrokenFollower(LogFollower):
        def start(self):
            raise OSError("log follower failed to start")

    monkeypatch.setattr(server_lifecycle, "start_server", launch)
    monkeypatch.setattr(server_lifecycle, "LogFollower", BrokenFollower)
    server = VLLMServer(model="/models/m", port=free_port(), state_dir=str(tmp_path), stop_grace_s=5)
    # Other tests' servers (the session's shared one) keep their own user heartbeats running.
    before = {thread for thread in threading.enumerate() if thread.name.startswith("vllm-user:")}
    try:
        with pytest.raises(OSError, match="log follower failed to start"), server.serve(log=Lines()):
            pass
        assert launched[0].poll() is not None  # stopped by its last (only) user
        assert not {thread for thread in threading.enumerate() if thread.name.startswith("vllm-user:")} - before
        assert not [marker for users in tmp_path.glob("*.users") for marker in users.glob("*-*")]
    finally:
        kill_group(launched[0])

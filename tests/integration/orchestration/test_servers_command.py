"""``eagle-assets servers`` on the session's real vLLM server."""

from __future__ import annotations

import json
import subprocess

from tests.helpers.runs import BIN


def test_servers_lists_the_managed_server_with_its_live_user(vllm_server_config, vllm_server_urls):
    state_dir = vllm_server_config.state_dir
    listed = subprocess.run(
        [str(BIN / "eagle-assets"), "servers", "--state-dir", state_dir, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    [server] = json.loads(listed.stdout)
    assert server["port"] == vllm_server_config.port and server["alive"] and server["users"] == 1
    assert server["idle_since"] is None and server["model"] == vllm_server_config.resolved_model()
    assert server["idle_stop_after_s"] == vllm_server_config.idle_stop_after_s
    table = subprocess.run(
        [str(BIN / "eagle-assets"), "servers", "--state-dir", state_dir], capture_output=True, text=True, timeout=120
    ).stdout
    assert f"127.0.0.1-{vllm_server_config.port}" in table and str(server["pid"]) in table
    unknown = subprocess.run(
        [str(BIN / "eagle-assets"), "servers", "--state-dir", state_dir, "--stop", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert unknown.returncode == 2 and "no managed vLLM server '1'" in unknown.stderr

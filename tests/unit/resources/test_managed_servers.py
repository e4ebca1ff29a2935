"""The managed-server registry (``eagle-assets servers``, the idle stop every run does first) on state
files written by hand, with fake vLLM processes: no server is started."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import threading
import time

import pytest

from eagle_assets.orchestration.servers import servers_json, servers_report
from eagle_assets.resources import VLLMServer, server_state
from eagle_assets.resources.server_lifecycle import VLLMServerError, start_server
from eagle_assets.resources.server_registry import read_server, stop_idle_servers, stop_server
from eagle_assets.resources.server_state import HOSTNAME_KEY, ServerFiles, note_last_seen, this_host
from tests.helpers.logs import Lines
from tests.helpers.ports import free_port
from tests.helpers.processes import FAKE_VLLM, dead_pid, fake_vllm, kill_group, write_state


@pytest.fixture
def live_server():
    proc = fake_vllm()
    yield proc
    kill_group(proc)


def test_a_launch_records_its_host(tmp_path):
    server = VLLMServer(model="/models/m", state_dir=str(tmp_path))
    launch = dataclasses.replace(server.managed_launch(), argv=FAKE_VLLM, env={}, fingerprint="f" * 16)
    proc = start_server(launch, ServerFiles.at(tmp_path / "a.json"), Lines())
    try:
        assert json.loads((tmp_path / "a.json").read_text())[HOSTNAME_KEY] == this_host()
    finally:
        kill_group(proc)


def test_another_hosts_servers_are_listed_but_never_probed_stopped_or_forgotten(tmp_path, live_server):
    """A state folder shared over NFS: the other host's pids mean nothing here (here one is even a live
    "vLLM" process, which a probe would take for that server and an idle stop would kill)."""
    busy = write_state(tmp_path, "127.0.0.1-8000", live_server.pid, "other-host")
    marker = busy.with_suffix(".users") / f"{dead_pid()}-abcd1234"  # a user on the other host
    marker.parent.mkdir()
    marker.touch()
    gone = write_state(tmp_path, "127.0.0.1-8001", dead_pid(), "other-host")
    log = Lines()

    report = "\n".join(servers_report(tmp_path, None, log))
    assert report.count("on host other-host: not checked or stopped from here") == 2
    [listed, _] = json.loads(servers_json(tmp_path, None, log)[0])
    assert listed["hostname"] == "other-host" and listed["alive"] is None and listed["users"] is None
    with pytest.raises(ValueError, match="runs on host other-host, not on this one"):
        stop_server(tmp_path, "8000", log)
    assert stop_idle_servers(tmp_path, log) == []
    assert live_server.poll() is None and busy.exists() and gone.exists() and marker.exists()


class FakeVLLMServer(VLLMServer):
    """Launches a process that only looks like vLLM (it never answers)."""

    def command(self, model: str) -> list[str]:
        return FAKE_VLLM


def test_hosts_sharing_a_state_dir_keep_their_own_state_on_the_same_port(tmp_path, monkeypatch):
    """Two machines, one state folder (NFS), one port: a serve() here must neither take over nor, as its
    last user, remove the state of the server the other machine launched."""
    server = FakeVLLMServer(
        model="/models/m", port=free_port(), state_dir=str(tmp_path), startup_timeout_s=1, stop_grace_s=5
    )
    with monkeypatch.context() as elsewhere:
        elsewhere.setattr(server_state, "this_host", lambda: "other-host")
        with (
            pytest.raises(VLLMServerError, match="not ready"),
            server.model_copy(update={"keep_alive": True}).serve(log=Lines()),
        ):
            pass
    [theirs] = tmp_path.glob("*.json")
    their_pid = json.loads(theirs.read_text())["pid"]
    os.killpg(their_pid, signal.SIGKILL)  # its pid means nothing on this host
    with pytest.raises(VLLMServerError, match="not ready"), server.serve(log=Lines()):
        pass
    assert json.loads(theirs.read_text())["pid"] == their_pid
    assert list(tmp_path.glob("*.json")) == [theirs]  # ours was removed by its last user


def test_a_state_file_without_a_host_is_this_hosts(tmp_path):
    """Files written before hosts were recorded: their dead server is forgotten as before."""
    old = write_state(tmp_path, "127.0.0.1-8000", dead_pid(), hostname=None)
    assert read_server(old).local
    stop_idle_servers(tmp_path, Lines())
    assert not old.exists()


def test_an_idle_server_of_this_host_is_still_stopped(tmp_path, live_server):
    mine = write_state(tmp_path, "127.0.0.1-8000", live_server.pid, this_host())
    assert [s.name for s in stop_idle_servers(tmp_path, Lines())] == ["127.0.0.1-8000"]
    assert live_server.wait(timeout=10) is not None and not mine.exists()


def test_idle_time_never_predates_the_servers_start(tmp_path, live_server):
    """A last heartbeat left by an earlier server on the same port: the new server, started a minute
    ago with a 10-minute grace, is idle for a minute, not since that heartbeat, and is not stopped."""
    started = time.time() - 60
    mine = write_state(
        tmp_path, "127.0.0.1-8000", live_server.pid, this_host(), started_at=started, idle_stop_after_s=600
    )
    users = mine.with_suffix(".users")
    users.mkdir()
    note_last_seen(users, started - 3600)
    server = read_server(mine)
    assert server.idle_since == started and 60 <= server.idle_s < 120 and not server.expired
    assert stop_idle_servers(tmp_path, Lines()) == [] and live_server.poll() is None


def test_a_dead_servers_state_is_forgotten_under_its_lock_and_only_if_still_dead(tmp_path, live_server):
    """The race: the idle stop reads a dead server's state while a serve() holds the lock, launches a
    new server on that port and writes its state; the new state must survive."""
    state = write_state(tmp_path, "127.0.0.1-8000", dead_pid(), this_host())
    with open(state.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # what serve() holds while it launches
        looking = threading.Thread(target=stop_idle_servers, args=(tmp_path, Lines()))
        looking.start()
        time.sleep(0.5)
        assert state.exists()  # waiting for the lock
        write_state(tmp_path, "127.0.0.1-8000", live_server.pid, this_host(), idle_stop_after_s=3600)
    looking.join(timeout=10)
    assert not looking.is_alive()
    assert json.loads(state.read_text())["pid"] == live_server.pid

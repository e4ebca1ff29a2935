"""Which managed-server state folder a run, and the demo, look at: their ``vllm_server`` resource's
(state files written by hand; no server is started)."""

from __future__ import annotations

import dagster as dg

from eagle_assets.orchestration.executor import recorded_executor
from eagle_assets.orchestration.recovery import configured_state_dir
from eagle_assets.resources import VLLMServer
from eagle_assets.resources.server_state import this_host
from tests.helpers.processes import dead_pid, write_state


@dg.asset
def needs_the_server(vllm_server: VLLMServer) -> None:
    """Only asks for the resource (never serves): its job then carries the vllm_server config."""


def job_of(server: VLLMServer, **definitions) -> dg.JobDefinition:
    return dg.Definitions(
        assets=[needs_the_server],
        resources={"vllm_server": server},
        jobs=[dg.define_asset_job("with_a_server")],
        **definitions,
    ).resolve_job_def("with_a_server")


def job_with_a_managed_server() -> dg.JobDefinition:
    return job_of(VLLMServer(), executor=recorded_executor)


def test_the_configured_state_dir_is_the_resources_with_the_run_configs_over_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_ASSETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SERVER_STATE", str(tmp_path / "from-env"))
    assert configured_state_dir(job_of(VLLMServer())) == tmp_path / "cache" / "vllm-servers"
    assert configured_state_dir(job_of(VLLMServer(state_dir=str(tmp_path / "set")))) == tmp_path / "set"
    assert configured_state_dir(job_of(VLLMServer(state_dir=dg.EnvVar("SERVER_STATE")))) == tmp_path / "from-env"
    run_config = {"resources": {"vllm_server": {"config": {"state_dir": str(tmp_path / "run")}}}}
    assert configured_state_dir(job_of(VLLMServer(state_dir="set")), run_config) == tmp_path / "run"


def test_a_run_stops_the_servers_of_its_configured_state_dir(tmp_path, monkeypatch):
    """The executor's reconcile looks in the run's state folder, not only in the default one."""
    monkeypatch.setenv("EAGLE_ASSETS_CACHE", str(tmp_path / "cache"))
    configured, default = tmp_path / "configured", tmp_path / "cache" / "vllm-servers"
    configured.mkdir()
    default.mkdir(parents=True)
    in_configured = write_state(configured, "127.0.0.1-8000", dead_pid(), this_host())
    in_default = write_state(default, "127.0.0.1-8000", dead_pid(), this_host())
    run_config = {
        "resources": {"vllm_server": {"config": {"state_dir": str(configured)}}},
        "execution": {"config": {"in_process": {}}},
    }
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        result = dg.execute_job(dg.reconstructable(job_with_a_managed_server), instance, run_config=run_config)
        assert result.success
    assert not in_configured.exists() and in_default.exists()


def test_the_demo_stops_the_servers_of_its_configured_state_dir(tmp_path, monkeypatch):
    from eagle_assets.demo.command import run_demo

    monkeypatch.setenv("EAGLE_ASSETS_CACHE", str(tmp_path / "cache"))
    configured = tmp_path / "configured"
    configured.mkdir()
    in_configured = write_state(configured, "127.0.0.1-8000", dead_pid(), this_host())
    defs = dg.Definitions(assets=[needs_the_server], resources={"vllm_server": VLLMServer(state_dir=str(configured))})
    with dg.DagsterInstance.ephemeral() as instance:
        [result] = run_demo(defs, instance, "demo")
        assert result.success
    assert not in_configured.exists()

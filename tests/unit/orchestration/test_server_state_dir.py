"""Which managed-server state folder a run, and the demo, look at: their ``vllm_server`` resource's
(state files written by hand; no server is started)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from eagle_assets.orchestration.executor import recorded_executor
from eagle_assets.orchestration.recovery import configured_state_dir
from eagle_assets.resources import VLLMServer
from eagle_assets.resources.server_state import default_state_dir, this_host
from tests.helpers.fresh_interpreter import call_with_environment
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
    monkeypatch.setenv("SERVER_STATE", str(tmp_path / "from-env"))  # a name nothing else reads
    assert configured_state_dir(job_of(VLLMServer())) == default_state_dir()
    assert default_state_dir({"EAGLE_ASSETS_CACHE": str(tmp_path / "cache")}) == tmp_path / "cache" / "vllm-servers"
    assert configured_state_dir(job_of(VLLMServer(state_dir=str(tmp_path / "set")))) == tmp_path / "set"
    assert configured_state_dir(job_of(VLLMServer(state_dir=dg.EnvVar("SERVER_STATE")))) == tmp_path / "from-env"
    run_config = {"resources": {"vllm_server": {"config": {"state_dir": str(tmp_path / "run")}}}}
    assert configured_state_dir(job_of(VLLMServer(state_dir="set")), run_config) == tmp_path / "run"


def with_a_cache_of_its_own(body, tmp_path: Path) -> None:
    """``body(tmp_path)`` in an interpreter whose user cache (and so default state folder) is under
    ``tmp_path``: tests/helpers/fresh_interpreter.py says why not in this one."""
    call_with_environment(
        f"{__name__}:{body.__name__}", str(tmp_path), environment={"EAGLE_ASSETS_CACHE": str(tmp_path / "cache")}
    )


def test_a_run_stops_the_servers_of_its_configured_state_dir(tmp_path):
    """The executor's reconcile looks in the run's state folder, not only in the default one."""
    with_a_cache_of_its_own(a_run_stops_the_servers_of_its_configured_state_dir, tmp_path)


def a_run_stops_the_servers_of_its_configured_state_dir(folder: str) -> None:
    tmp_path = Path(folder)
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


def test_the_demo_stops_the_servers_of_its_configured_state_dir(tmp_path):
    with_a_cache_of_its_own(the_demo_stops_the_servers_of_its_configured_state_dir, tmp_path)


def the_demo_stops_the_servers_of_its_configured_state_dir(folder: str) -> None:
    from eagle_assets.demo.command import run_demo

    tmp_path = Path(folder)
    configured = tmp_path / "configured"
    configured.mkdir()
    in_configured = write_state(configured, "127.0.0.1-8000", dead_pid(), this_host())
    defs = dg.Definitions(assets=[needs_the_server], resources={"vllm_server": VLLMServer(state_dir=str(configured))})
    with dg.DagsterInstance.ephemeral() as instance:
        [result] = run_demo(defs, instance, "demo")
        assert result.success
    assert not in_configured.exists()

"""The ``vllm_server`` resource: the vLLM server the ``reasoning_samples`` asset talks to, and how it is run.

Modes:

* ``managed`` — start ``python -m vllm.entrypoints.openai.api_server`` as a subprocess (an argument
  list, never a shell string), stream its log into the Dagster step log, stop it on exit (SIGTERM,
  then SIGKILL after a grace period) unless ``keep_alive``. A server this resource started earlier
  with the same launch fingerprint (e.g. kept alive, or started by a concurrent step) is attached to
  instead of starting a second one, and the last user out, not the launcher, stops a shared server
  (``server_lifecycle``). The state files are named by machine, bind address and port, so hosts may
  share the state folder (``server_state``). A server left without a live user (kept alive, or its
  user was killed) for ``idle_stop_after_s`` is stopped by the next run or command that looks
  (``server_registry``; ``eagle-assets servers``).
* ``systemd`` — ``systemctl start``/``stop`` a unit that runs the server; readiness as above.
* ``external`` — one or more base URLs of servers run by someone else (data-parallel replicas).

Every mode waits for readiness (``/health`` and ``/v1/models``) up to ``startup_timeout_s``.
The API key is read from the environment variable ``api_key_env`` and handed to vLLM through its
environment (``VLLM_API_KEY``), never through argv, and never logged.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import dagster as dg
from pydantic import Field

from eagle_assets.resources.server_lifecycle import (
    ManagedLaunch,
    VLLMServerError,
    launch_fingerprint,
    serve_managed,
    serve_systemd,
    server_urls,
    wait_ready,
)
from eagle_assets.resources.server_process import VLLM_MODULE
from eagle_assets.resources.server_state import DEFAULT_IDLE_STOP_S, server_state_dir
from eagle_assets.tiny_verifier.embedded import embedded_verifier

CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# vLLM's speculative decoding switch; its JSON names the method, the draft and K.
SPECULATIVE_FLAG = "--speculative-config"
_fallback_log = logging.getLogger("eagle_assets.vllm_server")


class VLLMServer(dg.ConfigurableResource):
    """An OpenAI-compatible vLLM server: `with server.serve(log=context.log) as base_urls: ...`."""

    mode: Literal["managed", "systemd", "external"] = Field(
        default="managed",
        description="managed: start/attach a local subprocess; systemd: start/stop a unit; "
        "external: use base_urls as they are.",
    )
    model: str = Field(
        default="",
        description="Model path or name for managed mode; empty serves the embedded verifier named by `embedded`.",
    )
    embedded: str = Field(
        default="tiny-qwen3",
        description="The embedded verifier served when model is empty: tiny-qwen3 or tiny-kimi (serve tiny-kimi "
        "with reasoning_parser kimi_k2; its required vLLM arguments are added).",
    )
    served_model_name: str = Field(default="", description="Name the server answers to (default: the model path).")
    host: str = Field(default="127.0.0.1", description="Interface to bind (managed) and to reach (managed/systemd).")
    port: int = Field(default=8000, description="Port of the managed/systemd server.")
    tensor_parallel_size: int = Field(default=1, description="GPUs per replica (8 for Kimi-K2.5).")
    reasoning_parser: str = Field(
        default="qwen3", description="vLLM --reasoning-parser (qwen3, kimi_k2, deepseek_r1, ...); empty for none."
    )
    max_num_seqs: int = Field(default=256, description="vLLM --max-num-seqs: sequences batched at once.")
    max_model_len: int = Field(
        default=0, description="vLLM --max-model-len (>= longest prompt + max_tokens); 0 = the model's own."
    )
    gpu_memory_utilization: float = Field(
        default=0.0, description="vLLM --gpu-memory-utilization (fraction of GPU memory); 0 = vLLM's default."
    )
    trust_remote_code: bool = Field(default=False, description="Pass --trust-remote-code (Kimi-K2.5 needs it).")
    extra_args: list[str] = Field(default_factory=list, description="More vLLM arguments, one list item each.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for the server (e.g. VLLM_CPU_KVCACHE_SPACE)."
    )
    api_key_env: str = Field(
        default="VLLM_API_KEY",
        description="Environment variable holding the API key (read at run time, never logged); unset = no key.",
    )
    systemd_unit: str = Field(default="", description="Unit name for systemd mode.")
    systemd_user: bool = Field(default=False, description="Use `systemctl --user` in systemd mode.")
    base_urls: list[str] = Field(
        default_factory=list, description="External mode: OpenAI base URLs (http://host:port/v1), one per replica."
    )
    startup_timeout_s: float = Field(
        default=1800.0, description="How long to wait for readiness; large models load for ~25 minutes."
    )
    stop_grace_s: float = Field(default=30.0, description="Seconds between SIGTERM and SIGKILL on stop.")
    keep_alive: bool = Field(default=False, description="Leave the server running after the step (later steps attach).")
    idle_stop_after_s: float = Field(
        default=DEFAULT_IDLE_STOP_S,
        ge=0,
        description="A managed server with no live user (kept alive, or orphaned by a killed run) for this many "
        "seconds is stopped by the next run or eagle-assets command that looks. Default 1 h: longer than a "
        "Kimi-K2.5 reload (~25 min), far shorter than eight idle GPUs overnight. 0 = never.",
    )
    state_dir: str = Field(
        default="", description="Where launch fingerprints and server logs live (default: <cache>/vllm-servers)."
    )

    @classmethod
    def kimi_k25(cls, model: str = "moonshotai/Kimi-K2.5", **overrides) -> VLLMServer:
        """The production preset: Kimi-K2.5 on one 8-GPU host (TP 8, kimi_k2 reasoning parser)."""
        preset = dict(
            mode="managed",
            model=model,
            served_model_name="kimi-k2.5",
            tensor_parallel_size=8,
            reasoning_parser="kimi_k2",
            trust_remote_code=True,
            max_num_seqs=256,
            max_model_len=32768,  # prompts up to 24K tokens + 8K new tokens
            gpu_memory_utilization=0.90,
            startup_timeout_s=3600.0,
            stop_grace_s=120.0,
        )
        return cls(**{**preset, **overrides})

    def speculating(
        self, draft: str | os.PathLike, num_speculative_tokens: int, *, port: int | None = None, extra_args=()
    ) -> VLLMServer:
        """These settings plus ``--speculative-config`` serving ``draft`` (a speculators EAGLE-3 checkpoint
        folder) as the eagle3 draft proposing ``num_speculative_tokens`` tokens per step, then ``extra_args``;
        on ``port`` when given."""
        if SPECULATIVE_FLAG in self.extra_args:
            raise VLLMServerError(
                f"vllm_server.extra_args already holds {SPECULATIVE_FLAG}: remove it, the draft is set by the "
                "asset that serves it"
            )
        if num_speculative_tokens < 1:
            raise VLLMServerError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens}")
        spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": num_speculative_tokens}
        args = [*self.extra_args, SPECULATIVE_FLAG, json.dumps(spec, sort_keys=True), *extra_args]
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self)(**{**fields, "extra_args": args, **({"port": port} if port else {})})

    # ----------------------------------------------------------------- launch description
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        return str(embedded_verifier(self.embedded).path())

    def command(self, model: str) -> list[str]:
        """The managed server's argv (no secrets in it)."""
        argv = [sys.executable, "-m", VLLM_MODULE, "--model", model, "--host", self.host, "--port", str(self.port)]
        argv += ["--tensor-parallel-size", str(self.tensor_parallel_size), "--max-num-seqs", str(self.max_num_seqs)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.reasoning_parser:
            argv += ["--reasoning-parser", self.reasoning_parser]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.gpu_memory_utilization:
            argv += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.trust_remote_code:
            argv.append("--trust-remote-code")
        # One access-log line per request would flood the step log at 200 in flight.
        argv.append("--disable-uvicorn-access-log")
        if not self.model:
            preset = embedded_verifier(self.embedded)
            # The preset's engine flags first: extra_args (last) win where they repeat one.
            argv += [*preset.serve_args, *preset.engine_flags()]
        return argv + list(self.extra_args)

    def launch_env(self) -> dict[str, str]:
        """The environment added to the server's (the API key aside)."""
        env = dict(self.env)
        if not self.model:
            # The embedded tiny verifier needs megabytes of KV cache; without this vllm-cpu would
            # reserve 92 % of RAM (and fail when that is not free). GPU builds ignore the variable.
            env.setdefault(CPU_KV_CACHE_ENV, os.environ.get(CPU_KV_CACHE_ENV, "1"))
        return env

    def fingerprint(self, argv: list[str], env: dict[str, str]) -> str:
        """Identity of a launch: argv, added env and (a hash of) the API key."""
        return launch_fingerprint(argv, env, self.api_key())

    def managed_launch(self) -> ManagedLaunch:
        """The managed server this configuration runs (resolving the model builds an embedded verifier)."""
        argv, env = self.command(self.resolved_model()), self.launch_env()
        return ManagedLaunch(
            argv=argv,
            env=env,
            fingerprint=self.fingerprint(argv, env),
            api_key=self.api_key(),
            bind_host=self.host,
            port=self.port,
            state_dir=server_state_dir(self.state_dir),
            startup_timeout_s=self.startup_timeout_s,
            stop_grace_s=self.stop_grace_s,
            keep_alive=self.keep_alive,
            idle_stop_after_s=self.idle_stop_after_s,
        )

    # ----------------------------------------------------------------- serving
    @contextmanager
    def serve(self, log=None) -> Iterator[list[str]]:
        """Make the server ready and yield its OpenAI base URLs; stop it afterwards if this call started it."""
        log = log or _fallback_log
        if self.mode == "external":
            if not self.base_urls:
                raise VLLMServerError("vllm_server mode 'external' needs base_urls (e.g. ['http://host:8000/v1']).")
            urls = [url.rstrip("/") for url in self.base_urls]
            log.info(f"vLLM server: using external base URLs {urls}")
            wait_ready(urls, log, alive=lambda: None, api_key=self.api_key(), timeout_s=self.startup_timeout_s)
            yield urls
        elif self.mode == "systemd":
            if not self.systemd_unit:
                raise VLLMServerError("vllm_server mode 'systemd' needs systemd_unit (the unit that runs vLLM).")
            with serve_systemd(
                self.systemd_unit,
                user=self.systemd_user,
                urls=server_urls(self.host, self.port),
                keep_alive=self.keep_alive,
                api_key=self.api_key(),
                timeout_s=self.startup_timeout_s,
                log=log,
            ) as urls:
                yield urls
        else:
            with serve_managed(self.managed_launch(), log) as urls:
                yield urls

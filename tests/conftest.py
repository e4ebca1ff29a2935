"""Fixtures every kind of test shares: the embedded tiny verifiers, one real vLLM server per verifier, one
`dagster dev` and one demo per verifier per test run, random training features.

The servers, the UI and the demos are slow to start; each is started once, in the background
(tests/helpers/background.py), at the run's first test when a test of the run needs it, and the tests
that need it wait for it. A run without such tests (``pytest tests/unit``) starts none.

Where a test lives says what it needs: ``unit/`` (in-process, no server), ``integration/`` (the real vLLM
server, real Dagster processes), ``e2e/`` (the demo, crashes, the browser); each test carries that
folder's marker, so ``-m "not e2e"`` and the like select by kind.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

# Tests never see a user's entry-point plugins unless they register them themselves.
os.environ.setdefault("EAGLE_ASSETS_DISABLE_ENTRY_POINTS", "1")

KINDS = ("unit", "integration", "e2e")
TESTS = Path(__file__).parent


# The demos run one after another (tiny-qwen3, tiny-kimi, tiny-qwen3 again); the tests that read the chain's
# later demos run last, so that every other test runs while the chain is still going, not after it.
LATER_DEMOS = "kimi_demo_run"


def _reads_the_later_demos(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return LATER_DEMOS in item.fixturenames or (callspec is not None and LATER_DEMOS in callspec.params.values())


# The session's vLLM server is stopped by the test that checks a shared server's last user stops it: after every
# other test of that server, and before the later demos' tests, which none of them uses.
SESSION_SERVER = "vllm_server_config"


def _phase(item) -> int:
    if _reads_the_later_demos(item):
        if SESSION_SERVER in item.fixturenames:
            raise pytest.UsageError(f"{item.nodeid} reads the later demos, which run after the session server stops")
        return 2
    return 1 if item.get_closest_marker("stops_session_server") else 0


def _order(item) -> tuple[int, int]:
    """The phase, then the unit tests, the ``early`` ones (long waits on processes of their own, at about one
    core's pace: right after the unit tests they run beside the demo chain, not after it), the rest."""
    rank = 0 if item.get_closest_marker("unit") else 1 if item.get_closest_marker("early") else 2
    return _phase(item), rank


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameters
def pytest_collection_modifyitems(items):
    for item in items:
        kind = Path(item.path).relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)
    items.sort(key=_order)  # stable: the order is otherwise kept


@pytest.fixture
def storage_root(tmp_path):
    """A StorageRoot resource in a fresh folder."""
    from eagle_assets.resources import StorageRoot

    return StorageRoot(root=str(tmp_path / "data"))


def _built(*names: str):
    """Waits until each embedded verifier in ``names`` is built, in that order (building it if nobody is):
    what a background resource needs before it starts. tiny-qwen3 first: the demos' chain starts from it,
    and two builds at once on 2 cores would delay it by the other's length."""

    def wait() -> None:
        from eagle_assets.tiny_verifier.cache import cached_embedded_verifier

        for name in names:
            cached_embedded_verifier(name)

    return wait


@pytest.fixture(scope="session")
def tiny_verifier():
    """The embedded tiny verifier's model folder (built once per recipe into the user cache, then reused)."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_verifier

    return cached_tiny_verifier()


@pytest.fixture(scope="session")
def vllm_server_config(tmp_path_factory):
    """The VLLMServer resource of the session's test server (tiny verifier, small CPU KV cache). The
    verifier is built (or waited for) when the server starts, in the background, not here."""
    from eagle_assets.resources import VLLMServer
    from tests.helpers.ports import free_port

    return VLLMServer(
        embedded="tiny-qwen3",  # served as the demo serves it (the preset's arguments)
        port=free_port(),
        max_model_len=16384,  # the tiny verifier's own limit: room for max_tokens 8192
        max_num_seqs=256,
        # Dev mode serves /server_info, where vLLM names the draft it speculates with (none here).
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
        state_dir=str(tmp_path_factory.mktemp("vllm-state")),
        stop_grace_s=20.0,
    )


@pytest.fixture(scope="session")
def vllm_server(vllm_server_config):
    """ONE real vLLM server on the tiny verifier for the whole run, started by the resource in the background."""
    from tests.helpers.background import InBackground
    from tests.helpers.logs import Lines
    from tests.helpers.runs import stop_server

    log = Lines()
    server = InBackground(
        "vllm-server",
        lambda: vllm_server_config.serve(log=log),
        on_abort=lambda: stop_server(vllm_server_config.port, vllm_server_config.state_dir),
        after=_built("tiny-qwen3"),
    )
    server.log = log  # what its launching step logged (the test that stops it reads it)
    yield server
    server.close()


@pytest.fixture(scope="session")
def vllm_server_urls(vllm_server):
    """The session server's base URLs, once it is ready."""
    return vllm_server.value()


@pytest.fixture(scope="session")
def tiny_kimi():
    """tiny-kimi's model folder (the Kimi-K2.5-shaped embedded verifier; built once per recipe, then reused)."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_kimi

    return cached_tiny_kimi()


@pytest.fixture(scope="session")
def kimi_server_config():
    """The VLLMServer resource serving tiny-kimi exactly as `eagle-assets demo --verifier tiny-kimi --port
    <its port>` does (kimi_k2 parser, vision inputs off, the demo's KV cache and state folder), so the
    tiny-kimi demo attaches to this server; the port after it is left for the demo's speculating server.
    tiny-kimi is built (or waited for) when the server starts, in the background."""
    from eagle_assets.resources.embedded import embedded_resources
    from tests.helpers.ports import free_port
    from tests.helpers.runs import KV_CACHE_GB

    return embedded_resources("tiny-kimi", port=free_port(span=2), env={"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GB})[
        "vllm_server"
    ]


@pytest.fixture(scope="session")
def kimi_server(kimi_server_config):
    """ONE real vLLM server on tiny-kimi for the whole run, started by the resource in the background."""
    from tests.helpers.background import InBackground
    from tests.helpers.runs import stop_server

    server = InBackground(
        "kimi-server",
        kimi_server_config.serve,
        on_abort=lambda: stop_server(kimi_server_config.port),
        after=_built("tiny-qwen3", "tiny-kimi"),
    )
    yield server
    server.close()


@pytest.fixture(scope="session")
def kimi_server_urls(kimi_server):
    """The tiny-kimi server's base URLs, once it is ready."""
    return kimi_server.value()


@pytest.fixture(scope="session")
def dagster_ui_server(tmp_path_factory):
    """The session's ``dagster dev`` with a throwaway DAGSTER_HOME and storage root, started in the background."""
    from tests.helpers.background import InBackground
    from tests.helpers.dagster_ui import serve_ui

    home, data = tmp_path_factory.mktemp("dagster_home"), tmp_path_factory.mktemp("data")
    ui = InBackground("dagster-dev", lambda: serve_ui(home, data))
    yield ui
    ui.close()


@pytest.fixture(scope="session")
def dagster_ui(dagster_ui_server):
    """The session's ``dagster dev``: its base URL, once it serves the asset graph."""
    return dagster_ui_server.value()


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """tiny-qwen3's demo after a SIGKILLed one (tests/helpers/demo.py), run in the background; tests read it
    through tests/e2e/conftest.py's ``demo``."""
    from tests.helpers.background import HEAVY, InBackground
    from tests.helpers.demo import demo_after_a_killed_one, stop_demos
    from tests.helpers.ports import free_port

    base, port, started = tmp_path_factory.mktemp("demo-tiny-qwen3"), free_port(span=2), []
    run = InBackground(
        "demo tiny-qwen3",
        lambda: demo_after_a_killed_one(base, "tiny-qwen3", port, started),
        on_abort=lambda: stop_demos(started, port),
        gate=HEAVY,
    )
    yield run
    run.close()


@pytest.fixture(scope="session")
def kimi_demo_run(tmp_path_factory, demo_run, second_training_run, kimi_server_config, kimi_server):
    """tiny-kimi's demo in tiny-qwen3's DAGSTER_HOME and storage root, once the qwen3 demo and the training
    beside it have ended (`make demo` then `make demo VERIFIER=tiny-kimi`; that run's evaluation goes on
    beside it): its capture attaches to the
    session's tiny-kimi server (served as the demo serves it, on the port given to the demo) instead of
    starting another; its speculating server is its own. Tests read it through tests/e2e/conftest.py's
    ``kimi_demo``."""
    from tests.helpers.background import HEAVY, InBackground
    from tests.helpers.demo import demo_beside, stop_demos

    base, started = tmp_path_factory.mktemp("demo-tiny-kimi"), []

    def ready():
        second_training_run.value()  # it trains on the qwen3 demo's current data: not while kimi's replaces it
        kimi_server.value()

    # On abort, the demo's speculating server is stopped; the capture server is the session's.
    run = InBackground(
        "demo tiny-kimi",
        lambda: demo_beside(demo_run.value(), base, "tiny-kimi", kimi_server_config.port, started),
        on_abort=lambda: stop_demos(started, kimi_server_config.port + 1),
        after=ready,
        gate=HEAVY,
    )
    yield run
    run.close()


@pytest.fixture(scope="session")
def back_demo_run(tmp_path_factory, demo_run, kimi_demo_run):
    """tiny-qwen3's demo once more in the same folders after tiny-kimi's (`make demo` after `make demo
    VERIFIER=tiny-kimi`): everything it needs is already stored. Tests read it through
    tests/e2e/conftest.py's ``back_demo``."""
    from tests.helpers.background import HEAVY, InBackground
    from tests.helpers.demo import demo_beside, stop_demos

    base, started, first = tmp_path_factory.mktemp("demo-back"), [], demo_run.value
    run = InBackground(
        "demo tiny-qwen3 again",
        lambda: demo_beside(first(), base, "tiny-qwen3", first().port, started),
        on_abort=lambda: stop_demos(started, first().port),
        after=kimi_demo_run.value,
        gate=HEAVY,
    )
    yield run
    run.close()


def _second_run_step(step: str, tmp_path_factory, demo_run, after):
    """``step`` of the evaluation tests' second training run beside the demo's (tests/helpers/demo.py), in the
    background once ``after`` is ready."""
    from tests.helpers.background import HEAVY, InBackground
    from tests.helpers.demo import second_run_step
    from tests.helpers.processes import kill_group

    base, started = tmp_path_factory.mktemp(f"second-run-{step}"), []
    return InBackground(
        f"second training run {step}",
        lambda: second_run_step(demo_run.value(), base, step, started),
        on_abort=lambda: [demo_run.abort(), *(kill_group(proc) for proc in started)],
        after=after,
        gate=HEAVY,
    )


@pytest.fixture(scope="session")
def second_training_run(tmp_path_factory, demo_run):
    """The second training run trained on the demo's data as soon as the demo has ended;
    tests/e2e/test_evaluation.py reads it."""
    run = _second_run_step("trained", tmp_path_factory, demo_run, after=demo_run.value)
    yield run
    run.close()


@pytest.fixture(scope="session")
def second_run_evaluation(tmp_path_factory, demo_run, second_training_run):
    """The second training run's evaluation, once it is trained (beside the tiny-kimi demo, which only needed
    the training to have read the qwen3 demo's data); tests/e2e/test_evaluation.py reads it."""
    run = _second_run_step("evaluated", tmp_path_factory, demo_run, after=second_training_run.value)
    yield run
    run.close()


@pytest.fixture(scope="session")
def vllm_extraction_run(tmp_path_factory):
    """A vLLM extraction killed and resumed (tests/helpers/features.py), run in the background; tests read it
    through tests/integration/hidden_states/test_vllm_extraction.py's ``killed_then_resumed``."""
    from eagle_assets.tiny_verifier.cache import cached_tiny_verifier
    from tests.helpers.background import HEAVY, InBackground
    from tests.helpers.features import vllm_extraction_killed_then_resumed
    from tests.helpers.processes import kill_group

    base, started = tmp_path_factory.mktemp("vllm-extraction"), []
    run = InBackground(
        "vllm extraction",
        lambda: vllm_extraction_killed_then_resumed(base, cached_tiny_verifier(), started),
        on_abort=lambda: [kill_group(proc) for proc in started],
        gate=HEAVY,
    )
    yield run
    run.close()


# Started at the run's first test when a test of the run needs them, longest first.
STARTED_EARLY = (
    "back_demo_run",
    "kimi_demo_run",
    "demo_run",
    "second_training_run",
    "second_run_evaluation",
    "vllm_extraction_run",
    "kimi_server",
    "vllm_server",
    "dagster_ui_server",
)


@pytest.fixture(scope="session", autouse=True)
def _start_early(request):
    """Start, at the run's first test, each slow session resource a test of the run will need, so that it
    loads while the tests before that one run."""
    needed = {name for item in request.session.items for name in item.fixturenames}
    # A fixture parametrized over these (tests/e2e/conftest.py's any_demo) names them as its parameters.
    needed |= {
        value
        for item in request.session.items
        if hasattr(item, "callspec")
        for value in item.callspec.params.values()
        if isinstance(value, str)
    }
    for name in STARTED_EARLY:
        if name in needed:
            # A resource that cannot even start fails the tests that need it (pytest keeps the error), not this one.
            with contextlib.suppress(Exception):
                request.getfixturevalue(name)


@pytest.fixture(scope="session")
def random_features(tmp_path_factory):
    """(storage root, verifier folder): random features for two partitions and a head-only verifier
    (tests/helpers/features.py's ``write_random_storage``). Shared read-only: a test that changes them
    works on a copy."""
    from tests.helpers.features import write_random_storage

    return write_random_storage(tmp_path_factory.mktemp("features"))


def pytest_terminal_summary(terminalreporter):
    """The background resources' timeline: what the run's critical path was made of."""
    from tests.helpers.background import OPENED

    if OPENED:
        terminalreporter.section("background resources (seconds from the run's start)")
        for resource in OPENED:
            terminalreporter.write_line(resource.timeline())

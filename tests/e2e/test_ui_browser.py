"""The UI as a person uses it: Debian's Chromium, driven by Playwright, clicks through the real `dagster dev`.

Open the global lineage, open the `prompts` asset, open its launchpad, pick a partition, launch,
and wait for the run's success; a screenshot of each step lands in the test's temporary folder.
Skips, saying why, where Playwright or a Chromium binary is missing (tests/helpers/browser.py).
"""

from __future__ import annotations

import re

import pytest

from eagle_assets.core.layout import PIPELINE
from eagle_assets.definitions import build_definitions
from tests.helpers.browser import browser_page, playwright_api
from tests.helpers.dagster_ui import graphql

sync_api = playwright_api()  # checked before any fixture starts the webserver
PARTITION = "demo_ood"  # tests/integration/ui/test_graphql.py launches `demo` on the same instance and counts them
RUN_TIMEOUT_MS = 180_000

RUN = """
query Run($runId: ID!) { runOrError(runId: $runId) { ... on Run { status assetSelection { path }
    tags { key value } } } }
"""


@pytest.fixture
def page():
    with browser_page() as page:
        yield page


def test_a_person_launches_prompts_for_a_partition_by_clicking(dagster_ui, page, tmp_path):
    expect = sync_api.expect

    # The global lineage: one asset group, so every asset is drawn at once (no collapsed group box to open).
    page.goto(f"{dagster_ui}/asset-groups")
    expect(page.get_by_text("Global asset lineage")).to_be_visible()
    for key in build_definitions().resolve_asset_graph().get_all_asset_keys():
        expect(node(page, key.to_user_string())).to_be_visible()
    page.screenshot(path=tmp_path / "1-lineage.png")
    node(page, "prompts").click()

    # An asset: picked in the graph, its description in the side panel, then its own page.
    page.get_by_role("link", name="View in Asset Catalog").click()
    expect(page).to_have_url(f"{dagster_ui}/assets/prompts")
    expect(page.get_by_text("Chat prompts of one dataset source")).to_be_visible()
    expect(page.get_by_text(PIPELINE, exact=True)).to_be_visible()  # the Definition panel's group
    page.screenshot(path=tmp_path / "2-asset.png")

    # The launchpad: the Materialize button's menu, a partition picked from the list.
    page.get_by_role("button", name="arrow_drop_down", exact=True).click()
    page.get_by_role("menuitem", name="Open launchpad").click()
    launchpad = page.get_by_role("dialog")
    expect(launchpad.get_by_text("Launchpad (configure assets)")).to_be_visible()
    launchpad.get_by_placeholder("Partition").click()
    page.get_by_role("menuitem", name=PARTITION, exact=True).click()
    expect(launchpad.get_by_text(f"partition: {PARTITION}")).to_be_visible()
    page.screenshot(path=tmp_path / "3-launchpad.png")

    # Launch: the run's page opens and shows Success once prompts and its checks are done.
    launchpad.get_by_role("button").filter(has_text="Materialize").click()
    expect(page).to_have_url(re.compile(f"^{re.escape(dagster_ui)}/runs/[0-9a-f-]+$"))
    run_id = page.url.rsplit("/", 1)[1]
    expect(page.get_by_text("Success", exact=True)).to_be_visible(timeout=RUN_TIMEOUT_MS)
    page.screenshot(path=tmp_path / "4-run.png")

    run = graphql(dagster_ui, RUN, {"runId": run_id})["runOrError"]
    assert run["status"] == "SUCCESS" and run["assetSelection"] == [{"path": ["prompts"]}]
    assert {"key": "dagster/partition", "value": PARTITION} in run["tags"]


def node(page, asset: str):
    """The asset's node in the lineage graph (drawn as SVG foreignObjects; the side tree has the same names)."""
    return page.locator("svg foreignObject").get_by_text(asset, exact=True)

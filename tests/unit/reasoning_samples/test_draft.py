"""The draft a generation server speculates with: read from a checkpoint folder, refused for another verifier,
resolved from the launchpad fields, added to a managed server's arguments, recorded on every row it served and
kept out of the recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_assets.reasoning_samples.capture_partition import CaptureSettings
from eagle_assets.reasoning_samples.draft import (
    DraftError,
    DraftSettings,
    check_draft_verifier,
    read_draft,
    speculating_server,
)
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.resources import VLLMServer
from tests.helpers.upstream import model_folder, served_from
from tests.unit.reasoning_samples.test_capture_partition import Server, questions, run_capture, write_questions


def draft_folder(folder: Path, verifier: Path | None = None, identity: str | None = None, run: str = "r1") -> Path:
    """A speculators-shaped checkpoint folder (the weights are stand-in bytes: nothing here loads them)."""
    folder.mkdir(parents=True)
    named = {"name_or_path": str(verifier) if verifier else "someone/else"}
    config = {"speculators_model_type": "eagle3", "speculators_config": {"verifier": named}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"weights")
    if identity is not None:
        training = {"training_run": run, "verifier": {"identity": identity, "path": str(verifier)}}
        (folder / "training.json").write_text(json.dumps(training))
    return folder


def test_a_kept_checkpoint_is_read_with_its_hashes_and_the_verifier_it_was_trained_for(tmp_path):
    served = served_from(model_folder(tmp_path / "model"))
    folder = draft_folder(tmp_path / "ckpt", tmp_path / "model", identity=served.identity)
    draft = read_draft(folder, 4)
    assert draft.path == str(folder.resolve()) and draft.num_speculative_tokens == 4
    assert len(draft.content_hash) == len(draft.config_hash) == 16 and draft.content_hash != draft.config_hash
    assert (draft.verifier_identity, draft.training_run) == (served.identity, "r1")
    assert json.loads(draft.as_json()) == draft.as_dict()
    check_draft_verifier(draft, served)  # trained on this verifier: accepted

    (folder / "model.safetensors").write_bytes(b"other weights")
    assert read_draft(folder, 4).content_hash != draft.content_hash  # the hash is of the content


def test_a_draft_of_another_verifier_is_refused_naming_both(tmp_path):
    served = served_from(model_folder(tmp_path / "model"))
    other = draft_folder(tmp_path / "ckpt", tmp_path / "elsewhere", identity="0123456789abcdef")
    with pytest.raises(DraftError, match=f"draft_checkpoint: .*0123456789abcdef.*identity {served.identity}"):
        check_draft_verifier(read_draft(other, 3), served)
    # Without a training.json: the verifier its config names decides, by its content.
    same = draft_folder(tmp_path / "foreign", tmp_path / "model")
    check_draft_verifier(read_draft(same, 3), served)
    foreign = draft_folder(tmp_path / "foreign2", None)
    with pytest.raises(DraftError, match="names verifier 'someone/else'"):
        check_draft_verifier(read_draft(foreign, 3), served)


def test_what_is_not_an_eagle3_checkpoint_is_refused_naming_the_field(tmp_path):
    with pytest.raises(
        DraftError, match=r"draft_checkpoint: .* not a draft checkpoint .*config\.json, model\.safetensors"
    ):
        read_draft(tmp_path / "nothing", 3)
    folder = draft_folder(tmp_path / "ckpt")
    (folder / "config.json").write_text(json.dumps({"speculators_model_type": "medusa"}))
    with pytest.raises(DraftError, match="'medusa', not 'eagle3'"):
        read_draft(folder, 3, field="draft_training_run")


def test_the_launchpad_fields_name_one_draft_by_folder_name_path_or_training_run(tmp_path):
    kept = tmp_path / "eagle3_checkpoint"
    draft_folder(kept / "0123abcd")
    latest = draft_folder(tmp_path / "latest")
    never = {}.__getitem__  # no training run is looked up unless one is named
    assert DraftSettings().draft(kept, never) is None
    assert DraftSettings(draft_checkpoint="0123abcd").draft(kept, never).path == str((kept / "0123abcd").resolve())
    by_path = DraftSettings(draft_checkpoint=str(latest), num_speculative_tokens=5).draft(kept, never)
    assert by_path.path == str(latest.resolve()) and by_path.num_speculative_tokens == 5
    assert DraftSettings(draft_training_run="r1").draft(kept, {"r1": latest}.__getitem__).path == by_path.path
    with pytest.raises(ValueError, match="both name a draft"):
        DraftSettings(draft_checkpoint="0123abcd", draft_training_run="r1")


def test_a_managed_server_speculates_with_the_draft_and_others_are_refused(tmp_path):
    draft = read_draft(draft_folder(tmp_path / "ckpt"), 3)
    base = VLLMServer(model="/m", port=8100, extra_args=["--enforce-eager"])
    assert speculating_server(base, None) is base
    argv = speculating_server(base, draft).command("/m")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": draft.path, "num_speculative_tokens": 3}
    assert "--enforce-eager" in argv and argv[argv.index("--port") + 1] == "8100"  # every other setting kept
    with pytest.raises(DraftError, match="mode 'external'"):
        speculating_server(VLLMServer(mode="external", base_urls=["http://h/v1"]), draft)
    with pytest.raises(DraftError, match="already holds --speculative-config"):
        speculating_server(speculating_server(base, draft), draft)


def test_rows_record_their_draft_and_the_recipe_does_not(tmp_path):
    """A set captured with a draft is the same set without one: the recipe (and so the sample set and its data
    version's recipe part) leaves the draft out, each row names the draft that served it."""
    prompts = write_questions(tmp_path, questions(4))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    verifier = served_from(model_folder(tmp_path / "model"))
    draft = read_draft(draft_folder(tmp_path / "ckpt", tmp_path / "model", identity=verifier.identity), 3)
    server = Server(failing={"q3"})
    plain = run_capture(prompts, folder, server, verifier=verifier)
    assert plain.draft is None and plain.draft_rows == 0
    server.failing.clear()
    drafted = run_capture(prompts, folder, server, verifier=verifier, draft=draft)
    assert drafted.recipe == plain.recipe and drafted.folder == plain.folder  # the same sample set, continued
    assert drafted.counts["captured_this_run"] == 1 and drafted.draft == draft and drafted.draft_rows == 1
    drafts = [r["draft"] for r in load_samples(drafted.folder).to_pylist()]
    assert drafts.count(None) == 3 and drafts.count(draft.as_json()) == 1


def test_a_draft_of_another_verifier_is_refused_before_anything_is_written(tmp_path):
    prompts = write_questions(tmp_path, questions(2))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    verifier = served_from(model_folder(tmp_path / "model"))
    draft = read_draft(draft_folder(tmp_path / "ckpt", tmp_path / "model", identity="0123456789abcdef"), 3)
    server = Server()
    with pytest.raises(DraftError, match="trained for verifier identity 0123456789abcdef"):
        run_capture(prompts, folder, server, CaptureSettings(), verifier=verifier, draft=draft)
    assert server.entered == 0 and not folder.exists()

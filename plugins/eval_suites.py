"""Built-in evaluation suites: MT-Bench, GSM8K, HumanEval, MATH-500 and AIME, the suites published EAGLE-3 drafts
are compared on, read through Hugging Face ``datasets``.

Each suite's location (eagle3_eval's ``suite_locations``; default its hub dataset) is a hub id (``id@revision``
pins one) or a local copy of the same shape — one file (``.parquet``, ``.jsonl``, ``.json``) or a folder, e.g.
the hub dataset downloaded with ``huggingface-cli download <id> --repo-type dataset --local-dir <folder>`` — so
an offline cluster reads the same rows. A hub dataset is fetched as a snapshot of its data files (only those the
suite reads) and read like a local folder; without hub access the Hugging Face cache's snapshot is used, and
without that the error names the location to set.

The prompts (part of each suite's ``version``): MT-Bench's two turns in order, the second asked with the
verifier's own first answer; GSM8K's question and HumanEval's function prompt as they are (zero-shot, as
SpecForge's benchmark asks them); MATH-500 and AIME problems with "Please reason step by step, and put your
final answer within \\boxed{}." after them.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from eagle_assets import hookimpl
from eagle_assets.plugins.local_files import files_version
from eagle_assets.sources import SkippedRow
from eagle_assets.suites import EvalSuite, SuitePrompt, SuiteUnavailable

DATA_SUFFIXES = (".parquet", ".jsonl", ".json")
# Where eagle3_eval takes a suite's location from: the message of every "cannot read" names it.
LOCATION_SETTING = "suite_locations"
REASON_STEP_BY_STEP = "\nPlease reason step by step, and put your final answer within \\boxed{}."


class BadRow(ValueError):
    """A row the suite cannot ask; ``kind`` names the reason (reported under it)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def text_field(row: dict, *names: str) -> str:
    """The first of ``names`` the row holds, as non-empty text; :class:`BadRow` naming what is wrong."""
    present = [name for name in names if row.get(name) is not None]
    if not present:
        raise BadRow("missing_field", f"no {' or '.join(repr(n) for n in names)} field")
    value = row[present[0]]
    if not isinstance(value, str):
        raise BadRow("not_text", f"{present[0]!r} is {type(value).__name__}, not text")
    if not value.strip():
        raise BadRow("empty_text", f"{present[0]!r} is empty")
    return value


def row_id(row: dict, index: int, *names: str) -> str:
    """The dataset's own id (the first of ``names`` it holds), else the row's index."""
    for name in names:
        if row.get(name) is not None:
            return str(row[name])
    return str(index)


def is_local(location: str) -> bool:
    expanded = os.path.expanduser(location)
    return Path(expanded).exists() or bool(glob.glob(expanded)) or expanded.startswith(("/", ".", "~"))


@dataclass
class HubSuite(EvalSuite):
    """A suite read from a Hugging Face dataset or a local copy of the same shape.

    ``data_files``: glob patterns, relative to a folder (a hub snapshot or a local copy), tried in order; the
    first that matches names the files read (the hub layout first, then the names a hand-made copy has).
    """

    hub_id: str = ""
    data_files: tuple[str, ...] = ()
    shape: str = ""  # the columns a row needs, for messages

    def _location(self, location: str | None) -> str:
        return location or self.default_location or self.hub_id

    def _unavailable(self, location: str, why: str) -> SuiteUnavailable:
        return SuiteUnavailable(
            f"eval suite {self.name!r}: {why}. Set eagle3_eval's {LOCATION_SETTING}: {{{self.name}: <location>}} "
            f"to a local copy (a .parquet/.jsonl/.json file or a folder of them; rows with {self.shape}) or a hub "
            f"id (now {location!r}; default {self.hub_id!r})"
        )

    def _folder_files(self, folder: Path, location: str) -> list[Path]:
        for pattern in self.data_files:
            found = sorted(p for p in folder.glob(pattern) if p.is_file() and p.name.endswith(DATA_SUFFIXES))
            if found:
                return found
        held = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith(DATA_SUFFIXES))
        raise self._unavailable(
            location,
            f"{folder} holds no file matching {list(self.data_files)} (it holds {held[:8] or 'no data file'})",
        )

    def _hub_snapshot(self, location: str) -> Path:
        from huggingface_hub import snapshot_download

        repo, _, revision = location.partition("@")
        errors = []
        for local_only in (False, True):  # the hub, then the Hugging Face cache (an offline machine)
            try:
                return Path(
                    snapshot_download(
                        repo,
                        repo_type="dataset",
                        revision=revision or None,
                        allow_patterns=list(self.data_files),
                        local_files_only=local_only,
                    )
                )
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        raise self._unavailable(location, f"the hub dataset {location!r} could not be read ({'; '.join(errors)})")

    def files(self, location: str | None = None) -> tuple[list[Path], str]:
        """(the data files, the data's version: the hub snapshot's commit, or the local files' hash)."""
        location = self._location(location)
        if is_local(location):
            expanded = os.path.expanduser(location)
            path = Path(expanded)
            if any(ch in expanded for ch in "*?["):
                files = sorted(Path(p) for p in glob.glob(expanded, recursive=True) if Path(p).is_file())
            elif path.is_dir():
                files = self._folder_files(path, location)
            elif path.is_file():
                files = [path]
            else:
                raise self._unavailable(location, f"{location!r} does not exist")
            if not files:
                raise self._unavailable(location, f"{location!r} matches no file")
            return files, files_version(files)
        snapshot = self._hub_snapshot(location)
        return self._folder_files(snapshot, location), snapshot.name[:12]  # snapshots are named by their commit

    def resolved_version(self, location: str | None = None) -> str:
        return f"{self.version}+{self.files(location)[1]}"

    def prompts(self, location: str | None = None) -> Iterator[SuitePrompt | SkippedRow]:
        from datasets import load_dataset

        files, _ = self.files(location)
        kinds = {"parquet" if f.suffix == ".parquet" else "json" for f in files}
        if len(kinds) > 1:
            raise self._unavailable(self._location(location), "its files mix Parquet and JSON; point at one kind")
        kind = kinds.pop()
        index = 0
        for file in files:
            # Streamed: a suite is read once per evaluation, so nothing is kept in the datasets cache.
            rows = iter(load_dataset(kind, data_files=[str(file)], split="train", streaming=True))
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    break
                except Exception as exc:
                    raise self._unavailable(
                        self._location(location), f"{file} cannot be read ({type(exc).__name__}: {exc})"
                    ) from exc
                try:
                    yield self.prompt_from(row, index)
                except BadRow as bad:
                    yield SkippedRow(f"{file.name}#{index}", f"{bad}: the row needs {self.shape}", bad.kind)
                index += 1

    def prompt_from(self, row: dict, index: int) -> SuitePrompt:
        raise NotImplementedError


@dataclass
class MTBench(HubSuite):
    """MT-Bench's 80 two-turn questions in 8 categories (the hub's ``prompt`` list, FastChat's ``turns``)."""

    def prompt_from(self, row: dict, index: int) -> SuitePrompt:
        turns = row.get("prompt") if row.get("prompt") is not None else row.get("turns")
        if turns is None:
            raise BadRow("missing_field", "no 'prompt' or 'turns' field")
        if not isinstance(turns, list) or not turns:
            raise BadRow("no_turns", "'prompt'/'turns' is not a non-empty list of turns")
        for turn in turns:
            if not isinstance(turn, str) or not turn.strip():
                raise BadRow("empty_text", "a turn is empty or not text")
        category = row.get("category") if isinstance(row.get("category"), str) else self.category
        return SuitePrompt(row_id(row, index, "prompt_id", "question_id"), tuple(turns), category)


@dataclass
class SingleTurn(HubSuite):
    """One question per row: ``fields`` (the first present) is the text, ``suffix`` follows it, ``id_fields``
    name the row, ``category_field`` its category (the suite's when absent)."""

    fields: tuple[str, ...] = ()
    id_fields: tuple[str, ...] = ()
    category_field: str | None = None
    suffix: str = ""

    def prompt_from(self, row: dict, index: int) -> SuitePrompt:
        text = text_field(row, *self.fields)
        category = row.get(self.category_field) if self.category_field else None
        return SuitePrompt(
            row_id(row, index, *self.id_fields),
            (text + self.suffix,),
            category if isinstance(category, str) and category else self.category,
        )


def builtin_suites() -> list[EvalSuite]:
    return [
        MTBench(
            name="mt_bench",
            description="MT-Bench: 80 two-turn questions, 8 categories (writing, roleplay, reasoning, math, coding, "
            "extraction, stem, humanities); the second turn asked with the verifier's own first answer",
            category="chat",
            hub_id="HuggingFaceH4/mt_bench_prompts",
            default_location="HuggingFaceH4/mt_bench_prompts",
            data_files=("data/train-*.parquet", "question.jsonl", "raw/question.jsonl", "*.parquet", "*.jsonl"),
            shape="'prompt' (or 'turns'): a list of user turns, 'category', 'prompt_id' (or 'question_id')",
        ),
        SingleTurn(
            name="gsm8k",
            description="GSM8K test split: 1319 grade-school math word problems, zero-shot",
            category="math",
            hub_id="openai/gsm8k",
            default_location="openai/gsm8k",
            data_files=("main/test-*.parquet", "test*.parquet", "test*.jsonl", "*.parquet", "*.jsonl"),
            shape="'question'",
            fields=("question",),
        ),
        SingleTurn(
            name="humaneval",
            description="HumanEval: 164 Python function prompts, asked as they are",
            category="code",
            hub_id="openai/openai_humaneval",
            default_location="openai/openai_humaneval",
            data_files=("openai_humaneval/test-*.parquet", "test*.parquet", "*.parquet", "*.jsonl"),
            shape="'prompt' and 'task_id'",
            fields=("prompt",),
            id_fields=("task_id",),
        ),
        SingleTurn(
            name="math500",
            description="MATH-500: 500 competition problems by subject, asked to reason step by step into \\boxed{}",
            category="math",
            hub_id="HuggingFaceH4/MATH-500",
            default_location="HuggingFaceH4/MATH-500",
            data_files=("test.jsonl", "test*.parquet", "*.jsonl", "*.parquet"),
            shape="'problem', 'subject' and 'unique_id'",
            fields=("problem",),
            id_fields=("unique_id",),
            category_field="subject",
            suffix=REASON_STEP_BY_STEP,
        ),
        SingleTurn(
            name="aime",
            description="AIME 2024: 30 problems, asked to reason step by step into \\boxed{}",
            category="math",
            hub_id="HuggingFaceH4/aime_2024",
            default_location="HuggingFaceH4/aime_2024",
            data_files=("data/train-*.parquet", "*.parquet", "*.jsonl"),
            shape="'problem' (or 'Problem') and 'id' (or 'ID')",
            fields=("problem", "Problem"),
            id_fields=("id", "ID"),
            suffix=REASON_STEP_BY_STEP,
        ),
    ]


@hookimpl
def register_eval_suites(register):
    for suite in builtin_suites():
        register(suite)

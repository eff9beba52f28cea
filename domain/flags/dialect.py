"""An engine's flag dialect: what its flags do their own way, as one object.

The flag code is written once (``schema.py``, ``validate.py``, ``argv.py``, ``risk.py``)
and is handed a :class:`FlagDialect`: how the engine's schema dump reads, which issue
sub-codes word its messages, how a value is checked and rendered, its drift table, its
risk layers and its policy file.  The dialects of the shipped engines are in
``domain/flags/dialects/``; an engine adapter (``domain/engines/``) carries its dialect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.flags.issues import FlagIssue, Translation
from domain.flags.policy import Policy
from domain.flags.risk import LayerTable, RiskLayer
from domain.flags.schema import (
    FlagSpec,
    Schema,
    SchemaReader,
    known_versions,
    load_schema_file,
    newest_version,
    schema_path,
)

ValueCheck = Callable[[FlagSpec, str, object, Policy, Sequence[Path]], list[FlagIssue]]


def _no_name_issue(_flag: str, _schema: Schema) -> FlagIssue | None:
    return None


def _no_note(_flag: str) -> Mapping[str, str] | None:
    return None


@dataclass(frozen=True)
class FlagDialect:
    family: str  # the schema files' prefix (``vllm_args_<version>.json``) and the engine family
    name: str  # as messages name the engine
    read_schema: SchemaReader  # one dump, as the engine's schema_dump.py writes it
    detail: Callable[[str | None], str | None]  # an issue's sub-code in this engine's words
    translation: Callable[[str, Mapping[str, object], Schema], Translation | None]  # the drift table's
    deprecated: Callable[[Schema, str], bool]
    check_value: ValueCheck
    render_scalar: Callable[[str, object], str]  # one value of ``--flag`` as an argv word
    attach_dashed: bool  # a value starting with "-" goes as ``--flag=value`` (else as its own word)
    policy: Callable[[], Policy]  # the shipped policy file
    risk_table: Callable[[], LayerTable]
    classify: Callable[[str], RiskLayer | None]  # a spelling's risk layer (None: unclassified)
    name_issue: Callable[[str, Schema], FlagIssue | None] = _no_name_issue  # a spelling refused as written
    dead_end_note: Callable[[str], Mapping[str, str] | None] = _no_note  # why a gone flag has no successor
    # The Build form's widgets: a switch with an off spelling as unset/on/off (its default
    # is not always off), and a list flag's text split into several values.
    form_three_way: bool = False
    form_list_words: bool = False
    # How a version's schema is found, where the engine has more than the shipped files
    # (SGLang: a runner host's dumped schema, schema.load_schema); None: the shipped file.
    load: Callable[[str, Path | None], Schema] | None = None
    schema_dir: Path | None = None  # where its schema files are (None: domain/flags/schemas)

    def schema(self, version: str, schema_dir: Path | None = None) -> Schema:
        """The schema of ``version``; SchemaError if there is none."""
        if self.load is not None:
            return self.load(version, schema_dir)
        path = schema_path(version, schema_dir or self.schema_dir, self.family)
        return load_schema_file(path, self.read_schema, self.name)

    def known_versions(self, schema_dir: Path | None = None) -> list[str]:
        return known_versions(schema_dir or self.schema_dir, self.family)

    def newest_version(self, schema_dir: Path | None = None) -> str:
        return newest_version(schema_dir or self.schema_dir, self.family, self.name)

    def all_schemas(self, schema_dir: Path | None = None) -> list[Schema]:
        """Every shipped schema, oldest first."""
        return [self.schema(v, schema_dir) for v in self.known_versions(schema_dir)]

"""Declarative harness adapters: one TOML file per harness in `adapters/`, validated on load.

Adding a harness needs no Python: a file says how to install the CLI into the host cache, the headless
command, the env vars and config files that point it at the rollout's proxy, the protocol it speaks, its shell
tool (for the oracle) and which files to keep as artifacts. Strings may use these placeholders, filled per
rollout: {instruction} {model} {proxy_url} {api_key} {home} {agent_dir} {workdir} {command}. Any other `{...}`
is left alone, so JSON and TOML config bodies need no escaping."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harnessproxy.errors import ConfigError
from harnessproxy.proxy.oracle import ShellTool
from harnessproxy.resources import data_dir

PLACEHOLDERS = ("instruction", "model", "proxy_url", "api_key", "home", "agent_dir", "workdir", "command")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
AGENT_DIR = "/opt/harnessproxy/agent"  # where the host cache's install is mounted, read-only


class AdapterError(ConfigError):
    """A broken or unknown adapter; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Install(_Strict):
    kind: Literal["npm", "pip", "none"]
    package: str | None = None  # npm or PyPI name
    version: str | None = None  # the pinned, tested version; `agents install NAME@V` overrides it
    extra_packages: list[str] = Field(default_factory=list)  # installed beside it, pinned (e.g. "mcp==2.3.0")

    @field_validator("version")
    @classmethod
    def _plain_version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z.+_-]*", v):
            raise ValueError("must be one exact version like 1.2.3")
        return v


class ConfigFile(_Strict):
    path: str  # inside the sandbox, usually under {home}
    content: str


class ShellToolSpec(_Strict):
    name: str
    argument: str = "command"
    extra: dict[str, str | int | bool] = Field(default_factory=dict)  # other required arguments, fixed
    finish: str | None = (
        None  # a command the harness must run to end (the oracle sends it after the solution)
    )


class Run(_Strict):
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    user: Literal["root", "sandbox"] = "root"  # "sandbox" = uid 1000, for CLIs that refuse root
    stdout_artifact: str | None = None  # keep the CLI's stdout as this artifact (e.g. its JSON event stream)


class Adapter(_Strict):
    name: str
    description: str = ""
    protocol: Literal["anthropic", "openai_chat", "openai_responses", "gemini", "any"]
    model: str  # the default model name sent upstream when --model is not given
    install: Install
    run: Run
    files: list[ConfigFile] = Field(default_factory=list)
    shell_tool: ShellToolSpec
    artifacts: list[str] = Field(
        default_factory=list
    )  # files or folders inside the sandbox, kept after the run
    source: str = ""  # the file it came from (set by the loader)

    @property
    def tool(self) -> ShellTool:
        t = self.shell_tool
        return ShellTool(t.name, t.argument, dict(t.extra), t.finish)

    def needs_install(self) -> bool:
        return self.install.kind != "none"


def render(text: str, values: dict[str, str]) -> str:
    """Fill the known placeholders; a missing value is an error, an unknown `{...}` stays as written."""

    def sub(m: re.Match[str]) -> str:
        if m[1] not in values:
            raise AdapterError(f"placeholder {{{m[1]}}} has no value here")
        return values[m[1]]

    return _PLACEHOLDER.sub(sub, text)


def _field_path(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def load_adapter(path: Path) -> Adapter:
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise AdapterError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise AdapterError(f"{path}: not valid TOML: {exc}") from exc
    try:
        adapter = Adapter.model_validate({**raw, "source": str(path)})
    except ValidationError as exc:
        problems = "; ".join(f"field {_field_path(e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise AdapterError(f"{path}: {problems}") from None
    if adapter.name != path.stem:
        raise AdapterError(f"{path}: field name: {adapter.name!r} must match the file name {path.stem!r}")
    if adapter.install.kind != "none" and not (adapter.install.package and adapter.install.version):
        raise AdapterError(f"{path}: field install: kind {adapter.install.kind!r} needs package and version")
    return adapter


def adapter_dirs(extra: Path | None = None) -> list[Path]:
    return [d for d in (extra, data_dir("adapters")) if d is not None]


def list_adapters(extra: Path | None = None) -> list[Path]:
    """Adapter files, a user folder's first (it may shadow a shipped one by name)."""
    seen: dict[str, Path] = {}
    for d in adapter_dirs(extra):
        for f in sorted(d.glob("*.toml")):
            seen.setdefault(f.stem, f)
    return [seen[k] for k in sorted(seen)]


def get_adapter(name: str, extra: Path | None = None) -> Adapter:
    """By name, or by path to a .toml file."""
    if name.endswith(".toml"):
        return load_adapter(Path(name))
    for f in list_adapters(extra):
        if f.stem == name:
            return load_adapter(f)
    known = ", ".join(f.stem for f in list_adapters(extra))
    raise AdapterError(f"no adapter named {name!r} (known: {known})")

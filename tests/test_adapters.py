"""Declarative adapters: every shipped file validates, placeholders fill, broken files fail with their path
and field, and the host cache install is idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnessproxy.agents.install import find_install, install
from harnessproxy.agents.spec import AdapterError, get_adapter, list_adapters, load_adapter, render
from harnessproxy.cli import app

SHIPPED = {"claude-code", "codex", "qwen-code", "pi", "gemini-cli", "opencode", "mini-swe-agent", "command"}
GOOD = """
name = "{name}"
protocol = "openai_chat"
model = "m"
[install]
kind = "none"
[run]
argv = ["sh", "-c", "{{command}}"]
[shell_tool]
name = "bash"
"""


def test_every_shipped_adapter_loads() -> None:
    names = {p.stem for p in list_adapters()}
    assert names >= SHIPPED
    for name in names:
        a = get_adapter(name)
        assert a.run.argv and a.shell_tool.name
        if a.needs_install():
            assert a.install.package and a.install.version  # pinned


def test_codex_goes_through_a_custom_provider_with_retries_off() -> None:
    codex = get_adapter("codex")
    assert "OPENAI_BASE_URL" not in codex.run.env  # Codex ignores it and would call api.openai.com
    config = render(codex.files[0].content, {"model": "m", "proxy_url": "http://127.0.0.1:9", "home": "/h"})
    assert 'base_url = "http://127.0.0.1:9/v1"' in config
    assert "request_max_retries = 0" in config and "stream_max_retries = 0" in config


def test_claude_pins_the_model_in_every_tier() -> None:
    env = get_adapter("claude-code").run.env
    tiers = [k for k in env if k.endswith("_MODEL")]
    assert len(tiers) >= 5 and all(env[k] == "{model}" for k in tiers)
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"


def test_render_fills_known_placeholders_only() -> None:
    text = render('{"url": "{proxy_url}", "x": {"y": 1}} {unknown}', {"proxy_url": "http://p"})
    assert text == '{"url": "http://p", "x": {"y": 1}} {unknown}'
    with pytest.raises(AdapterError, match=r"placeholder \{model\}"):
        render("{model}", {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name = 'broken'\nprotocol = [", "not valid TOML"),
        (
            GOOD.format(name="broken").replace('argv = ["sh", "-c", "{command}"]', ""),
            "field run.argv: Field required",
        ),
        (GOOD.format(name="broken").replace('"openai_chat"', '"smoke"'), "field protocol"),
        (GOOD.format(name="broken") + "surprise = 1\n", "field shell_tool.surprise"),
        (GOOD.format(name="other"), "field name"),
        (GOOD.format(name="broken").replace('kind = "none"', 'kind = "npm"'), "field install"),
    ],
)
def test_a_broken_adapter_names_the_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(AdapterError) as info:
        load_adapter(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_cli_lists_a_broken_adapter_and_refuses_to_use_it(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text("name = 'broken'\n")
    runner = CliRunner()
    listed = runner.invoke(app, ["agents", "list", "--adapters", str(tmp_path)])
    assert listed.exit_code == 0 and "broken" in listed.output and "claude-code" in listed.output
    used = runner.invoke(app, ["agents", "install", "broken", "--adapters", str(tmp_path)])
    assert used.exit_code == 2 and "broken.toml" in used.output and "Traceback" not in used.output
    unknown = runner.invoke(app, ["agents", "check", "nope"])
    assert unknown.exit_code == 2 and "no adapter named 'nope'" in unknown.output


def test_pip_install_is_idempotent_and_atomic(tmp_path: Path) -> None:
    """A real install into a cache (a tiny pure-Python package from PyPI); the second is a no-op."""
    (tmp_path / "tiny.toml").write_text(
        GOOD.format(name="tiny").replace('kind = "none"', 'kind = "pip"\npackage = "six"\nversion = "1.17.0"')
    )
    a = load_adapter(tmp_path / "tiny.toml")
    with pytest.raises(AdapterError, match=r"harnessproxy agents install tiny@1\.17\.0"):
        find_install(a, root=tmp_path / "cache")
    path, fresh = install(a, root=tmp_path / "cache")
    assert fresh and (path / "lib" / "six.py").is_file()
    again, fresh_again = install(a, root=tmp_path / "cache")
    assert again == path and not fresh_again
    assert not list((tmp_path / "cache" / "tiny").glob(".*tmp*"))
    with pytest.raises(AdapterError, match=r"installing tiny@0\.0\.0-nope failed"):
        install(a, "0.0.0-nope", root=tmp_path / "cache")

"""The repository explains itself: every command and option is documented and has help.

docs/cli.md has one ``## nvbridge <command>`` section per command, naming each of its options
(the sqlite-utils habit: a command nobody documented fails here, not in a user's terminal).
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from nvbridge.cli import cli

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMMANDS = sorted(cli.commands)


def _section(command: str) -> str:
    """The text of ``## nvbridge <command>`` up to the next section."""
    text = (DOCS / "cli.md").read_text()
    match = re.search(rf"^## nvbridge {re.escape(command)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/cli.md has no '## nvbridge {command}' section"
    return match.group(1)


def test_every_command_is_listed() -> None:
    assert len(COMMANDS) >= 4
    text = (DOCS / "cli.md").read_text()
    documented = set(re.findall(r"^## nvbridge (\S+)$", text, re.M))
    assert documented == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_command_has_help_and_every_option_is_documented(command: str) -> None:
    cmd = cli.commands[command]
    assert cmd.help and cmd.help.strip(), f"{command} has no help text"
    section = _section(command)
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.help and param.help.strip(), f"{command} {param.opts} has no help"
            longest = max(param.opts, key=len)
            assert f"`{longest}" in section, f"docs/cli.md does not document {command} {longest}"
        else:
            assert param.name and param.name.upper() in section, f"docs/cli.md omits {command}'s {param.name}"


def test_docs_link_to_files_that_exist() -> None:
    root = DOCS.parent
    for doc in [root / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(((?!https?:)[^)#]+)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_docs_name_files_and_scripts_that_exist() -> None:
    """Every repository file or folder a doc names (``scripts/bench/trace.py``, ``nvbridge/cli/``)
    and every ``python -m scripts...`` it runs is there: files move, and a doc's command must
    still run. Placeholders (``sample_db/NAME_cpu.sqlite``) are left out."""
    root = DOCS.parent
    named = re.compile(r"(?<![\w/.-])((?:scripts|tests|nvbridge|native|sample_db)/(?:[\w+-]+/)*(?:[\w+-]+\.\w+)?)")
    for doc in [root / "README.md", root / "sample_db" / "README.md", *DOCS.glob("*.md")]:
        text = doc.read_text()
        for path in named.findall(text):
            if not re.search(r"(?<![A-Za-z])(?!README)[A-Z]{3,}(?![a-z])", path):
                assert (root / path).exists(), f"{doc.relative_to(root)} names {path}, which does not exist"
        for module in re.findall(r"python3? -m (scripts(?:\.\w+)+)", text):
            file = root / (module.replace(".", "/") + ".py")
            assert file.exists() or (file.with_suffix("") / "__init__.py").exists(), f"{doc.name} runs {module}"

"""``tiresias keys``: the CURVE keys of tcp:// (docs/security.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from coordinator.service import curve
from tiresias_cli.kit import Group, argument, emit, json_option, option


@click.group("keys", cls=Group, help="CURVE keys for tcp:// (docs/security.md)")
def keys() -> None:
    pass


def _done(name: str, as_json: bool, action: Callable[[], tuple[dict[str, Any], str]]) -> int:
    """Print what ``action`` made, as JSON or as a sentence; a key file or directory it
    cannot use is one line and exit code 2."""
    try:
        data, text = action()
    except (OSError, ValueError) as e:
        print(f"tiresias keys {name}: {e}", file=sys.stderr)
        return 2
    emit(as_json, data, lambda _: text)
    return 0


@keys.command("generate", help="operator: the server keypair in DIR")
@argument(
    "directory",
    metavar="DIR",
    help="directory to create (its users/ and agents/ list who may connect)",
)
@json_option()
def generate(directory: str, as_json: bool) -> int:
    def make() -> tuple[dict[str, Any], str]:
        made = curve.generate(Path(directory))
        return {"directory": str(made), "server_key": str(made / "server.key")}, (
            f"wrote the server keypair to {made}: start the coordinator with "
            f"--curve-keys {made}; give users and agents {made / 'server.key'} "
            f"(public), and let their keys in with `tiresias keys add-user/add-agent`"
        )

    return _done("generate", as_json, make)


@keys.command("init", help="user or agent: your own keypair (made on first use anyway)")
@argument(
    "directory",
    metavar="[DIR]",
    required=False,
    help="default $XDG_CONFIG_HOME/tiresias, else ~/.config/tiresias",
)
@option(
    "--server-key", default=None, metavar="FILE", help="the coordinator's server.key to copy in"
)
@json_option()
def init(directory: str | None, server_key: str | None, as_json: bool) -> int:
    def make() -> tuple[dict[str, Any], str]:
        public = curve.init_client(
            Path(directory) if directory else curve.user_dir(),
            Path(server_key) if server_key else None,
        )
        return {"public_key": str(public)}, (
            f"your public key is {public}: send it to the operator to add"
        )

    return _done("init", as_json, make)


def _add(name: str, kind: str, who: str) -> None:
    @keys.command(name, help=f"operator: let a {who}'s public key in")
    @argument("directory", metavar="DIR", help="the directory of `keys generate`")
    @argument("key_name", metavar="NAME", help=f"the {who} name the key speaks for")
    @argument("public_key", metavar="PUBLIC_KEY", help="its client.key file")
    @json_option()
    def add(directory: str, key_name: str, public_key: str, as_json: bool) -> int:
        def make() -> tuple[dict[str, Any], str]:
            target = curve.add(Path(directory), kind, key_name, Path(public_key))
            return {"name": key_name, "key": str(target)}, (
                f"{key_name} may connect with the key in {target}"
            )

        return _done(name, as_json, make)


_add("add-user", curve.USERS, "user")
_add("add-agent", curve.AGENTS, "node")

"""``spotrun local ...``: run the embedded AWS in the foreground (:mod:`~spotrun.cli.local.up`), and inspect it and
inject chaos into it from another shell (:mod:`~spotrun.cli.local.control`).
"""

from __future__ import annotations

import typer

from spotrun.cli.local.control import (
    ec2_not_found,
    exhaust,
    fleet_error,
    gpu,
    instances,
    interrupt,
    kill,
    pools,
    refill,
)
from spotrun.cli.local.up import up

local_app = typer.Typer(
    help="The embedded AWS emulator as a local service, and chaos for it (interruptions, deaths, no capacity).",
    no_args_is_help=True,
)

# Registered in the order `spotrun local --help` lists them.
local_app.command()(up)
local_app.command()(instances)
local_app.command()(pools)
local_app.command()(interrupt)
local_app.command()(kill)
local_app.command()(exhaust)
local_app.command()(refill)
local_app.command("fleet-error")(fleet_error)
local_app.command("ec2-notfound")(ec2_not_found)
local_app.command()(gpu)

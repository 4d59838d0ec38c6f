"""``rampart certs dev``: a local CA and one certificate per service, for mTLS on one machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.cli.ui import fail, split_csv
from services.cli.ui import out as stdout
from services.common.dev_certs import SERVICE_NAMES, make_dev_certs
from services.common.errors import RampartError

certs_app = typer.Typer(
    help="Certificates for mTLS between the services (docs/security.md)", no_args_is_help=True
)


@certs_app.command("dev")
def dev(
    out: Annotated[
        Path, typer.Option(help="Folder for ca.pem and <name>.pem / <name>-key.pem (mode 700)")
    ] = Path(".rampart/certs"),
    names: Annotated[
        str,
        typer.Option(
            help="Comma-separated service names: one certificate each (CN, the identity that servers' "
            "allowed_callers name, and SAN)"
        ),
    ] = ",".join(SERVICE_NAMES),
    hosts: Annotated[
        str, typer.Option(help="Extra SANs on every certificate, comma-separated (DNS names or IPs)")
    ] = "",
    days: Annotated[int, typer.Option(min=1, max=3650, help="Validity")] = 30,
    force: Annotated[bool, typer.Option(help="Replace an existing CA in --out")] = False,
) -> None:
    """Make a development CA and certificates (not for production: use your PKI's, as Secrets).

    Then, per service: RAMPART_REMOTE__TLS__ENABLED=true, RAMPART_REMOTE__TLS__CA_FILE=<out>/ca.pem,
    RAMPART_REMOTE__TLS__CERT_FILE=<out>/<name>.pem, RAMPART_REMOTE__TLS__KEY_FILE=<out>/<name>-key.pem.
    """
    try:
        certs = make_dev_certs(out, split_csv(names), hosts=split_csv(hosts), days=days, overwrite=force)
    except RampartError as exc:
        raise fail(exc) from None
    stdout.print(f"CA: {certs.ca} (its key ca-key.pem, mode 600, signs more: keep it or delete it)")
    for name in split_csv(names):
        stdout.print(f"{name}: {certs.cert(name)}  key {certs.key(name)}")

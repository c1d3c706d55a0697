"""``rill console``: serve the web console (``rill.console``) until SIGTERM or SIGINT.

It prints ``rill console ready on http://HOST:PORT`` once it serves; logs (the audit of every change
included, logger ``rill.console.audit``) go to stderr."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence

from rill.cli._common import CliError, read_properties_file
from rill.cli.registry import parse_listen

READY_PREFIX = "rill console ready on "


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rill console", description="Serve a web console for a Kafka cluster.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="the cluster")
    parser.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                        help="HTTP address (default 127.0.0.1:8080)")  # fmt: skip
    parser.add_argument("--ssl-certfile", metavar="PEM",
                        help="serve HTTPS with this certificate chain (the session cookie then goes over HTTPS only)")
    parser.add_argument("--ssl-keyfile", metavar="PEM", help="the private key of --ssl-certfile (if not in it)")
    parser.add_argument("--secure-cookies", action="store_true",
                        help="send the session cookie over HTTPS only (behind a proxy that serves HTTPS)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties (security.protocol, sasl.*, ssl.*): the service identity, or with "
                             "--login the protocol and TLS settings people sign in over")  # fmt: skip
    parser.add_argument("--allow-writes", action="store_true",
                        help="let the service identity change the cluster (read-only otherwise)")  # fmt: skip
    parser.add_argument("--login", action="store_true",
                        help="people sign in with their SASL user (ACLs decide what each sees)")  # fmt: skip
    parser.add_argument("--login-mechanism", default="SCRAM-SHA-512", help="SASL mechanism of --login",
                        choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])  # fmt: skip
    parser.add_argument("--metrics", action="append", default=[], metavar="URL",
                        help="a broker's Prometheus endpoint (repeat for each broker) for the charts")  # fmt: skip
    parser.add_argument("--schema-registry", metavar="URL", help="decode Avro and JSON Schema records, show schemas")
    parser.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                        help="how often the charts sample (default 5)")  # fmt: skip
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a host name the console answers to (repeat); on a loopback address it answers only "
                             "loopback names and these, elsewhere any name unless some are given")  # fmt: skip
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging level (default INFO)")  # fmt: skip
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")  # fmt: skip
    try:
        host, port = parse_listen(args.listen)
        props = read_properties_file(args.command_config) if args.command_config else {}
    except (ValueError, CliError) as e:
        print(f"rill console: {e}", file=sys.stderr)
        return 2
    if args.login and not str(props.get("security.protocol", "")).upper().startswith("SASL_"):
        print("rill console: --login needs a SASL listener: give security.protocol=SASL_PLAINTEXT or SASL_SSL in "
              "--command-config", file=sys.stderr)  # fmt: skip
        return 2
    import uvicorn

    from rill.console.app import Settings, allowed_hosts, create_app

    if args.ssl_keyfile and not args.ssl_certfile:
        print("rill console: --ssl-keyfile needs --ssl-certfile", file=sys.stderr)
        return 2
    settings = Settings(args.bootstrap_server, props, args.allow_writes, args.login, args.login_mechanism,
                        args.metrics, args.schema_registry, args.sample_interval,
                        allowed_hosts(host, args.allowed_host),
                        secure_cookies=bool(args.secure_cookies or args.ssl_certfile))  # fmt: skip
    config = uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning", access_log=False,
                            lifespan="on", ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile)  # fmt: skip
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()
            scheme = "https" if args.ssl_certfile else "http"
            print(f"{READY_PREFIX}{scheme}://{bound[0]}:{bound[1]}", flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0

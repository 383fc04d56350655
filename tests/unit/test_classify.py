"""Classification of discovery failures: state, status, error class and a one-line suggestion."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from satellite.catalog import DiscoveryState, ErrorClass, InstallationStatus, Status
from satellite.classify import DiscoveryFailureKind, classify, failure_kind_of
from satellite.errors import FailureKind, InvalidInstallation, UpstreamError

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kind", "discovery", "status", "error_class"),
    [
        ("unreachable", DiscoveryState.FAILED, Status.OFFLINE, ErrorClass.RETRY_LATER),
        ("timeout", DiscoveryState.TIMEOUT, Status.OFFLINE, ErrorClass.RETRY_LATER),
        ("auth", DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION),
        ("protocol", DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION),
        ("invalid_configuration", DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION),
        ("command_not_found", DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION),
        ("permission_denied", DiscoveryState.FAILED, Status.ERROR, ErrorClass.NEEDS_USER_ACTION),
    ],
)
def test_each_kind_maps_to_its_state_status_and_class(
    kind: str, discovery: DiscoveryState, status: Status, error_class: ErrorClass
) -> None:
    # Given a failure kind / When it is classified
    classification = classify(kind, "something failed")

    # Then retry-later kinds go offline, the others need the user and go to error, each with a one-line suggestion
    assert (classification.discovery, classification.status, classification.error_class) == (
        discovery,
        status,
        error_class,
    )
    assert classification.kind.value == kind
    assert classification.suggestion
    assert "\n" not in classification.suggestion


def test_every_upstream_failure_kind_is_a_discovery_failure_kind() -> None:
    # Given the upstream failure kinds / When they are looked up as discovery kinds / Then all exist with equal values
    assert {DiscoveryFailureKind(kind.value).value for kind in FailureKind} == {kind.value for kind in FailureKind}


def test_auth_suggestion_names_the_missing_variable() -> None:
    # Given an auth failure caused by an undefined ${VAR} placeholder, and one rejected with 401
    missing = classify("auth", "github: headers: placeholder ${GITHUB_TOKEN} is not set; define GITHUB_TOKEN ...")
    rejected = classify("auth", "github: upstream https://x/mcp rejected the credentials with HTTP 401")

    # Then the first names the variable to define, the second points at the token and headers
    assert missing.suggestion == (
        "authentication failed: ${GITHUB_TOKEN} is not set; define GITHUB_TOKEN in the gateway's environment"
    )
    assert rejected.suggestion.startswith("authentication failed: check the token/headers")


def test_command_not_found_suggests_the_closest_launcher() -> None:
    # Given a mistyped launcher, an unknown command and no command at all
    typo = classify("command_not_found", "No such file or directory: 'uvxx'", command="uvxx")
    unknown = classify("command_not_found", "No such file", command="my-private-server")
    nameless = classify("command_not_found", "No such file")

    # Then the typo gets a "did you mean", the others only the instruction
    assert typo.suggestion == "command 'uvxx' not found: install it or fix the command; did you mean 'uvx'?"
    assert unknown.suggestion == "command 'my-private-server' not found: install it or fix the command"
    assert nameless.suggestion == "the command not found: install it or fix the command"


def test_permission_denied_names_the_command() -> None:
    # Given a command that may not run / When classified / Then the suggestion says how to fix it
    classification = classify("permission_denied", "Permission denied", command="./server.sh")
    assert classification.suggestion.startswith("permission denied running command './server.sh': make it executable")


def test_unknown_kind_is_retried_later() -> None:
    # Given a kind nobody defined / When classified / Then it is treated as transient
    classification = classify("cosmic_rays", "bit flip")
    assert (classification.status, classification.error_class) == (Status.OFFLINE, ErrorClass.RETRY_LATER)


def test_to_status_carries_every_field() -> None:
    # Given a classified timeout / When turned into a status / Then the status records error, kind, class and hint
    classification = classify("timeout", "did not answer")
    assert classification.to_status(NOW, "did not answer") == InstallationStatus(
        status=Status.OFFLINE,
        changed_at=NOW,
        last_error="did not answer",
        failure_kind="timeout",
        discovery=DiscoveryState.TIMEOUT,
        error_class=ErrorClass.RETRY_LATER,
        suggestion=classification.suggestion,
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (UpstreamError(FailureKind.AUTH, "401"), DiscoveryFailureKind.AUTH),
        (InvalidInstallation("url", "not http"), DiscoveryFailureKind.INVALID_CONFIGURATION),
        (FileNotFoundError(2, "No such file or directory", "uvxx"), DiscoveryFailureKind.COMMAND_NOT_FOUND),
        (PermissionError(13, "Permission denied"), DiscoveryFailureKind.PERMISSION_DENIED),
        (TimeoutError(), DiscoveryFailureKind.TIMEOUT),
        (ValueError("a bug"), None),
    ],
)
def test_exceptions_map_to_failure_kinds(error: BaseException, kind: DiscoveryFailureKind | None) -> None:
    # Given an exception raised while discovering / When its kind is asked / Then it is the matching kind or None
    assert failure_kind_of(error) == kind

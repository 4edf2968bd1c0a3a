"""A Ray Jobs API client whose every request is bounded and whose errors say what happened.

``JobSubmissionClient`` (Ray 2.60) sends its requests without a timeout (a head that accepts
connections but does not answer would hang the driver forever) and reports every refusal as a
bare RuntimeError. The subclass below adds a timeout to each request and raises `JobsApiError`
with the HTTP status; both hooks (``_do_request``, ``_raise_error``) are private to Ray and
pinned by the image's ``ray==2.60.0``; the driver's tests exercise them against a real head.

Authentication: the token is read from a file and sent as ``Authorization: Bearer <token>``,
the header Ray's own clients send. Passing the header explicitly makes Ray's client skip its own
token lookup (``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``/``~/.ray/auth_token``),
so the driver uses exactly the mounted Secret. The token never appears on a command line or in
a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import requests
from ray.exceptions import AuthenticationError
from ray.job_submission import JobSubmissionClient

from grpo_operator.api.exit_codes import ExitCode
from grpo_trainer.driver.settings import TOKEN_PATH_ENV


class DriverError(Exception):
    """A failure the driver reports in one clear line and exits on."""

    def __init__(self, message: str, code: int = ExitCode.RETRYABLE_FAILURE):
        super().__init__(message)
        self.code = int(code)


class JobsApiError(RuntimeError):
    """The Jobs API answered with an error status."""

    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {_first_line(text)}")
        self.status = status
        self.text = text


class BoundedJobClient(JobSubmissionClient):
    """JobSubmissionClient with a timeout on every request and typed errors."""

    def __init__(self, address: str, *, headers: dict[str, str], request_timeout: float):
        self.request_timeout = request_timeout
        # The constructor already talks to the head (version checks), through _do_request.
        super().__init__(address, headers=headers)

    def _do_request(self, method, endpoint, **kwargs):
        kwargs.setdefault("timeout", self.request_timeout)
        return super()._do_request(method, endpoint, **kwargs)

    def _raise_error(self, r):
        raise JobsApiError(r.status_code, r.text)


def read_token(path: Path | None) -> str | None:
    """The token in ``path`` (whitespace stripped, as Ray strips it), or None without a path."""
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise DriverError(f"cannot read the Ray auth token file {path}: {exc.strerror}") from None
    if not token:
        raise DriverError(f"the Ray auth token file {path} is empty")
    return token


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: no answer, or the head failed (5xx)."""
    if isinstance(exc, JobsApiError):
        return exc.status >= 500
    return isinstance(exc, ConnectionError | requests.RequestException)


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    if isinstance(exc, ConnectionError | requests.ConnectionError):
        return "connection failed"
    return _first_line(str(exc)) or type(exc).__name__


def auth_error(exc: AuthenticationError, address: str, token_file: Path | None) -> DriverError:
    """The head refused the request: 401 (no token sent) or 403 (wrong token)."""
    if "Authentication required" not in str(exc):
        return DriverError(
            f"authentication to the Ray head at {address} failed: it rejected the auth token "
            f"read from {token_file} (HTTP 403, wrong token)"
        )
    if token_file is None:
        return DriverError(
            f"the Ray head at {address} requires an auth token and none was sent "
            f"(pass --token-file or set ${TOKEN_PATH_ENV})"
        )
    return DriverError(
        f"the Ray head at {address} did not see the auth token read from {token_file} (HTTP 401)"
    )


def connect(
    address: str,
    token_file: Path | None,
    *,
    timeout: float,
    request_timeout: float,
    give_up: Callable[[], bool] = lambda: False,
) -> BoundedJobClient:
    """A client of the head at ``address``, retrying (bounded by ``timeout``) until it answers."""
    token = read_token(token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while True:
        remaining = deadline - time.monotonic()
        try:
            client = BoundedJobClient(
                address, headers=headers, request_timeout=max(0.5, min(request_timeout, remaining))
            )
        except AuthenticationError as exc:
            raise auth_error(exc, address, token_file) from None
        except Exception as exc:
            if not is_transient(exc):
                raise DriverError(
                    f"the Ray head at {address} is not a usable Jobs API: {describe_error(exc)}"
                ) from None
            last = describe_error(exc)
        else:
            client.request_timeout = request_timeout
            return client
        remaining = deadline - time.monotonic()
        if remaining <= 0 or give_up():
            raise DriverError(
                f"cannot reach the Ray head's Jobs API at {address} within {timeout:g}s "
                f"(last error: {last})"
            )
        time.sleep(min(1.0, remaining))


def _first_line(text: str) -> str:
    """The line of an error body worth showing (the last one of a traceback), shortened."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:300]
